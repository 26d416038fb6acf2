"""Command line: `mcp-era-gateway [options] -- COMMAND...`, `probe`, `demo`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from gateway import config as config_mod
from gateway import log_setup

USAGE = """\
mcp-era-gateway [--config PATH] [--listen stdio] [--upstream-era auto|modern|legacy]
                [--log-level LEVEL] [--log-format console|json] [more options] -- COMMAND [ARG...]
mcp-era-gateway probe [options] -- COMMAND [ARG...]
mcp-era-gateway demo"""


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        usage=USAGE,
        description="Let every generation of MCP client talk to every generation of MCP server.",
        epilog="Everything after -- is the upstream server command (overrides [upstream] command).",
    )
    p.add_argument("--config", metavar="PATH", help="TOML config file (see config.example.toml)")
    p.add_argument("--listen", help="where clients connect: stdio (default) or HOST:PORT (HTTP)")
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="the upstream server's Streamable HTTP endpoint (instead of -- COMMAND)",
    )
    p.add_argument(
        "--upstream-era",
        choices=["auto", "modern", "legacy"],
        help="skip the era probe and treat the upstream as this era",
    )
    p.add_argument("--log-level", choices=list(log_setup.LEVELS), help="default info")
    p.add_argument("--log-format", choices=["console", "json"], help="default console")
    p.add_argument(
        "--max-sessions",
        type=int,
        metavar="N",
        help="legacy upstream sessions per principal, one per feature set (default 1)",
    )
    p.add_argument(
        "--max-processes",
        type=int,
        metavar="N",
        help="legacy upstream processes across all principals (default 16)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        metavar="SECONDS",
        help="bound on starting the upstream: spawn, era probe, initialize (default 30)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        metavar="SECONDS",
        help="bound on every upstream call (default 120)",
    )
    p.add_argument(
        "--probe-timeout",
        type=float,
        metavar="SECONDS",
        help="how long the era probe waits for server/discover (default 5)",
    )
    p.add_argument(
        "--max-message-bytes",
        type=int,
        metavar="BYTES",
        help="largest message accepted from either side (default 4 MiB)",
    )
    return p


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    args = list(argv)
    if "--" in args:
        i = args.index("--")
        return args[:i], args[i + 1 :]
    return args, []


def _build_config(ns: argparse.Namespace, command: list[str]) -> config_mod.Config:
    base = config_mod.load(ns.config)
    overrides: dict[str, Any] = {
        "listen": ns.listen,
        "upstream_era": ns.upstream_era,
        "log_level": ns.log_level,
        "log_format": ns.log_format,
        "max_sessions": ns.max_sessions,
        "max_processes": ns.max_processes,
        "startup_timeout": ns.startup_timeout,
        "request_timeout": ns.request_timeout,
        "probe_timeout": ns.probe_timeout,
        "max_message_bytes": ns.max_message_bytes,
        "command": tuple(command) if command else None,
        "upstream_url": ns.upstream,
    }
    return base.with_overrides(**overrides)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    opts, command = _split(argv)
    sub = None
    for i, token in enumerate(opts):
        # Every option takes a value, so a sub-command is a bare word that does
        # not follow an option in `--name value` form.
        follows_option = i > 0 and opts[i - 1].startswith("--") and "=" not in opts[i - 1]
        if token in ("probe", "demo") and not follows_option:
            sub = token
            del opts[i]
            break
    parser = _parser("mcp-era-gateway" + (f" {sub}" if sub else ""))
    ns = parser.parse_args(opts)
    try:
        if sub == "demo":
            from gateway.demo import run_demo

            cfg = _build_config(ns, command)
            log_setup.configure(cfg.log_level if ns.log_level else "warning", cfg.log_format)
            return anyio.run(run_demo, cfg)
        cfg = _build_config(ns, command)
    except config_mod.ConfigError as exc:
        parser.error(str(exc))
    if not cfg.command and cfg.upstream_url is None:
        parser.error(
            "no upstream: give a command after --, or --upstream URL, or set them in the config"
        )
    log_setup.configure(cfg.log_level, cfg.log_format)
    if sub == "probe":
        from gateway.probe_command import run_probe

        return anyio.run(run_probe, cfg)
    if cfg.listen != "stdio":
        from gateway.runtime.http_app import serve_http

        return anyio.run(serve_http, cfg)
    from gateway.runtime.stdio_app import serve_stdio

    return anyio.run(serve_stdio, cfg)
