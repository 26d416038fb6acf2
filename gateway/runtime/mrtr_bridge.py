"""The MRTR bridge at work, modern client → legacy server (DESIGN §5.1.6-5.1.8).

A call that may need client input runs upstream as a task the bridge owns, so
it can outlive the client's request: when the legacy server asks for
sampling, elicitation or roots, the client's request is answered with
`input_required` and the upstream call stays parked (hold mode) until the
retry brings the answers, or until the state expires and the call is
cancelled. Replay mode parks nothing: it cancels the upstream call, seals the
answers so far into the state, and re-runs the call on the retry.

Every decision about a call is `core.mrtr_hold.HoldTable`'s, a retry's
included (core/mrtr_retry_door.py). This module is the bridge's front: which
calls it takes, and a new call, re-run or retry handed to the table;
runtime/held_call_runner.py carries out the table's commands and turns what
it waited for into the table's events.
"""

from __future__ import annotations

import secrets
from fnmatch import fnmatchcase
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gateway import wire
from gateway.client_link import MRTR_ROUND, ClientLink
from gateway.config import Config
from gateway.core import held_call, mrtr_shapes
from gateway.core import mrtr_hold_events as hold
from gateway.core.mrtr_hold import HoldTable
from gateway.core.mrtr_parking import HoldSettings
from gateway.core.request_state import Sealer, params_digest
from gateway.core.routing import Forward
from gateway.runtime.held_call_runner import (
    ForwardFn,
    HeldCallRunner,
    HeldEntry,
    ShapeFn,
    Timer,
    now_ms,
)
from gateway.runtime.upstream_session import WIND_DOWN, UpstreamSession

# service.py takes HeldEntry from here, as the holder of a session lease.
__all__ = ["HeldEntry", "MrtrBridge"]

log = structlog.get_logger("gateway.mrtr")

STATE_KEY_ENV = "MCP_ERA_GATEWAY_MRTR_STATE_KEY"


def random_key_can_matter(config: Config) -> bool:
    """Whether a per-process random requestState key can fail a client, so
    that its start-up warning is worth a line (issue #14: it was printed on
    every start). It can when a state may be opened by another process than
    the one that sealed it: `instance_id` is set only for replicas, where a
    retry that reaches another replica needs the shared key to be told
    `other-instance` (or, in replay mode, to be served at all); and over the
    HTTP front with replay tools, a replica or a restart serves retries from
    states it did not seal. Over stdio the client's retries come back to the
    one process that sealed them, and it lives as long as that client; over
    HTTP in hold mode alone a retry needs the call parked in this process,
    whatever the key."""
    if config.instance_id is not None:
        return True
    return config.listen != "stdio" and bool(config.replay_tools)


class MrtrBridge:
    """The MRTR bridge of one gateway: its sealer, hold table and runner."""

    def __init__(self, config: Config, forward: ForwardFn, shape: ShapeFn) -> None:
        self.config = config
        keys = config.state_keys()
        if not keys and random_key_can_matter(config):
            log.warning(
                "no requestState key configured; using a random one for this process "
                f"(set [mrtr] state_key or {STATE_KEY_ENV} to share it between replicas)"
            )
        raw = [key.encode() for key in keys] or [secrets.token_bytes(32)]
        self.sealer = Sealer(raw, config.instance_id or secrets.token_hex(6))
        settings = HoldSettings(
            state_ttl=config.state_ttl,
            max_parked_calls=config.max_parked_calls,
            max_parked_per_principal=config.max_parked_per_principal,
            request_timeout=config.request_timeout,
            wind_down=WIND_DOWN,
        )
        self.table = HoldTable(settings, self.sealer)
        self.runner = HeldCallRunner(config, self.table, forward, shape)

    def start(self, tg: TaskGroup) -> None:
        self.runner.start(tg)

    @property
    def entries(self) -> dict[hold.CallKey, HeldEntry]:
        """Every bridged call the runtime has, parked or running."""
        return self.runner.entries

    def fire_timer(self, timer: Timer) -> None:
        """Let a running timer fire now (tests fire the state_ttl this way)."""
        self.runner.timers.fire_now(timer)

    @property
    def held(self) -> dict[str, HeldEntry]:
        """The parked calls, by handle."""
        return {h: self.entries[k] for h, k in self.table.parked.items() if k in self.entries}

    @property
    def rounds(self) -> int:
        return self.table.rounds

    # -- which calls the bridge takes ------------------------------------------------
    def _replay_mode(self, decision: Forward) -> bool:
        if decision.method != "tools/call" or not self.config.replay_tools:
            return False
        name = (decision.params or {}).get("name")
        return isinstance(name, str) and any(
            fnmatchcase(name, pattern) for pattern in self.config.replay_tools
        )

    async def call(
        self,
        link: ClientLink,
        msg: wire.Message,
        decision: Forward,
        session: UpstreamSession,
        wait_limit: float | None = None,
    ) -> wire.Message:
        """`wait_limit`: how long each round waits for the server (a task's
        call: its time to live); request_timeout when None."""
        msg_id = msg["id"]
        params = msg.get("params") or {}
        # MRTR plumbing is the gateway's business: a legacy server never sees it.
        upstream_params = mrtr_shapes.without_retry_params(decision.params)
        decision = Forward(
            decision.method,
            upstream_params,
            decision.shape,
            decision.client_era,
            decision.client_capabilities,
            decision.log_level,
        )
        if mrtr_shapes.is_retry(params):
            return await self._retry(link, msg, decision, session)
        if self._replay_mode(decision):
            call = self._new_call(link, msg, decision, replay={}, replay_round=0)
        else:
            call = self._new_call(link, msg, decision)
        call.wait_limit = wait_limit
        return await self.runner.run(msg_id, call, link, decision, session)

    def _new_call(
        self,
        link: ClientLink,
        msg: wire.Message,
        decision: Forward,
        replay: dict[str, Any] | None = None,
        replay_round: int = 0,
    ) -> held_call.HeldCall:
        return held_call.HeldCall(
            handle=None if replay is not None else secrets.token_urlsafe(12),
            principal=link.principal,
            method=decision.method,
            digest=params_digest(msg.get("params")),
            client_caps=decision.client_capabilities,
            max_rounds=self.config.max_rounds,
            replay_answers=replay,
            replay_round=replay_round,
        )

    # -- server requests during a bridged call ------------------------------------
    async def on_server_request(self, entry: HeldEntry, msg: wire.Message) -> None:
        """A legacy server's request while `entry` holds its session."""
        await self.runner.step(entry, hold.ServerAsked(entry.key, msg, anyio.current_time()))

    def on_server_cancel(self, entry: HeldEntry, upstream_id: object) -> None:
        if wire.is_request_id(upstream_id):
            self.table.handle(hold.ServerCancelledAsk(entry.key, upstream_id))  # type: ignore[arg-type]

    # -- the client's retry ------------------------------------------------------------
    async def _retry(
        self, link: ClientLink, msg: wire.Message, decision: Forward, session: UpstreamSession
    ) -> wire.Message:
        params = msg.get("params") or {}
        presented = hold.RetryPresented(
            msg["id"],
            link.principal,
            decision.method,
            params_digest(params),
            params.get(mrtr_shapes.REQUEST_STATE),
            params.get(mrtr_shapes.INPUT_RESPONSES),
            anyio.current_time(),
            now_ms(),
        )
        cmds = self.table.handle(presented)
        if cmds and isinstance(rerun := cmds[0], hold.RerunCall):
            assert len(cmds) == 1, cmds
            call = self._new_call(
                link, msg, decision, replay=rerun.replay_answers, replay_round=rerun.replay_round
            )
            MRTR_ROUND.set(rerun.replay_round)  # for the retry's span (runtime/tracing.py)
            return await self.runner.run(msg["id"], call, link, decision, session)
        return await self.runner.retry(link, cmds)
