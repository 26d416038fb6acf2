"""A legacy server on the deprecated HTTP+SSE transport (2024-11-05), made
with mcp==1.30.0 FastMCP, for the HTTP back's fallback test:

    .peers/py1/bin/python tests/servers/py1_sse_server.py PORT

serves GET 127.0.0.1:PORT/sse (the `endpoint` event) and POST /messages/.
"""

import sys

import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

mcp = FastMCP("py1-sse-fixture", host="127.0.0.1")


class Name(BaseModel):
    name: str


def echo(text: str) -> str:
    """Says it back."""
    return text


async def ask_name(ctx: Context) -> str:
    """Asks the client for a name (a server-to-client elicitation/create)."""
    answer = await ctx.elicit("What is your name?", Name)
    return (
        f"Hello, {answer.data.name}!" if answer.action == "accept" else f"no name: {answer.action}"
    )


# Registered by call rather than by decorator: here mcp is untyped, and a
# decorator of unknown type would make the tools untyped too.
mcp.add_tool(echo)
mcp.add_tool(ask_name)

if __name__ == "__main__":
    uvicorn.run(mcp.sse_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
