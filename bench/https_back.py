"""What TLS costs on the HTTP back: a stdio client → the gateway → the fast
legacy HTTP server, once over plain http and once over https (Debian's
HAProxy terminating TLS in front of the same server, a self-signed
certificate trusted through SSL_CERT_FILE as the README tells operators).

    python -m bench.https_back [--calls N] [--rounds R] [--out PATH]

Per upstream and concurrency (1 and 8 in flight), interleaved over the
rounds, best round kept: calls a second and the gateway's CPU a call, and
https as a ratio of http. The http run has no HAProxy in its way, so the
ratio holds TLS and the extra hop together: an upper bound on what TLS
costs the gateway. Needs `openssl` and `haproxy` (.ci/run installs Debian's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/https_back.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench import procs
from bench.http_bench import free_port
from bench.http_setups import fast_http
from bench.setups import PY, ROOT

CONCURRENCIES = (1, 8)
WARM_CALLS = 200
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
HAPROXY_CFG = """\
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend tls
  bind 127.0.0.1:{tls_port} ssl crt {pem}
  default_backend fast
backend fast
  server fast 127.0.0.1:{port}
"""


@dataclass(frozen=True, slots=True)
class Figures:
    calls_per_second: float
    cpu_us_per_call: float


def _call(msg_id: int) -> bytes:
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": META}
    msg = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}
    return orjson.dumps(msg) + b"\n"


def _wait_listening(port: int, within: float = 30) -> None:
    import socket

    deadline = time.monotonic() + within
    while True:  # each pass tries once; another program's port, nothing to wait on
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"nothing listens on {port} after {within} s") from None
            time.sleep(0.05)


def measure(url: str, calls: int, ca: Path) -> dict[int, Figures]:
    """A gateway (stdio front) in front of `url`: sequential calls, then 8 in flight."""
    env = {**os.environ, "SSL_CERT_FILE": str(ca)}
    cmd = [PY, "-m", "gateway", "--log-level", "warning", "--upstream", url]
    gateway = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert gateway.stdin is not None and gateway.stdout is not None
    try:
        for i in range(WARM_CALLS):
            gateway.stdin.write(_call(i))
            gateway.stdin.flush()
            gateway.stdout.readline()
        out = {}
        for concurrency in CONCURRENCIES:
            cpu0, t0 = procs.cpu_seconds(gateway.pid) or 0.0, time.perf_counter()
            sent = answered = 0
            while answered < calls:  # ends when every call is answered
                while sent < calls and sent - answered < concurrency:
                    gateway.stdin.write(_call(WARM_CALLS + sent))
                    sent += 1
                gateway.stdin.flush()
                line = gateway.stdout.readline()
                if b'"result"' not in line:
                    raise SystemExit(f"a call failed: {line[:300]!r}")
                answered += 1
            seconds = time.perf_counter() - t0
            cpu = (procs.cpu_seconds(gateway.pid) or 0.0) - cpu0
            out[concurrency] = Figures(calls / seconds, cpu * 1e6 / calls)
        return out
    finally:
        gateway.stdin.close()
        try:
            gateway.wait(10)
        except subprocess.TimeoutExpired:
            gateway.kill()
            gateway.wait()


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with openssl: what a
    client trusts (SSL_CERT_FILE) and what the server serves."""
    if shutil.which("openssl") is None:
        raise RuntimeError("making a certificate needs the openssl command")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def tls_terminator(tmp: Path, tls_port: int, port: int) -> tuple[Path, Path]:
    """HAProxy's configuration for TLS on `tls_port` in front of plain http on
    `port`, with a new self-signed certificate: (the config, the certificate
    to trust)."""
    cert, key = self_signed(tmp)
    pem = tmp / "server.pem"
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    cfg = tmp / "haproxy.cfg"
    cfg.write_text(HAPROXY_CFG.format(tls_port=tls_port, pem=pem, port=port))
    return cfg, cert


def report(best: dict[str, dict[int, Figures]]) -> str:
    lines = [
        "| upstream | calls/s c=1 | c=8 | gateway CPU µs/call c=1 | c=8 |",
        "|---|---|---|---|---|",
    ]
    for name, figures in best.items():
        rates = " | ".join(f"{figures[c].calls_per_second:,.0f}" for c in CONCURRENCIES)
        cpus = " | ".join(f"{figures[c].cpu_us_per_call:,.0f}" for c in CONCURRENCIES)
        lines.append(f"| {name} | {rates} | {cpus} |")
    http, https = best["http"], best["https"]
    ratios = ", ".join(
        f"c={c}: {https[c].calls_per_second / http[c].calls_per_second:.2f}x the calls/s, "
        f"{https[c].cpu_us_per_call / http[c].cpu_us_per_call:.2f}x the CPU a call"
        for c in CONCURRENCIES
    )
    return "\n".join(lines) + f"\n\nhttps against http: {ratios}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(haproxy).exists() or not shutil.which("openssl"):
        raise SystemExit("needs haproxy and openssl (Debian: apt-get install haproxy openssl)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        port, tls_port = free_port(), free_port()
        cfg, ca = tls_terminator(tmp, tls_port, port)
        server = subprocess.Popen(fast_http("legacy", str(port)), stderr=subprocess.DEVNULL)
        balancer = subprocess.Popen([haproxy, "-f", str(cfg), "-db"], stderr=subprocess.DEVNULL)
        try:
            _wait_listening(port)
            _wait_listening(tls_port)
            urls = {
                "http": f"http://127.0.0.1:{port}/mcp",
                "https": f"https://127.0.0.1:{tls_port}/mcp",
            }
            best: dict[str, dict[int, Figures]] = {}
            for _ in range(args.rounds):
                for name, url in urls.items():  # interleaved
                    got = measure(url, args.calls, ca)
                    kept = best.setdefault(name, got)
                    for c in CONCURRENCIES:
                        if got[c].calls_per_second > kept[c].calls_per_second:
                            kept[c] = got[c]
        finally:
            for process in (balancer, server):
                process.terminate()
                process.wait(10)
    text = report(best)
    print(text)
    if args.out:
        Path(args.out).write_text(
            f"# The HTTP back over TLS\n\n`python -m bench.https_back --calls {args.calls} "
            f"--rounds {args.rounds}`\n\n{text}"
        )


if __name__ == "__main__":
    main()
