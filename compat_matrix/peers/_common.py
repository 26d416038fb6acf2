"""Shared plumbing for the fixture clients (stdlib only: imported from every venv).

Every fixture client prints exactly ONE JSON object on stdout,
    {"ok": bool, "era": str | null, "steps": [...], "error": str | null}
and exits 0 iff every check passed, so tests and the compatibility matrix can
treat all peers alike whatever SDK they wrap.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, NoReturn

DEFAULT_TIMEOUT = 30.0
ECHO_TEXT = "hello from the compat matrix"


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """The client's own options, and the server command after `--` (may be empty)."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def add_target_option(parser: argparse.ArgumentParser, *, sse: bool = False) -> None:
    parser.add_argument(
        "--url",
        metavar="URL",
        help="connect to this Streamable HTTP endpoint instead of spawning `-- SERVER_COMMAND`",
    )
    if sse:
        # Only the legacy SDK clients: HTTP+SSE (2024-11-05) is a legacy-only transport.
        parser.add_argument(
            "--sse-url",
            metavar="URL",
            help="connect over the deprecated HTTP+SSE transport: URL is the event "
            "stream's endpoint (GET .../sse), which names where to POST",
        )


def check_target(
    parser: argparse.ArgumentParser,
    url: str | None,
    server: list[str],
    sse_url: str | None = None,
) -> None:
    """Exactly one of `--url URL`, `--sse-url URL` and `-- SERVER_COMMAND`."""
    given = [url is not None, sse_url is not None, bool(server)]
    if not any(given):
        parser.error("give --url URL, --sse-url URL or -- SERVER_COMMAND [ARGS...]")
    if sum(given) > 1:
        parser.error("--url, --sse-url and a server command exclude each other")


def add_feature_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--feature",
        choices=FEATURES,
        default="basic",
        help="basic: connect, tools/list, echo (and add); notifications: that, then the "
        "change-notification check (subscriptions/listen on the modern wire, "
        "resources/subscribe and session notifications on the legacy wire); tasks: "
        "slow task tools instead of echo (a task polled to its result on the modern "
        "wire, the ordinary result on the legacy wire)",
    )


def parse_args(description: str, *, sse: bool = False) -> argparse.Namespace:
    """`CLIENT [--feature F] [--timeout S] (--url URL | -- SERVER_COMMAND ARGS...)`;
    with `sse`, also `--sse-url URL` (args.sse_url, else None)."""
    own, server = split_argv(sys.argv[1:])
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="hard limit for the whole run (s)"
    )
    add_feature_option(parser)
    add_target_option(parser, sse=sse)
    args = parser.parse_args(own)
    args.server = server
    args.sse_url = getattr(args, "sse_url", None)
    check_target(parser, args.url, server, args.sse_url)
    return args


@dataclass
class Report:
    """Accumulates checks; `finish()` prints the one JSON line and exits."""

    era: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    _done: threading.Lock = field(default_factory=threading.Lock)

    def step(self, name: str, ok: bool, **detail: Any) -> bool:
        self.steps.append({"step": name, "ok": ok, **detail})
        return ok

    def fail(self, message: str) -> None:
        # Keep the first error: later ones are usually consequences of it.
        if self.error is None:
            self.error = message

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.steps) and all(s["ok"] for s in self.steps)

    def finish(self) -> NoReturn:
        """Print the report and exit; safe to call from the watchdog thread too."""
        if not self._done.acquire(blocking=False):
            # The other thread is already printing the report and will exit.
            threading.Event().wait()
        if self.error is None and not self.ok:
            self.error = "failed step: " + next(
                (s["step"] for s in self.steps if not s["ok"]), "no steps ran"
            )
        body = {"ok": self.ok, "era": self.era, "steps": self.steps, "error": self.error}
        sys.stdout.write(json.dumps(body, default=str) + "\n")
        sys.stdout.flush()
        # os._exit: also leaves when SDK tasks or threads would keep us alive.
        os._exit(0 if self.ok else 1)


def start_watchdog(report: Report, seconds: float) -> None:
    """Last-resort hard timeout, in case the client's own deadline cannot fire
    (e.g. a blocking read in a thread). Fires a little after the soft deadline."""

    def expire() -> None:
        report.fail(f"hard timeout after {seconds:.0f}s")
        report.finish()

    timer = threading.Timer(seconds + 5.0, expire)
    timer.daemon = True
    timer.start()


def leaf_exception(exc: BaseException) -> BaseException:
    """The first real error inside (nested) task-group exception groups: SDKs
    built on anyio wrap a failed request in them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def echo_arguments(tool: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a server's `echo` tool: our fixtures take `text`,
    server-everything's takes `message`. Chosen from the input schema."""
    props = (tool.get("inputSchema") or {}).get("properties") or {}
    key = (
        "text"
        if "text" in props
        else "message"
        if "message" in props
        else next(iter(props), "text")
    )
    return {key: ECHO_TEXT}


def first_text(content: list[dict[str, Any]] | None) -> str | None:
    for block in content or []:
        if block.get("type") == "text":
            return str(block.get("text"))
    return None


# -- the notifications check (--feature notifications) -------------------------
# Every fixture client runs the same check; which tools trigger the changes
# depends on the server:
#   our fixtures (py1 --notify, py2): `add_note` changes notes://{name} and
#     notifies resources/updated for it; `register_tool` adds a tool and
#     notifies tools/list_changed
#   server-everything: `toggle-subscriber-updates` starts per-session updates
#     (one at once, then every 5 s) for every subscribed URI; calling it again
#     stops them. It has no tool that changes its tool list on demand (it sends
#     one tools/list_changed right after `initialized`), so its runs check
#     resources/updated only.

FEATURES = ("basic", "notifications", "tasks")
NOTIFY_STEP = "notifications: "  # every step of the check starts with it
TASKS_STEP = "tasks: "  # every step of the tasks check starts with it
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
UPDATED = "notifications/resources/updated"
TOOLS_CHANGED = "notifications/tools/list_changed"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
CHANGE_METHODS = frozenset(
    {
        UPDATED,
        TOOLS_CHANGED,
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)
NOTIFY_WAIT = 10.0  # seconds a notification may take after its trigger returned


@dataclass(frozen=True)
class Trigger:
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class NotifyPlan:
    """What to subscribe to and which tool calls make the server notify."""

    server: str  # "fixture" | "everything"
    uri: str
    update: Trigger  # makes the server send resources/updated for `uri`
    list_change: Trigger | None  # makes it send tools/list_changed (None: no such tool)
    stop: Trigger | None = None  # ends what `update` started (server-everything)


def notify_plan(tools: list[str], resource_uris: list[str]) -> NotifyPlan | None:
    """The plan for a server with these tools (and, for server-everything,
    these resources: the first one is subscribed); None if it has no trigger."""
    if "add_note" in tools and "register_tool" in tools:
        suffix = os.urandom(3).hex()
        return NotifyPlan(
            server="fixture",
            uri="notes://compat",
            update=Trigger("add_note", {"name": "compat", "text": f"changed {suffix}"}),
            list_change=Trigger("register_tool", {"name": f"added_{suffix}"}),
        )
    if "toggle-subscriber-updates" in tools and resource_uris:
        toggle = Trigger("toggle-subscriber-updates", {})
        return NotifyPlan("everything", resource_uris[0], toggle, None, stop=toggle)
    return None


def tag_of(message: dict[str, Any]) -> Any:
    """The subscription id a notification carries in `_meta`, else None."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None


def is_update(message: dict[str, Any], uri: str) -> bool:
    params = message.get("params")
    return (
        message.get("method") == UPDATED and isinstance(params, dict) and params.get("uri") == uri
    )


def is_tools_changed(message: dict[str, Any]) -> bool:
    return message.get("method") == TOOLS_CHANGED


def delivery_step(report: Report, path: str) -> None:
    """The last step of the check: how the notifications reached the client
    (run.py shows `path` as the run's evidence)."""
    report.step(NOTIFY_STEP + "delivered", True, path=path)
