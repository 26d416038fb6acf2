"""`mcp-era-gateway probe`: classify an upstream server and report what it said."""

from __future__ import annotations

import os
import time

import anyio
import orjson

from gateway import wire
from gateway.backs.http_back import HttpServerConnection
from gateway.config import Config
from gateway.runtime.upstream_pool import UpstreamPool
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamUnavailable


async def _ignore(session: UpstreamSession, msg: wire.Message) -> None:
    if "id" in msg:
        await session.respond(
            wire.error_response(
                msg["id"], wire.METHOD_NOT_FOUND, "the probe answers no server requests"
            )
        )


def upstream_transport(pool: UpstreamPool) -> str:
    """How the gateway reached the upstream: an operator whose server still
    speaks only the deprecated HTTP+SSE transport should see it said."""
    if pool.http is None:
        return "stdio"
    for process in pool.supervisor.processes.values():
        if isinstance(process, HttpServerConnection) and process.sse_endpoint is not None:
            return "http+sse"
    return "streamable-http"


async def run_probe(config: Config) -> int:
    pool = UpstreamPool(config, _ignore)
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        await pool.start(tg)
        try:
            # One attempt: the command reports it rather than try again.
            await pool.ready(retry=False)
            report = {
                **pool.describe(),
                "transport": upstream_transport(pool),
                "probe": pool.probe_report,
            }
            code = 0
        except UpstreamUnavailable as exc:
            report = {"era": None, "error": str(exc)}
            code = 1
        report["elapsedMs"] = round((time.monotonic() - started) * 1000, 1)
        await pool.aclose()
        tg.cancel_scope.cancel()
    # The report is this command's output, so it goes to stdout.
    os.write(1, orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    return code
