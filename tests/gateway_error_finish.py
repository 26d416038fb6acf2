"""The Finish that ends a client call ("client-1") the gateway fails: a
JSON-RPC internal error from the gateway, with its reason and its text
matched (tests/playbook.py). From tests/test_legacy_input.py."""

from __future__ import annotations

from gateway import wire
from gateway.core.legacy_input import Finish
from tests.playbook import matching


def gateway_error(reason: str, text: str) -> Finish:
    return Finish(
        {
            "jsonrpc": "2.0",
            "id": "client-1",
            "error": {
                "code": wire.INTERNAL_ERROR,
                "message": matching(text),
                "data": {"source": wire.GATEWAY_SOURCE, "reason": reason},
            },
        }
    )
