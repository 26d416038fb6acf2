#!/usr/bin/env bash
# Run every MRTR fixture client against every fixture server, directly and
# through the gateway, with --feature all, and print one line per run:
# expected vs observed outcome, the era, each feature's result, the time taken;
# then the -32042 feature (elicitation-url-required) against the legacy servers.
# README.md ("MRTR fixtures") records a run.
#
#   bash compat_matrix/peers/verify_mrtr.sh [--elicit-action accept|decline|cancel]
#
# Needs peers/install.sh first. Exit status: 0 iff every run matched its expectation.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEERS="${MCP_PEERS_DIR:-$REPO/.peers}"
export MCP_PEERS_DIR="$PEERS"
cd "$REPO"

PY1="$PEERS/py1/bin/python"
PY2="$PEERS/py2/bin/python"
GATEWAY="python3 -m gateway --log-level error --"

declare -A CLIENT=(
    [py1]="$PY1 $HERE/py1_mrtr_client.py"
    [py2]="$PY2 $HERE/py2_mrtr_client.py --mode auto"
    [py2-pin]="$PY2 $HERE/py2_mrtr_client.py --mode 2026-07-28"
    [raw]="python3 $HERE/raw_mrtr_client.py"
)
declare -A SERVER=(
    [py1]="$PY1 $HERE/py1_server.py"
    [py2-modern]="$PY2 $HERE/py2_modern_server.py"
    [py2-dual]="$PY2 $HERE/py2_modern_server.py --dual"
    [ts2-modern]="node $HERE/ts2_modern_server.mjs"
    [ts2-dual]="node $HERE/ts2_modern_server.mjs --dual"
    [everything]="$PEERS/node/node_modules/.bin/mcp-server-everything stdio"
)
# Direct, the spec's matrix: a legacy client (py1) fails against modern-only
# servers, a modern-only client (raw, or py2 pinned) fails against legacy ones.
# Through the gateway every cell is expected to work.
expect() { # $1=client $2=server $3=path
    [[ "$3" == gateway ]] && { echo ok; return; }
    case "$1:$2" in
        py1:py2-modern | py1:ts2-modern) echo fail ;;
        raw:py1 | raw:everything | py2-pin:py1 | py2-pin:everything) echo fail ;;
        *) echo ok ;;
    esac
}

summary() { # $1 = a client's JSON report; prints: result era, each feature's result, error
    python3 - "$1" <<'EOF'
import json, sys
try:
    d = json.loads(sys.argv[1])
except ValueError:
    print("fail", "?", "-", "-", "-", "-", "-", "no JSON report", sep="\t")
    sys.exit()
def feature(name):
    steps = [s for s in d["steps"] if s["step"].startswith(name + ": ")]
    if not steps:
        return "-"
    return "ok" if all(s["ok"] for s in steps) else "FAIL"
names = ("elicitation-form", "elicitation-url", "sampling", "roots", "elicitation-url-required")
cells = [feature(f) for f in names]
error = (d["error"] or "-").replace("\t", " ")
print("ok" if d["ok"] else "fail", d["era"], *cells, error, sep="\t")
EOF
}

status=0
row() { printf '%-7s %-10s %-7s %-6s %-4s %-6s %-4s %-4s %-4s %-5s %-5s %5s  %s\n' "$@"; }
cell() { # $1=client $2=server $3=path, then client options
    local c="$1" s="$2" path="$3" prefix="" start out secs want
    shift 3
    [[ "$path" == gateway ]] && prefix="$GATEWAY"
    start=$(date +%s.%N)
    # Word splitting of the command strings is intended.
    # shellcheck disable=SC2086
    out="$(${CLIENT[$c]} "$@" --timeout 30 -- $prefix ${SERVER[$s]} 2>/dev/null || true)"
    secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    IFS=$'\t' read -r result era form url samp roots url42 error <<<"$(summary "$out")"
    want="$(expect "$c" "$s" "$path")"
    [[ "$result" == "$want" ]] || status=1
    row "$c" "$s" "$path" "$want" "$result" "$era" "$form" "$url" "$samp" "$roots" "$url42" "$secs" "${error:0:90}"
}

row client server path expect got era form url samp roots url42 secs error
for c in py1 py2 py2-pin raw; do
    for s in py1 py2-modern py2-dual ts2-modern ts2-dual everything; do
        for path in direct gateway; do
            cell "$c" "$s" "$path" --feature all "$@"
        done
    done
done
# The 2025-11-25 -32042 path exists only on legacy servers, and only with accept.
if [[ " $* " != *" decline "* && " $* " != *" cancel "* ]]; then
    for c in py1 py2 py2-pin raw; do
        for s in py1 everything; do
            for path in direct gateway; do
                cell "$c" "$s" "$path" --feature elicitation-url-required
            done
        done
    done
fi
exit "$status"
