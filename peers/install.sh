#!/usr/bin/env bash
# Install the pinned third-party MCP peers (real SDKs and reference servers)
# that the tests and the compatibility matrix run against.
#
#   peers/install.sh            # installs into $REPO/.peers
#   MCP_PEERS_DIR=/x peers/install.sh
#
# Layout (see compat_matrix/peers/README.md for how each peer is run):
#   $DIR/py1/   venv, mcp 1.x (legacy era) [+ mcp-server-time]
#   $DIR/py2/   venv, mcp 2.x (dual era)
#   $DIR/time1/ venv, the reference time server's last legacy release (mcp 1.x)
#   $DIR/time2/ venv, its newest release, built on mcp 2.x (dual era)
#   $DIR/node/  npm prefix with the TS SDKs 1.x/2.x and the reference servers
#               everything, filesystem and memory
#
# Idempotent: each part writes a stamp holding exactly what it installed; a
# part whose stamp matches the current pins is skipped, one that differs is
# wiped and rebuilt (no half-upgraded venvs). mcp 1.x and 2.x cannot share a
# venv, hence one per era.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS_SRC="$REPO/peers"
DIR="${MCP_PEERS_DIR:-$REPO/.peers}"
# Venv scripts name their python by the path the venv was made at: make it
# through the resolved path, so a .peers reached through a symlink (a git
# worktree's) does not leave scripts that point into that worktree.
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd -P)"
# The venvs use the python3 that runs this script (the one on PATH), so the
# peers match the interpreter the project itself is tested with.
PYTHON="${MCP_PEERS_PYTHON:-$(command -v python3)}"

PY1_PINS=(mcp==1.30.0)
PY1_OPTIONAL=(mcp-server-time==2026.1.26)
PY2_PINS=(mcp==2.3.0)
# The popular reference time server in both eras, each in its own venv so
# neither moves the other's SDK: 2026.1.26 is the last release on mcp 1.x,
# 2026.10.19 the newest (it requires mcp>=2.3,<3).
TIME1_PINS=(mcp-server-time==2026.1.26 mcp==1.30.0)
TIME2_PINS=(mcp-server-time==2026.10.19 mcp==2.3.0)

log() { printf '[peers] %s\n' "$*" >&2; }

# Stamp text for a python venv: interpreter version + the requested pins.
py_stamp() {
    printf '%s\n' "$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')" "$@"
}

# Node stamp: hash of the manifest and lock file we install from.
node_stamp() {
    cat "$PEERS_SRC/package.json" "$PEERS_SRC/package-lock.json" 2>/dev/null | sha256sum | cut -d' ' -f1
    node --version
}

is_current() { # $1=stamp file, $2=expected text
    [[ -f "$1" ]] && [[ "$(cat "$1")" == "$2" ]]
}

pip_in() { # $1=venv, rest=pip args
    local venv="$1"; shift
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q "$@" >&2
}

install_py1() {
    local target="$DIR/py1" want
    want="$(py_stamp "${PY1_PINS[@]}" "optional: ${PY1_OPTIONAL[*]}")"
    if is_current "$target/.stamp" "$want"; then log "py1 up to date"; return; fi
    log "py1: creating venv with ${PY1_PINS[*]}"
    rm -rf "$target"
    "$PYTHON" -m venv "$target"
    pip_in "$target" "${PY1_PINS[@]}"
    # The reference time server is a nice-to-have legacy peer; it must not
    # move the pinned SDK, so install it only if pip keeps mcp at the pin.
    if pip_in "$target" "${PY1_PINS[@]}" "${PY1_OPTIONAL[@]}"; then
        log "py1: installed ${PY1_OPTIONAL[*]}"
    else
        log "py1: WARNING optional ${PY1_OPTIONAL[*]} did not install; continuing without it"
    fi
    printf '%s\n' "$want" >"$target/.stamp"
}

install_py2() {
    local target="$DIR/py2" want
    want="$(py_stamp "${PY2_PINS[@]}")"
    if is_current "$target/.stamp" "$want"; then log "py2 up to date"; return; fi
    log "py2: creating venv with ${PY2_PINS[*]}"
    rm -rf "$target"
    "$PYTHON" -m venv "$target"
    pip_in "$target" "${PY2_PINS[@]}"
    printf '%s\n' "$want" >"$target/.stamp"
}

install_venv() { # $1=part name, rest=pins
    local name="$1"; shift
    local target="$DIR/$name" want
    want="$(py_stamp "$@")"
    # Also rebuilt when its scripts point elsewhere (made at another path).
    if is_current "$target/.stamp" "$want" && grep -qsF "#!$target/bin/python" "$target/bin/pip"; then
        log "$name up to date"
        return
    fi
    log "$name: creating venv with $*"
    rm -rf "$target"
    "$PYTHON" -m venv "$target"
    pip_in "$target" "$@"
    printf '%s\n' "$want" >"$target/.stamp"
}

install_node() {
    local target="$DIR/node" want
    want="$(node_stamp)"
    if is_current "$target/.stamp" "$want"; then log "node up to date"; return; fi
    log "node: installing $(tr -d '\n ' <"$PEERS_SRC/package.json" | grep -o '"dependencies":{[^}]*}')"
    # Build beside the old tree and swap at the end: servers already running
    # from the old tree keep their files, and a failed install leaves it whole.
    local build="$target-build"
    rm -rf "$build"
    mkdir -p "$build"
    cp "$PEERS_SRC/package.json" "$build/"
    # With the committed lock file, `npm ci` reproduces the exact tree
    # (transitive deps included); without it fall back to a plain install.
    if [[ -f "$PEERS_SRC/package-lock.json" ]]; then
        cp "$PEERS_SRC/package-lock.json" "$build/"
        (cd "$build" && npm ci --no-audit --no-fund --loglevel=error >&2)
    else
        (cd "$build" && npm install --no-audit --no-fund --loglevel=error >&2)
    fi
    printf '%s\n' "$want" >"$build/.stamp"
    rm -rf "$target.old"
    if [[ -d "$target" ]]; then mv "$target" "$target.old"; fi
    mv "$build" "$target"
    rm -rf "$target.old"
}

mkdir -p "$DIR"
start=$SECONDS
install_py1
install_py2
install_venv time1 "${TIME1_PINS[@]}"
install_venv time2 "${TIME2_PINS[@]}"
install_node
log "done in $((SECONDS - start))s -> $DIR"
