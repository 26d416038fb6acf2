"""What each popular server is asked, and how its answers are checked
(stdlib only: imported by the fixture clients of both SDKs).

    filesystem  write_file then read_text_file of a file in --dir
    memory      create_entities then open_nodes of a fresh entity
    time        get_current_time in UTC: parses, and is within a minute of now
    everything  echo, then get-sum 2 + 3

Every run uses a fresh token, so an answer left over from an earlier run (a
memory file, a file in the directory) cannot pass for this run's.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_TIMEOUT,
    Report,
    add_target_option,
    check_target,
    leaf_exception,
    split_argv,
    start_watchdog,
)

SERVERS = ("filesystem", "memory", "time", "everything")
CLOCK_SLACK_S = 60.0

# (tool, arguments) -> (isError, first text block)
Call = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, str | None]]]


def parse_args(description: str) -> argparse.Namespace:
    """`CLIENT --server S [--dir D] [--timeout S] (--url URL | -- GATEWAY_OR_SERVER ...)`"""
    own, command = split_argv(sys.argv[1:])
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--server", choices=SERVERS, required=True, help="which scenario to run")
    parser.add_argument(
        "--dir", default=None, help="the directory the client offers as its root (filesystem)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    add_target_option(parser)
    args = parser.parse_args(own)
    check_target(parser, args.url, command)
    args.command = command
    if args.dir is not None:
        args.dir = str(Path(args.dir).resolve())
    return args


def root_uri(directory: str | None) -> str | None:
    """The client's one root: the scenario's directory, as a file:// URI."""
    return Path(directory).as_uri() if directory else None


async def scenario(
    server: str, directory: str | None, tools: list[str], call: Call, report: Report
) -> None:
    """The server's checked calls, each recorded as a step. `directory` is absolute."""
    token = f"popular-{uuid.uuid4().hex[:12]}"
    wanted = {
        "filesystem": ["write_file", "read_text_file"],
        "memory": ["create_entities", "open_nodes"],
        "time": ["get_current_time"],
        "everything": ["echo", "get-sum"],
    }[server]
    missing = [name for name in wanted if name not in tools]
    if not report.step("tools listed", not missing, missing=missing):
        return
    if server == "filesystem":
        if directory is None:
            report.fail("filesystem needs --dir")
            return
        path = f"{directory}/{token}.txt"
        err, text = await call("write_file", {"path": path, "content": token})
        if not report.step("tools/call write_file", not err, text=text):
            return
        err, text = await call("read_text_file", {"path": path})
        report.step(
            "tools/call read_text_file", not err and text == token, text=text, path=path, want=token
        )
    elif server == "memory":
        entity = {"name": token, "entityType": "gateway-test", "observations": [f"seen {token}"]}
        err, text = await call("create_entities", {"entities": [entity]})
        if not report.step("tools/call create_entities", not err, text=text):
            return
        err, text = await call("open_nodes", {"names": [token]})
        report.step("tools/call open_nodes", not err and f"seen {token}" in (text or ""), text=text)
    elif server == "time":
        err, text = await call("get_current_time", {"timezone": "UTC"})
        stamp = None
        try:
            stamp = datetime.fromisoformat(json.loads(text or "")["datetime"])
        except (ValueError, KeyError, TypeError) as exc:
            report.step("tools/call get_current_time", False, text=text, error=str(exc))
            return
        skew = abs((stamp - datetime.now(UTC)).total_seconds())
        report.step(
            "tools/call get_current_time",
            not err
            and stamp.utcoffset() is not None
            and stamp.utcoffset().total_seconds() == 0
            and skew < CLOCK_SLACK_S,
            text=text,
            skew_s=round(skew, 3),
        )
    else:
        err, text = await call("echo", {"message": token})
        report.step("tools/call echo", not err and token in (text or ""), text=text)
        err, text = await call("get-sum", {"a": 2, "b": 3})
        report.step("tools/call get-sum", not err and "5" in (text or ""), text=text)


def run_client(
    run: Callable[[argparse.Namespace, Report], Awaitable[None]],
    sdk_error: type[BaseException],
    anyio_run: Callable[..., Any],
) -> None:
    """A popular-server client's `main`, the same for both SDKs but for the
    SDK's error class (`McpError` in 1.x, `MCPError` in 2.x)."""
    args = parse_args(sys.modules["__main__"].__doc__.splitlines()[0])
    args.done = False
    report = Report()
    start_watchdog(report, args.timeout)
    try:
        anyio_run(run, args, report)
    except BaseException as group:
        exc = leaf_exception(group)
        if args.done and type(exc).__name__ == "BrokenResourceError":
            # mcp 1.30 quirk (see py1_mrtr_client.py): a server request arriving
            # while the session closes (server-everything asks for roots 350 ms
            # after `initialized`) is answered on the closed stream.
            report.step("server request during shutdown ignored", True, error=repr(exc))
        elif isinstance(exc, sdk_error):
            error = exc.error  # type: ignore[attr-defined]
            report.step("error", False, code=error.code, message=error.message)
            report.fail(f"JSON-RPC error {error.code}: {error.message}")
        elif isinstance(exc, TimeoutError):
            report.fail(f"timeout after {args.timeout:.0f}s")
        else:
            report.fail(f"{type(exc).__name__}: {exc}")
    report.finish()
