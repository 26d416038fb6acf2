#!/usr/bin/env bash
# Install the other MCP proxies the bench's `http` group measures the gateway
# against, pinned, into $REPO/.peers/bench-proxies:
#
#   py/       venv with PyPI mcp-proxy (stdio server -> SSE / Streamable HTTP)
#   fastmcp/  venv with PyPI fastmcp (FastMCP.as_proxy: stdio <-> Streamable HTTP)
#   node/     npm prefix with supergateway (stdio server -> Streamable HTTP) and
#             mcp-remote (stdio client -> Streamable HTTP server)
#
#   bash bench/install_proxies.sh
#   MCP_BENCH_PROXIES_DIR=/x bash bench/install_proxies.sh
#
# Idempotent: each part writes a stamp with exactly what it installed; a part
# whose stamp matches the pins is skipped, one that differs is wiped and rebuilt.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${MCP_BENCH_PROXIES_DIR:-$REPO/.peers/bench-proxies}"
PYTHON="${MCP_PEERS_PYTHON:-$(command -v python3)}"

MCP_PROXY_PIN="mcp-proxy==0.13.0"
FASTMCP_PIN="fastmcp==4.2.3"
SUPERGATEWAY_PIN="supergateway@4.0.0"
MCP_REMOTE_PIN="mcp-remote@0.15.1"

log() { printf '[bench-proxies] %s\n' "$*" >&2; }

is_current() { # $1=stamp file, $2=expected text
    [[ -f "$1" ]] && [[ "$(cat "$1")" == "$2" ]]
}

install_py() {
    local target="$DIR/py" want
    want="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $MCP_PROXY_PIN $target"  # a venv moved elsewhere no longer runs: its path is part of what was installed
    if is_current "$target/.stamp" "$want"; then log "mcp-proxy up to date"; return; fi
    log "creating venv with $MCP_PROXY_PIN"
    rm -rf "$target"
    "$PYTHON" -m venv "$target"
    "$target/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        "$MCP_PROXY_PIN" >&2
    "$target/bin/mcp-proxy" --help >/dev/null
    printf '%s\n' "$want" >"$target/.stamp"
}

install_fastmcp() {
    # Its own venv: fastmcp pins an mcp release of its own, mcp-proxy another.
    local target="$DIR/fastmcp" want
    want="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $FASTMCP_PIN $target"  # a venv moved elsewhere no longer runs: its path is part of what was installed
    if is_current "$target/.stamp" "$want"; then log "fastmcp up to date"; return; fi
    log "creating venv with $FASTMCP_PIN"
    rm -rf "$target"
    "$PYTHON" -m venv "$target"
    "$target/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        "$FASTMCP_PIN" >&2
    "$target/bin/python" -c 'from fastmcp.server import create_proxy' >/dev/null
    printf '%s\n' "$want" >"$target/.stamp"
}

install_node() {
    local target="$DIR/node" want
    want="$(node --version) $SUPERGATEWAY_PIN $MCP_REMOTE_PIN"
    if is_current "$target/.stamp" "$want"; then log "supergateway, mcp-remote up to date"; return; fi
    log "installing $SUPERGATEWAY_PIN $MCP_REMOTE_PIN"
    rm -rf "$target"
    mkdir -p "$target"
    npm install --prefix "$target" --no-audit --no-fund --loglevel=error \
        --save-exact "$SUPERGATEWAY_PIN" "$MCP_REMOTE_PIN" >&2
    [[ -x "$target/node_modules/.bin/supergateway" ]]
    [[ -f "$target/node_modules/mcp-remote/dist/proxy.js" ]]
    printf '%s\n' "$want" >"$target/.stamp"
}

mkdir -p "$DIR"
install_py
install_fastmcp
install_node
log "done -> $DIR"
