"""Reading the front's answers: a 2025-11-25 session's requests are answered
on SSE streams (priming event first), the rest in JSON."""

from __future__ import annotations

from typing import Any

import httpx
import orjson


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body, in order (priming events and
    comments left out)."""
    messages = []
    for block in text.split("\n\n"):
        data = [line[5:].lstrip() for line in block.splitlines() if line.startswith("data:")]
        if data and any(data):
            messages.append(orjson.loads("\n".join(data)))
    return messages


def answer_of(resp: httpx.Response) -> dict[str, Any]:
    """The reply a response carries: its JSON body, or the last message of
    its SSE stream."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return sse_messages(resp.text)[-1]
    body: dict[str, Any] = resp.json()
    return body
