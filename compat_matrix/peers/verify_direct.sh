#!/usr/bin/env bash
# Run every fixture client directly against every fixture server (no gateway)
# and print one line per cell: expected vs observed outcome and the error.
# This is the baseline the gateway must improve on; README.md records a run.
#
#   bash compat_matrix/peers/verify_direct.sh        # needs peers/install.sh first
#
# Exit status: 0 iff every cell matched its expectation.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEERS="${MCP_PEERS_DIR:-$REPO/.peers}"
export MCP_PEERS_DIR="$PEERS"

PY1="$PEERS/py1/bin/python"
PY2="$PEERS/py2/bin/python"

declare -A CLIENT=(
    [py1]="$PY1 $HERE/py1_client.py"
    [py2]="$PY2 $HERE/py2_client.py"
    [raw]="python3 $HERE/raw_modern_client.py"
    [ts2]="node $HERE/ts2_client.mjs"
)
declare -A SERVER=(
    [py1]="$PY1 $HERE/py1_server.py"
    [py2-modern]="$PY2 $HERE/py2_modern_server.py"
    [py2-dual]="$PY2 $HERE/py2_modern_server.py --dual"
    [ts2-modern]="node $HERE/ts2_modern_server.mjs"
    [ts2-dual]="node $HERE/ts2_modern_server.mjs --dual"
    [everything]="$PEERS/node/node_modules/.bin/mcp-server-everything stdio"
)
# Expected outcome per cell, from the spec's compatibility matrix:
# legacy client (py1) fails only against modern-only servers; the modern-only
# client (raw) fails against legacy servers; dual clients (py2, ts2) work everywhere.
expect() { # $1=client $2=server
    case "$1:$2" in
        py1:py2-modern | py1:ts2-modern) echo fail ;;
        raw:py1 | raw:everything) echo fail ;;
        *) echo ok ;;
    esac
}

status=0
printf '%-4s %-11s %-6s %-6s %-7s %s\n' client server expect got era error
for c in py1 py2 raw ts2; do
    for s in py1 py2-modern py2-dual ts2-modern ts2-dual everything; do
        # Word splitting of the command strings is intended.
        # shellcheck disable=SC2086
        out="$(${CLIENT[$c]} --timeout 30 -- ${SERVER[$s]} 2>/dev/null || true)"
        got="$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("ok" if d["ok"] else "fail", d["era"], d["error"] or "-", sep="\t")' "$out" 2>/dev/null || printf 'fail\t?\tno JSON report')"
        IFS=$'\t' read -r result era error <<<"$got"
        want="$(expect "$c" "$s")"
        [[ "$result" == "$want" ]] || status=1
        printf '%-4s %-11s %-6s %-6s %-7s %s\n' "$c" "$s" "$want" "$result" "$era" "${error:0:110}"
    done
done
exit "$status"
