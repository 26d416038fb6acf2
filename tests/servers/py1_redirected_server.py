"""A legacy server behind a same-origin redirect, made with mcp==1.30.0
FastMCP, for the HTTP back's redirect test (issue #30):

    .peers/py1/bin/python tests/servers/py1_redirected_server.py PORT

serves Streamable HTTP at 127.0.0.1:PORT/real, and answers every request to
/mcp with `307 Location: /real`, as a server moved behind a proxy does (and
as Starlette answers /mcp for a mount at /mcp/).
"""

import sys
from typing import Any

import uvicorn
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("py1-redirected", host="127.0.0.1", streamable_http_path="/real")


def echo(text: str) -> str:
    """Says it back."""
    return text


# Registered by call rather than by decorator: here mcp is untyped, and a
# decorator of unknown type would make the tools untyped too.
mcp.add_tool(echo)

inner = mcp.streamable_http_app()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """/mcp moved to /real, whatever the method; the rest is FastMCP's."""
    if scope["type"] == "http" and scope["path"] == "/mcp":
        headers = [(b"location", b"/real"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 307, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    await inner(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
