"""Command line: `mcp-era-gateway [options] -- COMMAND...`, `probe`, `demo`."""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import anyio
import structlog

from gateway import build_info, log_setup
from gateway import config as config_mod
from gateway.config import environment, layers

PROG = "mcp-era-gateway"
# Exit status for a configuration the gateway cannot run with (as argparse's).
EXIT_CONFIG = 2

USAGE = """\
mcp-era-gateway [--config PATH] [--listen stdio] [--upstream-era auto|modern|legacy]
                [--log-level LEVEL] [--log-format console|json] [more options] -- COMMAND [ARG...]
mcp-era-gateway probe [options] (URL | -- COMMAND [ARG...])
mcp-era-gateway demo [options] [-- COMMAND [ARG...]]
mcp-era-gateway example-server"""

# Each sub-command's own usage line and description (`SUB --help`).
SUBCOMMANDS = {
    "probe": (
        "mcp-era-gateway probe [options] (URL | -- COMMAND [ARG...])",
        "Classify an upstream server (modern, legacy or dual) and print what it said "
        "as one JSON object on stdout; exit 1 if it cannot be reached.",
    ),
    "demo": (
        "mcp-era-gateway demo [options] [-- COMMAND [ARG...]]",
        "Show the translation step by step: a scripted modern client talks through the "
        "gateway to the bundled legacy notes server, or to COMMAND (then the script is "
        "made from the tools it lists).",
    ),
    "example-server": (
        "mcp-era-gateway example-server",
        "Run the bundled legacy notes server on stdin/stdout, to put behind the gateway: "
        "mcp-era-gateway -- mcp-era-gateway example-server",
    ),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other configuration error (not the usage block).
        raise config_mod.ConfigError(f"{message} (see --help)")


def _parser(sub: str | None = None) -> argparse.ArgumentParser:
    usage, description = SUBCOMMANDS.get(
        sub or "",
        (USAGE, "Let every generation of MCP client talk to every generation of MCP server."),
    )
    p = _Parser(
        prog=PROG + (f" {sub}" if sub else ""),
        usage=usage,
        description=description,
        epilog="Everything after -- is the upstream server command (overrides [upstream] command). "
        "Every config key can also be set as MCP_ERA_GATEWAY_<TABLE>_<KEY>; options win over "
        "the environment, which wins over the file.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {build_info.version()}")
    if sub == "example-server":
        p.epilog = None
        return p
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
    p.add_argument(
        "--log-level", type=str.lower, choices=list(log_setup.LEVELS), help="default info"
    )
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
        "--root",
        action="append",
        metavar="PATH|URI",
        help="a root that answers the server's roots/list when no client call can "
        "(repeatable; replaces [upstream] roots)",
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


# Config field -> the option that sets it (`--` is the upstream command).
_OPTIONS = {
    "listen": "--listen",
    "upstream_era": "--upstream-era",
    "log_level": "--log-level",
    "log_format": "--log-format",
    "max_sessions": "--max-sessions",
    "max_processes": "--max-processes",
    "startup_timeout": "--startup-timeout",
    "request_timeout": "--request-timeout",
    "probe_timeout": "--probe-timeout",
    "max_message_bytes": "--max-message-bytes",
    "upstream_url": "--upstream",
}


def _merge(
    ns: argparse.Namespace, command: list[str], environ: Mapping[str, str] | None = None
) -> layers.Merged:
    """The file, then the environment, then the command line: the later wins."""
    options: dict[str, tuple[Any, str]] = {}
    for name, option in _OPTIONS.items():
        value = getattr(ns, option.removeprefix("--").replace("-", "_"))
        if value is not None:
            options[name] = (value, option)
    if command:
        options["command"] = (tuple(command), "-- COMMAND")
    if ns.root:
        options["static_roots"] = (
            tuple(config_mod.root_from(r, "--root") for r in ns.root),
            "--root",
        )
    file_layer = config_mod.read(ns.config)
    env_layer = environment.from_environ(os.environ if environ is None else environ)
    return layers.merge(file_layer, env_layer, options)


def _build_config(
    ns: argparse.Namespace, command: list[str], environ: Mapping[str, str] | None = None
) -> config_mod.Config:
    return _merge(ns, command, environ).config


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except config_mod.ConfigError as exc:
        return _refuse(str(exc), _log_format_asked(argv))


def _main(argv: list[str]) -> int:
    opts, command = _split(argv)
    sub, url, rest = _words(opts)
    _refuse_bare_words(sub, rest)
    ns = _parser(sub).parse_args(opts)
    if sub == "example-server":
        if command:
            raise config_mod.ConfigError("example-server takes no server command")
        return _example_server()
    if url is not None:
        if ns.upstream is not None or command:
            raise config_mod.ConfigError(
                f"probe takes one upstream: {url}, --upstream URL or -- COMMAND"
            )
        ns.upstream = url
    merged = _merge(ns, command)
    cfg = merged.config
    if cfg.tracing:
        _start_tracing(cfg)
    if sub == "demo":
        from gateway.demo import run_demo

        log_setup.configure(cfg.log_level if ns.log_level else "warning", cfg.log_format)
        return anyio.run(run_demo, cfg)
    if not cfg.command and cfg.upstream_url is None:
        raise config_mod.ConfigError(
            "no upstream: give a command after --, or --upstream URL, or set them in the config"
        )
    try:
        _check_upstream_command(cfg)
    except config_mod.ConfigError as exc:
        raise merged.blame(exc) from None
    log_setup.configure(cfg.log_level, cfg.log_format)
    if sub == "probe":
        from gateway.probe_command import run_probe

        return anyio.run(run_probe, cfg)
    if cfg.listen != "stdio":
        from gateway.runtime.http_app import serve_http

        _settle_memory()
        return anyio.run(serve_http, cfg)
    from gateway.runtime.stdio_app import serve_stdio

    _settle_memory()
    return anyio.run(serve_stdio, cfg)


def _example_server() -> int:
    """The bundled notes server on our stdin/stdout: nothing else may write
    to stdout (it is the server's MCP channel), so no logging is set up."""
    from gateway.examples import notes_server

    notes_server.main()
    return 0


def _words(opts: list[str]) -> tuple[str | None, str | None, list[str]]:
    """The sub-command, a probe's URL, and the first other bare word with
    all that follows it (a server command given without `--`), all taken
    out of `opts`. Every option takes a value, so a bare word is one that
    does not follow an option in `--name value` form."""
    given = list(opts)
    sub: str | None = None
    url: str | None = None
    rest: list[str] = []
    opts.clear()
    for i, token in enumerate(given):
        follows_option = i > 0 and given[i - 1].startswith("--") and "=" not in given[i - 1]
        if token.startswith("-") or follows_option:
            opts.append(token)
        elif sub is None and url is None and token in SUBCOMMANDS:
            sub = token
        elif sub == "probe" and url is None and token.startswith(("http://", "https://")):
            url = token  # `probe URL` is `probe --upstream URL`
        else:
            rest = given[i:]
            break
    return sub, url, rest


def _refuse_bare_words(sub: str | None, rest: list[str]) -> None:
    """A bare word is a server command that misses its `--`: say where it goes."""
    if sub == "probe" and rest and "://" in rest[0]:
        raise config_mod.ConfigError(f"probe takes an http:// or https:// URL, not {rest[0]!r}")
    if rest:
        where = f"{PROG} {sub}" if sub else PROG
        raise config_mod.ConfigError(
            f"unrecognized arguments: {' '.join(rest)}; put -- before the server command: "
            f"{where} [options] -- {' '.join(rest)}"
        )


# Young objects the collector lets accumulate before it looks: most of a
# call's objects are freed by reference counting first, so a higher mark
# mostly saves collections (700, the default, ran one every few dozen calls).
GC_YOUNG = 5000


def _settle_memory() -> None:
    """Every module is imported: what exists now lives as long as the
    process. Frozen out of the cyclic collector's reach, a full collection no
    longer walks ~40,000 import-time objects in the middle of the traffic;
    cycles made later are still collected. Under load this was ~7 µs of a
    ~90 µs HTTP call (bench/)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def _start_tracing(cfg: config_mod.Config) -> None:
    """Traces are configured: the `otel` extra must be there, said at once
    as a configuration error rather than a traceback on the first request."""
    try:
        from gateway.runtime import tracing

        tracing.install(cfg)
    except ImportError as exc:
        raise config_mod.ConfigError(
            f"[tracing] is configured but OpenTelemetry is not installed ({exc.name or exc}): "
            "pip install 'mcp-era-gateway[otel]'"
        ) from None


def _check_upstream_command(cfg: config_mod.Config) -> None:
    """A working directory or a program that is not there is a configuration
    error, said at once, not an outage reported to every client."""
    if cfg.cwd is not None and not os.path.isdir(cfg.cwd):
        raise config_mod.ConfigError(
            f"[upstream] cwd {cfg.cwd!r} is not a directory", settings=("cwd",)
        )
    if not cfg.command:
        return
    program = cfg.command[0]
    if os.sep in program:
        # exec resolves a relative path in the child's working directory.
        path = os.path.join(cfg.cwd or os.curdir, program)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise config_mod.ConfigError(
                f"upstream command {program!r} is not an executable file", settings=("command",)
            )
        return
    search = {**os.environ, **cfg.env}.get("PATH", os.defpath)
    if shutil.which(program, path=search) is None:
        raise config_mod.ConfigError(
            f"upstream command {program!r} is not found on PATH", settings=("command",)
        )


def _log_format_asked(argv: list[str]) -> str:
    """The log format asked for (--log-format, else the environment's, else
    the config file's), read without trusting the rest of the configuration."""
    opts, _ = _split(argv)
    config_path = None
    for i, token in enumerate(opts):
        name, inline, value = token.partition("=")
        if not inline:
            value = opts[i + 1] if i + 1 < len(opts) else ""
        if name == "--log-format":
            return "json" if value == "json" else "console"
        if name == "--config":
            config_path = value
    from_env = os.environ.get(environment.variable("gateway", "log_format"))
    if from_env is not None:
        return "json" if from_env.lower() == "json" else "console"
    if config_path is not None:
        try:
            raw = tomllib.loads(Path(config_path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return "console"
        table = raw.get("gateway")
        if isinstance(table, dict) and table.get("log_format") == "json":
            return "json"
    return "console"


def _refuse(message: str, log_format: str) -> int:
    """One line on stderr, then exit 2: JSON under --log-format json, so that
    a log collector reads it like every other line."""
    if log_format == "json":
        log_setup.configure("error", "json")
        structlog.get_logger("gateway.cli").error("invalid configuration", error=message)
    else:
        print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_CONFIG
