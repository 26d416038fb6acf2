"""A legacy SDK client (mcp 1.30 `ClientSession` over `streamable_http_client`)
that keeps one session busy, for the replica tests.

    .peers/py1/bin/python tests/servers/py1_session_load.py URL SECONDS [PAUSE]

Opens a session and makes `echo` calls on it, one after another (PAUSE
seconds apart), for SECONDS. A call refused because the session is gone (the spec's
404, which the SDK reports as "Session terminated") starts a new session and
is made again on it — what the spec asks of a client — and is counted as a
new session, not as a failure. Prints one JSON line:

    {"calls": calls made, "sessions": sessions opened, "failures": [reasons],
     "session_ids": [each session's id]}
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

GONE = "Session terminated"


async def main(url: str, seconds: float, pause: float) -> dict[str, object]:
    done, sessions = 0, 0
    failures: list[str] = []
    ids: list[str | None] = []
    end = anyio.current_time() + seconds
    while anyio.current_time() < end and len(failures) < 5:
        sessions += 1
        try:
            async with (
                streamablehttp_client(url) as (read, write, session_id),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                ids.append(session_id())
                while anyio.current_time() < end:
                    text = f"call {done}"
                    with anyio.fail_after(10):
                        result = await session.call_tool("echo", {"text": text})
                    got = result.content[0].text if result.content else None
                    if result.isError or got != text:
                        failures.append(f"call {done}: {got!r}")
                    done += 1
                    await anyio.sleep(pause)
        except BaseException as exc:  # reported, and the run goes on
            leaf = _leaf(exc)
            if not (isinstance(leaf, McpError) and GONE in str(leaf)):
                failures.append(f"call {done}: {type(leaf).__name__}: {leaf}")
    return {"calls": done, "sessions": sessions, "failures": failures, "session_ids": ids}


def _leaf(exc: BaseException) -> BaseException:
    """The SDK's task groups wrap what failed in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    print(json.dumps(anyio.run(main, sys.argv[1], float(sys.argv[2]), pause)))
