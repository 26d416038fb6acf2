"""mcp 1.30 FastMCP over stdio with one tool that reports progress `count`
times with messages of `size` bytes (issue #29: the flood that wedged the
stdio gateway), and a plain `ping_tool` for the call after it."""

from __future__ import annotations

from mcp.server.fastmcp import Context, FastMCP

mcp = FastMCP("progress-flood")


@mcp.tool()  # type: ignore[untyped-decorator]
async def flood(count: int, size: int, ctx: Context) -> str:
    pad = "p" * size
    for i in range(count):
        await ctx.report_progress(i + 1, count, pad)
    return f"flooded {count}"


@mcp.tool()  # type: ignore[untyped-decorator]
def ping_tool() -> str:
    return "pong"


if __name__ == "__main__":
    mcp.run("stdio")
