"""Where the peers are installed (`peers_dir`, and `missing_peers`: what
peers/install.sh should have made), and the `Context` that fills the
placeholders of cells.toml's commands."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compat_matrix.cells import HERE, REPO, Matrix

PEER_SRC = HERE / "peers"

INSTALL_HINT = "run `bash peers/install.sh` (or set MCP_PEERS_DIR to an installed peers dir)"


def peers_dir() -> Path:
    """$MCP_PEERS_DIR, else <repo>/.peers (as peers/install.sh)."""
    configured = os.environ.get("MCP_PEERS_DIR")
    return Path(configured).resolve() if configured else REPO / ".peers"


def missing_peers(peers: Path | None = None) -> list[str]:
    """What peers/install.sh should have created but did not (empty when usable)."""
    peers = peers or peers_dir()
    needed = [
        peers / "py1" / "bin" / "python",
        peers / "py2" / "bin" / "python",
        peers / "node" / "node_modules" / ".bin" / "mcp-server-everything",
        peers / "node" / "node_modules" / "@modelcontextprotocol" / "client",
        peers / "node" / "node_modules" / "@modelcontextprotocol" / "server",
    ]
    return [str(p) for p in needed if not p.exists()]


DEFAULT_GATEWAY = "{python} -m gateway --log-level warning {listen} -- {server}"
DEFAULT_GATEWAY_UPSTREAM = "{python} -m gateway --log-level warning {listen} --upstream {upstream}"


@dataclass(frozen=True)
class Context:
    """What fills the placeholders of cells.toml."""

    peers: Path
    python: str = sys.executable
    client_timeout: float = 30.0
    hard_timeout: float = 50.0
    gateway_command: str = DEFAULT_GATEWAY
    gateway_upstream_command: str = DEFAULT_GATEWAY_UPSTREAM
    start_timeout: float = 30.0  # an HTTP server or gateway run.py starts must be ready by then

    @classmethod
    def for_matrix(cls, matrix: Matrix, peers: Path | None = None) -> Context:
        return cls(
            peers=peers or peers_dir(),
            client_timeout=matrix.client_timeout,
            hard_timeout=matrix.hard_timeout,
            gateway_command=matrix.gateway_command,
            gateway_upstream_command=matrix.gateway_upstream_command or DEFAULT_GATEWAY_UPSTREAM,
            start_timeout=matrix.start_timeout,
        )

    def placeholders(self) -> dict[str, str]:
        return {
            "{python}": self.python,
            "{peers}": str(self.peers),
            "{py1}": str(self.peers / "py1" / "bin" / "python"),
            "{py2}": str(self.peers / "py2" / "bin" / "python"),
            "{node_bin}": str(self.peers / "node" / "node_modules" / ".bin"),
            "{src}": str(PEER_SRC),
            "{timeout}": f"{self.client_timeout:g}",
        }

    def expand(
        self,
        template: str,
        server: Sequence[str] = (),
        *,
        feature: str | None = None,
        options: Sequence[str] = (),
        url: str | None = None,
        url_option: str = "--url",
        listen: Sequence[str] = (),
        upstream: str | None = None,
        port: int | None = None,
    ) -> list[str]:
        """Split a command template into argv; the word `{server}` becomes `server`,
        `{feature}` becomes `feature`, and `options` go just before the `--` that
        precedes `{server}` (a client's extra options). With `url`, a client's
        `-- {server}` becomes `--url URL` (Streamable HTTP), or `url_option URL`
        (`--sse-url URL` for HTTP+SSE). The gateway's words
        `{listen}` (nothing, or `--listen HOST:PORT`) and `{upstream}` (a URL),
        and a server's `{port}`, are filled in as given."""
        words: list[str] = []
        template_words = shlex.split(template)
        values = self.placeholders()
        if feature is not None:
            values["{feature}"] = feature
        if port is not None:
            values["{port}"] = str(port)
        skip = False
        for index, word in enumerate(template_words):
            if skip:
                skip = False
                continue
            if word == "{server}":
                words.extend(server)
                continue
            if word == "{listen}":
                words.extend(listen)
                continue
            if word == "{upstream}":
                if upstream is None:
                    raise ValueError(f"{template!r} needs an upstream URL")
                words.append(upstream)
                continue
            if word == "--" and template_words[index + 1 : index + 2] == ["{server}"]:
                words.extend(options)
                if url is not None:
                    words.extend([url_option, url])
                    skip = True
                    continue
            filled = word
            for key, value in values.items():
                filled = filled.replace(key, value)
            words.append(filled)
        return words
