"""Tools a legacy server runs only as tasks, as the gateway reads them
(2025-11-25 basic/utilities/tasks "Tool-Level Negotiation", "Result
Retrieval"; core/legacy_task_tools.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway import wire
from gateway.core import legacy_task_tools as tools
from gateway.core.legacy_tasks import RELATED_TASK
from tests.fuzz_requests import JSON


def test_the_tools_that_may_or_must_run_as_tasks_are_named() -> None:
    listed = {
        "tools": [
            {"name": "a", "execution": {"taskSupport": "required"}},
            {"name": "b", "execution": {"taskSupport": "optional"}},
            {"name": "c"},
            {"name": 7, "execution": {"taskSupport": "required"}},
            "junk",
        ]
    }
    assert tools.task_support(listed) == {"a": "required", "b": "optional"}
    assert tools.runs_as_task("required", client_wants_tasks=False)
    assert tools.runs_as_task("optional", client_wants_tasks=True)
    assert not tools.runs_as_task("optional", client_wants_tasks=False)
    assert not tools.runs_as_task(None, client_wants_tasks=True)


def test_the_capability_is_the_tools_call_request_one() -> None:
    assert tools.server_runs_tool_tasks({"tasks": {"requests": {"tools": {"call": {}}}}})
    assert not tools.server_runs_tool_tasks({"tasks": {"list": {}}})
    assert not tools.server_runs_tool_tasks({"tasks": "yes"})


def test_the_call_asks_for_a_task_and_its_result_loses_the_related_task_key() -> None:
    assert tools.augmented({"name": "a"}, 5000) == {"name": "a", "task": {"ttl": 5000}}
    created = wire.result_response(1, {"task": {"taskId": "t-1", "status": "working"}})
    assert tools.created_task(created) == "t-1"
    result = {"content": [], "_meta": {RELATED_TASK: {"taskId": "t-1"}, "keep": 1}}
    shaped = tools.call_reply(wire.result_response(2, result))
    assert shaped["result"]["_meta"] == {"keep": 1}


@given(reply=st.dictionaries(st.sampled_from(["result", "error", "id"]), JSON, max_size=3))
def test_any_reply_is_read_without_raising(reply: dict[str, Any]) -> None:
    """A hostile server's answers: no shape makes the reading raise."""
    tools.created_task(reply)
    tools.call_reply(reply)
    tools.task_support(reply.get("result"))
