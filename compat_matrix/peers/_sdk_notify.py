"""The notifications check of the SDK fixture clients (py1_client.py, py2_client.py).

anyio-based, so only for the SDK venvs (both have anyio); the raw client has
its own. The SDK hands the client its notifications (a message handler); they
are kept here as wire-shaped dicts, in order, and the checks wait on them.
See `_common.py` for the triggers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from _common import (
    NOTIFY_STEP,
    NOTIFY_WAIT,
    Report,
    Trigger,
    delivery_step,
    is_tools_changed,
    is_update,
    notify_plan,
)

Predicate = Callable[[dict[str, Any]], bool]
# Calls a trigger tool: (ok, first text of the result).
CallTool = Callable[[Trigger], Awaitable[tuple[bool, str | None]]]


class Inbox:
    """The notifications the SDK handed over, as {"method", "params"} dicts."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._arrived = anyio.Event()

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait(self, pred: Predicate, since: int, seconds: float) -> dict[str, Any] | None:
        """The first message from `messages[since]` on that matches; None after `seconds`."""
        with anyio.move_on_after(seconds):
            while True:
                arrived = self._arrived
                for message in self.messages[since:]:
                    if pred(message):
                        return message
                await arrived.wait()
        return None


async def call_step(report: Report, call: CallTool, trigger: Trigger) -> bool:
    ok, text = await call(trigger)
    return report.step(f"{NOTIFY_STEP}tools/call {trigger.tool}", ok, text=text)


async def legacy_check(
    report: Report,
    inbox: Inbox,
    tools: list[str],
    *,
    resource_uris: Callable[[], Awaitable[list[str]]],
    subscribe: Callable[[str], Awaitable[Any]],
    unsubscribe: Callable[[str], Awaitable[Any]],
    call: CallTool,
    channel: str,
) -> None:
    """The legacy check: `resources/subscribe`, the triggers, both notifications
    on the session (`channel` says where they ride), `resources/unsubscribe`."""
    uris = await resource_uris() if "add_note" not in tools else []
    plan = notify_plan(tools, uris)
    if not report.step(
        f"{NOTIFY_STEP}trigger tools listed", plan is not None, tools=None if plan else tools
    ):
        return
    assert plan is not None
    since = len(inbox.messages)
    await subscribe(plan.uri)
    report.step(f"{NOTIFY_STEP}resources/subscribe", True, uri=plan.uri)
    path = [f"resources/subscribe {plan.uri}"]
    if not await call_step(report, call, plan.update):
        return
    updated = await inbox.wait(lambda m: is_update(m, plan.uri), since, NOTIFY_WAIT)
    report.step(f"{NOTIFY_STEP}resources/updated on the session", updated is not None)
    path.append("resources/updated")
    if plan.list_change is not None:
        if not await call_step(report, call, plan.list_change):
            return
        changed = await inbox.wait(is_tools_changed, since, NOTIFY_WAIT)
        report.step(f"{NOTIFY_STEP}tools/list_changed on the session", changed is not None)
        path.append("tools/list_changed")
    else:
        # server-everything: only the one it sends after `initialized` (not required).
        seen = any(is_tools_changed(m) for m in inbox.messages)
        path.append(
            "tools/list_changed: no trigger on this server"
            + (" (its post-initialized one arrived)" if seen else "")
        )
    if plan.stop is not None:
        await call_step(report, call, plan.stop)
    await unsubscribe(plan.uri)
    report.step(f"{NOTIFY_STEP}resources/unsubscribe", True, uri=plan.uri)
    delivery_step(report, f"{'; '.join(path)} ({channel}); unsubscribed")
