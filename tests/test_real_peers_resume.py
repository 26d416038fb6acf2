"""Resumable streams with a real client: mcp 1.30 `ClientSession` over
Streamable HTTP (tests/servers/py1_push_client.py) through a gateway that
closes every call's SSE stream after 0.2 s (`[http] sse_poll_after`).

2025-11-25 basic/transports, "Resumability and Redelivery" and SEP-1699
polling: the client reconnects with GET and `Last-Event-ID` after the `retry`
the priming event named, and gets the rest of its stream, the reply included
(issue 10: the conformance check `server-sse-polling` passes direct, so it must
pass through). The peers come from `bash peers/install.sh`; when they are
missing the tests FAIL, never skip.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http_back_support import PEERS, free_port
from tests.push_peers import ANSWER, ASKED, SERVER, legacy_client

pytestmark = [pytest.mark.peers]

REPO = Path(__file__).resolve().parent.parent
CLIENT = str(REPO / "tests/servers/py1_push_client.py")
SLOW = str(REPO / "compat_matrix/peers/py1_server.py")  # mcp 1.30 FastMCP, tool `slow`
PY1, PY2 = str(PEERS / "py1/bin/python"), str(PEERS / "py2/bin/python")
POLLING = "[http]\nsse_poll_after = 0.2\nsse_retry = 0.05\n"


class PollingGateway:
    def __init__(self, tmp: Path, upstream: list[str]) -> None:
        for peer in (PY1, PY2):
            if not Path(peer).exists():
                pytest.fail(f"peer missing: {peer} (run `bash peers/install.sh`)", pytrace=False)
        (tmp / "gw.toml").write_text(POLLING)
        self.log = tmp / "gateway.log"
        self.port = free_port()
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway",
                    "--config",
                    str(tmp / "gw.toml"),
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    "--log-level",
                    "debug",
                    "--",
                    *upstream,
                ],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        self._wait_ready()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + 30
        while True:  # each pass asks /readyz once
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the gateway never got ready"
            time.sleep(0.05)

    def resumptions(self) -> int:
        return self.log.read_text().count("stream resumed")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def call(url: str, tool: str, arguments: str = "{}") -> dict[str, Any]:
    return legacy_client([url], tool, arguments)


@pytest.fixture
def slow_legacy(tmp_path: Path) -> Iterator[PollingGateway]:
    gateway = PollingGateway(tmp_path, [PY1, SLOW])
    try:
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture
def dual_push(tmp_path: Path) -> Iterator[PollingGateway]:
    gateway = PollingGateway(tmp_path, [PY2, SERVER])
    try:
        yield gateway
    finally:
        gateway.stop()


def test_a_long_call_survives_its_stream_being_closed_again_and_again(
    slow_legacy: PollingGateway,
) -> None:
    """The legacy server's `slow` takes 1 s: the gateway closes the stream
    every 0.2 s, the client resumes each time and gets the one reply."""
    out = call(slow_legacy.url, "slow", '{"ms": 1000}')
    assert out["protocolVersion"] == "2025-11-25" and not out["isError"]
    assert out["text"] == ["done"], out
    assert slow_legacy.resumptions() >= 2
    assert "notifications/cancelled" not in slow_legacy.log.read_text()


def test_server_requests_reach_a_polling_client(dual_push: PollingGateway) -> None:
    """Issue 10's push-style tool (elicitation, sampling, roots from a
    dual-era mcp 2.3 server) through a polling gateway: every request of the
    server reaches the client, whichever response carries it."""
    out = call(dual_push.url, "push")
    assert out["text"] == [ANSWER], out
    assert out["asked"] == ASKED and not out["isError"]
