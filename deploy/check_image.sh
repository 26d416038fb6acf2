#!/usr/bin/env bash
# Build deploy/Containerfile and run the image, with no registry anywhere:
#
#   1. a base image made here: Debian bookworm (minbase + python3, from the apt
#      mirror this machine is configured with) by debootstrap, `podman import`ed;
#   2. the project's wheels made on this machine (the build copies only them);
#   3. `podman build --build-arg BASE=<that base>`, then the image run as the
#      Kubernetes examples run it (read-only root, every capability dropped, no
#      privilege escalation, a non-root UID) in front of the bundled example
#      server: /healthz, /readyz, a modern tools/call translated to that legacy
#      server, JSON log lines, the HEALTHCHECK, and SIGTERM ending it cleanly;
#   4. the sidecar pattern in a pod: the example served over HTTP on the pod's
#      loopback, and the image with --upstream in front of it.
#
# Run as root on Debian (CI: a fresh machine); installs podman, runc and
# debootstrap with apt when they are missing. Idempotent: the base image is
# kept as a cache (named below, rebuilt when absent); the container, the
# gateway image and every temporary file are removed on any exit.
#
#   deploy/check_image.sh              # MCP_ERA_GATEWAY_CHECK_BASE=... to use another base
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_IMAGE="${MCP_ERA_GATEWAY_CHECK_BASE:-localhost/mcp-era-gateway-base:bookworm}"
IMAGE=localhost/mcp-era-gateway:check
NAME="mcp-era-gateway-check-$$"
MIRROR="${MCP_ERA_GATEWAY_CHECK_MIRROR:-http://deb.debian.org/debian}"
START=$SECONDS

log() { printf '[check_image %3ds] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

WORK="$(mktemp -d /tmp/mcp-era-gateway-image.XXXXXX)"
cleanup() {
    local rc=$?
    if [[ $rc -ne 0 ]]; then
        for c in "$NAME" "$NAME-server" "$NAME-gateway"; do
            podman container exists "$c" 2>/dev/null || continue
            log "$c's log:"; podman logs "$c" >&2 || true
        done
    fi
    podman rm -f -t 0 "$NAME" >/dev/null 2>&1 || true
    podman pod rm -f -t 0 "$NAME-pod" >/dev/null 2>&1 || true
    podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [[ ${#need[@]} -gt 0 ]]; then
    log "installing ${need[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

# This VM's cgroups are in hybrid mode (v1 controllers and a v2 hierarchy),
# which Debian's crun refuses ("cgroups in hybrid mode not supported"); runc
# runs there and everywhere else. Root here lacks CAP_SYS_RESOURCE, so the
# container's rlimits must not exceed ours (podman's defaults do): ask for
# what we have, capped.
hard_nofile=$(ulimit -Hn); [[ $hard_nofile == unlimited || $hard_nofile -gt 65536 ]] && hard_nofile=65536
cat > "$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$hard_nofile:$hard_nofile", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"

if ! podman image exists "$BASE_IMAGE"; then
    log "making $BASE_IMAGE with debootstrap from $MIRROR"
    debootstrap --variant=minbase --include=python3,python3-venv \
        bookworm "$WORK/rootfs" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap"; }
    rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
    tar -C "$WORK/rootfs" -c . | podman import \
        --change 'CMD ["python3"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$WORK/rootfs"
fi

# The wheels must match the base's Python (orjson and httptools are compiled).
base_py=$(podman run --rm "$BASE_IMAGE" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
host_py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ $base_py == "$host_py" ]] || die "the base has Python $base_py, this machine $host_py: the wheels would not fit"

log "wheels (Python $host_py)"
mkdir -p "$WORK/context"
python3 -m pip wheel -q --wheel-dir "$WORK/context/dist" "$REPO" 2>&1 | grep -v '^WARNING: Location' >&2 || true
ls "$WORK/context/dist"/mcp_era_gateway-*.whl >/dev/null || die "no wheel of the project was built"
cp "$REPO/.dockerignore" "$WORK/context/"

log "podman build"
# --layers=false: no intermediate images are kept to clean up after.
podman build -q --layers=false --format docker -f "$REPO/deploy/Containerfile" \
    --build-arg "BASE=$BASE_IMAGE" -t "$IMAGE" "$WORK/context" >/dev/null

user=$(podman image inspect -f '{{.Config.User}}' "$IMAGE")
[[ $user == 10001:10001 ]] || die "the image runs as '$user', not 10001:10001"
health=$(podman image inspect -f '{{.HealthCheck.Test}}' "$IMAGE")
[[ $health == *healthz* ]] || die "the image has no HEALTHCHECK on /healthz: '$health'"

# A client: waits for /healthz and /readyz, then a modern tools/call that the
# gateway translates to the legacy example server.
cat > "$WORK/ask.py" <<'EOF'
import json, sys, time, urllib.error, urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"

def get(path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(base + path, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
    except (urllib.error.URLError, ConnectionError):
        return 0, {}

deadline = time.monotonic() + 60
while get("/healthz")[0] != 200 or get("/readyz")[0] != 200:
    if time.monotonic() > deadline:
        sys.exit(f"not ready within 60 s: /healthz {get('/healthz')}, /readyz {get('/readyz')}")
    time.sleep(0.2)
print("healthz", get("/healthz"), "readyz", get("/readyz"), file=sys.stderr)

V = "2026-07-28"
body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "search_notes", "arguments": {"query": "gateway"},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": V,
                             "io.modelcontextprotocol/clientCapabilities": {}}}}
req = urllib.request.Request(base + "/mcp", data=json.dumps(body).encode(), headers={
    "content-type": "application/json", "accept": "application/json, text/event-stream",
    "mcp-protocol-version": V, "mcp-method": "tools/call", "mcp-name": "search_notes"})
with urllib.request.urlopen(req, timeout=30) as r:
    reply = json.load(r)
text = json.dumps(reply)
if "result" not in reply or "mcp-era-gateway lets modern clients" not in text:
    sys.exit(f"tools/call through the image: {text}")
print("tools/call search_notes through the image:", reply["result"].get("resultType"), file=sys.stderr)
EOF

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log "podman run, published on 127.0.0.1:$port"
# --read-only-tmpfs=false: not even /tmp is writable, as under the examples'
# readOnlyRootFilesystem with no volume mounted.
podman run -d --name "$NAME" --read-only --read-only-tmpfs=false --cap-drop ALL \
    --security-opt no-new-privileges --user 10001:10001 \
    --no-healthcheck \
    -p "127.0.0.1:$port:8080" "$IMAGE" \
    -- python3 -m gateway.examples.notes_server >/dev/null

python3 "$WORK/ask.py" "$port" || die "the running image did not answer as it should"

# The image's HEALTHCHECK command, run as the engine would (podman runs it on
# a systemd timer, and CI machines may have no systemd: --no-healthcheck above).
health_cmd=$(podman image inspect -f '{{json .HealthCheck.Test}}' "$IMAGE" \
    | python3 -c 'import json, sys; t = json.load(sys.stdin); assert t[0] == "CMD"; print("\0".join(t[1:]))' \
    | tr '\0' '\n')
mapfile -t health_argv <<< "$health_cmd"
podman exec "$NAME" "${health_argv[@]}" || die "the image's HEALTHCHECK failed"

# Every log line is one JSON object (--log-format json in the entrypoint).
podman logs "$NAME" 2>&1 | python3 -c '
import json, sys
lines = [l for l in sys.stdin if l.strip()]
assert lines, "no log lines"
for l in lines:
    json.loads(l)
print(f"{len(lines)} log lines, all JSON", file=sys.stderr)
' || die "log lines that are not JSON"

t0=$SECONDS
podman stop -t 30 "$NAME" >/dev/null
status=$(podman inspect -f '{{.State.ExitCode}}' "$NAME")
log "SIGTERM: stopped in $((SECONDS - t0)) s, exit status $status"
[[ $status == 0 ]] || die "exit status $status after SIGTERM"

# The sidecar pattern (deploy/kubernetes/sidecar.yaml) in a podman pod: a
# server on the pod's loopback (here the image itself, serving the example
# over HTTP on 127.0.0.1:8000) and the gateway with --upstream in front of it.
# This runs the image's HTTP back, and a later --listen overriding the
# entrypoint's.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log "the sidecar pattern in a pod, published on 127.0.0.1:$port"
podman pod create --name "$NAME-pod" -p "127.0.0.1:$port:8080" >/dev/null
for role in server gateway; do
    if [[ $role == server ]]; then
        args=(--listen 127.0.0.1:8000 -- python3 -m gateway.examples.notes_server)
    else
        args=(--upstream http://127.0.0.1:8000/mcp)
    fi
    podman run -d --pod "$NAME-pod" --name "$NAME-$role" --read-only --read-only-tmpfs=false \
        --cap-drop ALL --security-opt no-new-privileges --user 10001:10001 --no-healthcheck \
        "$IMAGE" "${args[@]}" >/dev/null
done
python3 "$WORK/ask.py" "$port" || die "the gateway in the pod did not answer as it should"
podman stop -t 30 "$NAME-gateway" >/dev/null
status=$(podman inspect -f '{{.State.ExitCode}}' "$NAME-gateway")
[[ $status == 0 ]] || die "the pod's gateway: exit status $status after SIGTERM"
podman pod rm -f -t 0 "$NAME-pod" >/dev/null

log "OK: $IMAGE built on $BASE_IMAGE and ran as 10001, read-only (no /tmp either), no capabilities"
