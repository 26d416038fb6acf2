"""The README's own example, with the real server: @modelcontextprotocol/
server-filesystem (a legacy TS SDK 1.x stdio server) behind the gateway.

Issue 10: "the README's own `server-filesystem` example fails a modern client's
first `tools/list` with `-32021 "…the client did not declare the roots
capability"` although the client did; the second succeeds. The server asks
`roots/list` right after `initialized`, while the client's first request is in
flight." A tools/list cannot carry that request (2026-07-28: only tools/call,
prompts/get and resources/read may be input_required), so the gateway answers
it: from `--root` when given, else with an error, after which the server keeps
the directories on its command line.

The server comes from peers/install.sh; where it is not installed these tests
skip (it is installed there at a pinned version).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from compat_matrix.environment import INSTALL_HINT, peers_dir
from tests.raw_gateway_clients import (
    LEGACY_V,
    Stdio,
    V,
    http_gateway,
    modern_headers,
    sse_or_json,
    stdio_gateway,
    text_of,
)

pytestmark = [pytest.mark.peers, pytest.mark.anyio]

ROOTS: dict[str, Any] = {"roots": {}}


def filesystem(*dirs: Path) -> list[str]:
    package = peers_dir() / "node" / "node_modules" / "@modelcontextprotocol" / "server-filesystem"
    if not (package / "dist" / "index.js").exists():
        # Real peers are never skipped (peers/README): a missing one fails the run.
        pytest.fail(f"server-filesystem is not installed in {package.parent}: {INSTALL_HINT}")
    return ["node", str(package / "dist" / "index.js"), *map(str, dirs)]


def meta(caps: dict[str, Any]) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientInfo": {"name": "fs-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    }


def gateway(tmp_path: Path, server: list[str], *args: str) -> AbstractAsyncContextManager[Stdio]:
    return stdio_gateway(tmp_path, server, *args, log_level="info")


async def modern(gw: Stdio, method: str, params: dict[str, Any]) -> dict[str, Any]:
    msg_id = gw.new_id()
    since = len(gw.seen)
    body = {**params, "_meta": meta(ROOTS)}
    await gw.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": body})
    return await gw.until(lambda m: m.get("id") == msg_id and "method" not in m, since)


async def allowed_directories_become(gw: Stdio, directory: Path, *, modern_era: bool) -> str:
    """The server's allowed directories once they name `directory`.

    server-filesystem applies the roots it gets without waiting for them
    (its roots/list handling runs beside later requests), so a call right
    after may still see the old list: ask again, each time after the answer
    to the last ask, at most 200 times (bounded by fail_after too)."""
    text = ""
    with anyio.fail_after(20):
        for _ in range(200):
            if modern_era:
                reply = await modern(
                    gw, "tools/call", {"name": "list_allowed_directories", "arguments": {}}
                )
            else:
                reply = await gw.request(
                    "tools/call",
                    {"name": "list_allowed_directories", "arguments": {}},
                    modern=False,
                )
            text = text_of(reply)
            if str(directory) in text:
                return text
    return text


async def write_then_read(gw: Stdio, path: Path) -> str:
    wrote = await modern(
        gw, "tools/call", {"name": "write_file", "arguments": {"path": str(path), "content": "hi"}}
    )
    assert "result" in wrote and not wrote["result"].get("isError"), wrote
    read = await modern(
        gw, "tools/call", {"name": "read_text_file", "arguments": {"path": str(path)}}
    )
    return text_of(read)


async def test_modern_client_first_tools_list_over_stdio(tmp_path: Path) -> None:
    """Issue 10's defect, over stdio: the first tools/list of a modern client
    that declared roots succeeds (on main it got -32021); the server keeps its
    command-line directory, so a file written there reads back; the log says
    why the server's roots/list was refused."""
    data = tmp_path / "data"
    data.mkdir()
    async with gateway(tmp_path, filesystem(data)) as gw:
        first = await modern(gw, "tools/list", {})
        assert "result" in first, first
        assert "read_text_file" in {t["name"] for t in first["result"]["tools"]}
        assert await write_then_read(gw, data / "a.txt") == "hi"
    log = gw.stderr.read_text()
    assert "server request refused" in log and "roots/list" in log, log


async def test_configured_root_answers_the_startup_request(tmp_path: Path) -> None:
    """Issue 10: "answer it from configured roots": with --root the server gets
    that root at session start and works in it instead of its command line's."""
    started, configured = tmp_path / "started", tmp_path / "configured"
    started.mkdir()
    configured.mkdir()
    async with gateway(tmp_path, filesystem(started), "--root", str(configured)) as gw:
        first = await modern(gw, "tools/list", {})
        assert "result" in first, first
        dirs = await allowed_directories_become(gw, configured, modern_era=True)
        assert str(configured) in dirs
        assert str(started) not in dirs
    assert "roots/list answered from the configured roots" in gw.stderr.read_text()


async def test_legacy_client_answers_roots_itself(tmp_path: Path) -> None:
    """DESIGN §5.3, legacy→legacy passthrough: the server's startup roots/list
    reaches a legacy client that declared roots, natively, and the server
    works in the roots the client gave."""
    started, mine = tmp_path / "started", tmp_path / "mine"
    started.mkdir()
    mine.mkdir()
    async with gateway(tmp_path, filesystem(started)) as gw:
        init = await gw.request(
            "initialize",
            {
                "protocolVersion": LEGACY_V,
                "capabilities": ROOTS,
                "clientInfo": {"name": "fs-test-legacy", "version": "1"},
            },
            modern=False,
        )
        assert "result" in init, init
        await gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        ask = await gw.until(lambda m: m.get("method") == "roots/list", 0)
        await gw.send(
            {"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": mine.as_uri()}]}}
        )
        dirs = await allowed_directories_become(gw, mine, modern_era=False)
        assert str(mine) in dirs, dirs


async def test_modern_client_first_tools_list_over_http(tmp_path: Path) -> None:
    """Issue 10's defect through the HTTP front: the first tools/list succeeds."""
    data = tmp_path / "data"
    data.mkdir()
    async with http_gateway(tmp_path, filesystem(data)) as c:
        msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(ROOTS)}}
        resp = await c.post("/mcp", json=msg, headers=modern_headers("tools/list"))
        (reply,) = [m for m in sse_or_json(resp) if m.get("id") == 1]
        assert "result" in reply, reply
        assert "write_file" in {t["name"] for t in reply["result"]["tools"]}
