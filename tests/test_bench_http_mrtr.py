"""The MRTR round trip over HTTP (issue #12): the bench's HTTP client builds the
retry an `input_required` result asks for (bench/http_client.py)."""

from __future__ import annotations

from bench.client import ELICIT_ANSWER
from bench.http_client import retry_params


def test_the_retry_answers_every_elicitation_and_carries_the_state() -> None:
    result = {
        "resultType": "input_required",
        "inputRequests": {
            "e1": {"method": "elicitation/create", "params": {}},
            "s1": {"method": "sampling/createMessage", "params": {}},
        },
        "requestState": "opaque",
    }
    assert retry_params(result) == {
        "name": "ask",
        "arguments": {},
        "inputResponses": {"e1": ELICIT_ANSWER},
        "requestState": "opaque",
    }


def test_a_final_result_asks_for_no_retry() -> None:
    assert retry_params({"resultType": "complete", "content": []}) is None
    assert retry_params({"content": []}) is None
