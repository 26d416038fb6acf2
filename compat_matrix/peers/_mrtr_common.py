"""What the MRTR fixture clients ask for and expect (stdlib only: imported from every venv).

One feature = one tool call whose server needs client input: a form or URL
elicitation, a sampling request or a roots listing. The client's callbacks
answer with the fixed values below, and the tool result must echo them back.
Which tool is called depends on the server, recognised by its tool list: our
py1/py2/ts2 fixtures, or the TS reference server-everything.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from _common import DEFAULT_TIMEOUT, add_target_option, check_target, split_argv

FEATURES = ("elicitation-form", "elicitation-url", "sampling", "roots")
# The 2025-11-25 -32042 error path (legacy servers only; not part of "all"):
# the first call fails, the client opens the link(s) in error.data, then retries.
URL_REQUIRED = "elicitation-url-required"
URL_ELICITATION_REQUIRED = -32042
ACTIONS = ("accept", "decline", "cancel")

# The callbacks' answers.
FORM_CONTENT = {"name": "Ada"}
SAMPLED_TEXT = "sampled-by-client"
ROOT_URI = "file:///srv/compat"
ROOT_NAME = "compat"
# server-everything's trigger-url-elicitation takes the URL as an argument.
LINK_URL = "https://example.com/compat/authorize"


@dataclass(frozen=True)
class Call:
    feature: str
    tool: str
    arguments: dict[str, Any]
    expect: str  # substring of the result text (case-insensitive for decline/cancel)
    method: str  # the input request the server should make


@dataclass
class Options:
    mode: str
    features: list[str]
    action: str
    timeout: float
    check_errors: bool
    check_binding: bool
    server: list[str] = field(default_factory=list)
    url: str | None = None  # a Streamable HTTP endpoint instead of a server command
    sse_url: str | None = None  # an HTTP+SSE event stream (GET .../sse), ditto


def parse_args(
    description: str, *, modes: bool = False, check_errors: bool = False, sse: bool = False
) -> Options:
    """`CLIENT [--mode M] [--feature F] [--elicit-action A] [--timeout S]
    (--url URL | -- SERVER...)`; with `sse`, also `--sse-url URL`."""
    own, server = split_argv(sys.argv[1:])
    parser = argparse.ArgumentParser(description=description)
    if modes:
        parser.add_argument("--mode", default="auto", help="auto (default), legacy, or 2026-07-28")
    parser.add_argument("--feature", default="all", choices=[*FEATURES, URL_REQUIRED, "all"])
    parser.add_argument(
        "--elicit-action", default="accept", choices=ACTIONS, help="how elicitations are answered"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    add_target_option(parser, sse=sse)
    if check_errors:
        parser.add_argument(
            "--check-errors",
            action="store_true",
            help="also retry once with a tampered requestState (expect -32602)",
        )
        parser.add_argument(
            "--check-binding",
            action="store_true",
            help="also send the requestState with other arguments and replay it (expect -32602)",
        )
    args = parser.parse_args(own)
    sse_url = getattr(args, "sse_url", None)
    check_target(parser, args.url, server, sse_url)
    if args.feature == URL_REQUIRED and args.elicit_action != "accept":
        parser.error(f"--feature {URL_REQUIRED} needs --elicit-action accept")
    return Options(
        mode=getattr(args, "mode", "auto"),
        features=list(FEATURES) if args.feature == "all" else [args.feature],
        action=args.elicit_action,
        timeout=args.timeout,
        check_errors=getattr(args, "check_errors", False),
        check_binding=getattr(args, "check_binding", False),
        server=server,
        url=args.url,
        sse_url=sse_url,
    )


def server_kind(tool_names: set[str]) -> str:
    if "ask_name" in tool_names:
        return "fixture"
    if tool_names & {"trigger-elicitation-request", "trigger-sampling-request", "get-roots-list"}:
        return "everything"
    if "echo" in tool_names and "get-sum" in tool_names:
        # server-everything lists its MRTR tools only to clients that declared the capabilities.
        return "everything"
    return "unknown"


def plan(kind: str, feature: str, action: str) -> Call:
    """The call that exercises `feature` on a server of `kind`, and the text it must return."""
    accepted = action == "accept"
    if feature == URL_REQUIRED:
        if kind == "everything":
            args: dict[str, Any] = {"url": LINK_URL, "errorPath": True}
            expect = "completed the URL elicitation"
            return Call(feature, "trigger-url-elicitation", args, expect, "elicitation/create")
        expect = "Authorized after URL elicitation"
        return Call(feature, "authorize", {}, expect, "elicitation/create")
    if kind == "everything":
        if feature == "elicitation-form":
            expect = "- Name: Ada" if accepted else action
            return Call(feature, "trigger-elicitation-request", {}, expect, "elicitation/create")
        if feature == "elicitation-url":
            expect = "completed the URL elicitation" if accepted else action
            link: dict[str, Any] = {"url": LINK_URL}
            return Call(feature, "trigger-url-elicitation", link, expect, "elicitation/create")
        if feature == "sampling":
            prompt: dict[str, Any] = {"prompt": "say something", "maxTokens": 20}
            return Call(
                feature, "trigger-sampling-request", prompt, SAMPLED_TEXT, "sampling/createMessage"
            )
        return Call(feature, "get-roots-list", {}, ROOT_URI, "roots/list")
    if feature == "elicitation-form":
        expect = "Hello, Ada" if accepted else action
        return Call(feature, "ask_name", {}, expect, "elicitation/create")
    if feature == "elicitation-url":
        expect = "URL elicitation: accept" if accepted else action
        return Call(feature, "open_link", {}, expect, "elicitation/create")
    if feature == "sampling":
        args = {"text": "a long text"}
        return Call(feature, "summarize", args, SAMPLED_TEXT, "sampling/createMessage")
    return Call(feature, "list_my_roots", {}, ROOT_URI, "roots/list")


def result_matches(call: Call, action: str, text: str | None, is_error: bool) -> bool:
    """Accepted answers must come back verbatim in a successful result; a declined or
    cancelled elicitation only has to be reported (py2's Resolve turns it into isError)."""
    if text is None:
        return False
    if call.method == "elicitation/create" and action != "accept":
        return call.expect.lower() in text.lower()
    return call.expect in text and not is_error


def elicit_answer(action: str, mode: str | None) -> dict[str, Any]:
    """The ElicitResult a client gives: form content only on a form accept."""
    if action == "accept" and mode != "url":
        return {"action": "accept", "content": dict(FORM_CONTENT)}
    return {"action": action}


def all_text(content: list[dict[str, Any]] | None) -> str | None:
    """Every text block of a tool result, joined (server-everything returns two)."""
    texts = [str(block.get("text")) for block in content or [] if block.get("type") == "text"]
    return "\n".join(texts) if texts else None
