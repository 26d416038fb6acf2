"""One client request on its one path (runtime/client_calls.py takes its
steps): what it holds until it ends, where it waits, how it is cancelled."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from gateway import era, wire
from gateway.client_link import CURRENT_REQUEST, ClientLink
from gateway.core import routing
from gateway.runtime.pending_calls import ProgressRoute
from gateway.runtime.session_lease import SessionLease
from gateway.runtime.upstream_session import UpstreamSession

if TYPE_CHECKING:
    from gateway.runtime.tracing import RequestSpan

log = structlog.get_logger("gateway")

# A step that waits: it returns the next step that waits, or None.
Step = Coroutine[Any, Any, "Step | None"]
Serve = Callable[[], Awaitable[wire.Message | None]]


class ClientCall:
    """One client request on its one path. Synchronous steps run at once; a
    step that waits runs in a task of the link's group (`Step`: it returns
    the next step that waits, or None). Its reply reaches `replied` from the
    upstream reader when it was sent at once."""

    __slots__ = (
        "_scope",
        "decision",
        "ended",
        "legacy",
        "link",
        "msg",
        "msg_id",
        "progress",
        "retried",
        "routed_for",
        "share",
        "tg",
        "traced",
        "upstream",
    )

    def __init__(
        self,
        link: ClientLink,
        msg: wire.Message,
        tg: anyio.abc.TaskGroup,
        traced: RequestSpan | None,
    ) -> None:
        self.link = link
        self.msg = msg
        self.msg_id: wire.RequestId = msg["id"]
        self.tg = tg
        self.traced = traced
        # A legacy client's request, which a dual-era server serves on its
        # legacy side (DESIGN §5.3): one with modern `_meta` is served modern,
        # whatever came before on the link.
        self.legacy = (
            link.session is not None or msg["method"] == "initialize"
        ) and not era.is_modern(msg)
        self.decision: routing.Forward | None = None
        # The server era the decision was made for.
        self.routed_for: era.Era | None = None
        self.retried = False
        # What the call holds until it ends: a share of its session's lease,
        # the route of its upstream progress token.
        self.share: SessionLease | None = None
        self.progress: tuple[dict[str, ProgressRoute], str] | None = None
        self.ended = False
        # While a task runs for it: the task's scope. While its request is
        # upstream without one: the session and the upstream id.
        self._scope: anyio.CancelScope | None = None
        self.upstream: tuple[UpstreamSession, int] | None = None

    def release(self) -> None:
        share, progress = self.share, self.progress
        if share is not None:
            self.share = None
            share.release_shared()
        if progress is not None:
            self.progress = None
            progress[0].pop(progress[1], None)

    def end(self) -> None:
        self.ended = True
        self.upstream = None
        if self.share is not None or self.progress is not None:
            self.release()
        self.link.call_ended(self.msg_id)

    def answer_now(self, reply: wire.Message) -> None:
        # (end, inlined: every call is answered here)
        self.ended = True
        self.upstream = None
        if self.share is not None or self.progress is not None:
            self.release()
        self.link.call_ended(self.msg_id)
        try:
            self.link.send_nowait(reply)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("client went away before its answer", id=self.msg_id)

    def cancel(self) -> None:
        """InflightCall: the client gave up on the request."""
        if self._scope is not None:
            self._scope.cancel()  # the task ends the call as it unwinds
            return
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            session, upstream_id = upstream
            session.abandon_call(upstream_id, "cancelled by the client")
        self.end()

    def wait_in_task(self, step: Step) -> None:
        """Go on in a task: `step` waits."""
        self._scope = anyio.CancelScope()
        self.tg.start_soon(self._run, step)

    async def _run(self, step: Step | None) -> None:
        CURRENT_REQUEST.set(self.msg_id)
        scope = self._scope
        assert scope is not None
        handed_on = False
        try:
            with scope:
                while step is not None:  # each step returns the next one that waits
                    step = await step
                handed_on = True
            if scope.cancelled_caught:
                log.debug("request cancelled by the client", id=self.msg_id)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("client went away before its answer", id=self.msg_id)
        finally:
            if self._scope is scope:
                self._scope = None
            if scope.cancel_called or not handed_on or self.upstream is None:
                # Answered, failed or cancelled here (a cancellation that came
                # before a step could wait included): nothing goes on upstream.
                self.cancel()
