"""Traces (issue #13: "a span for each client request and each upstream call
with the era path, method, tool name, outcome and MRTR round as attributes;
W3C trace context taken from the client (`_meta` `traceparent`/`tracestate`
on modern requests, the same keys on legacy ones) and passed upstream in the
form that era uses. No cost when not configured"), checked with the SDK's
in-memory exporter over scripted servers.

2026-07-28 basic/index, "OpenTelemetry trace context": the `_meta` keys
`traceparent`, `tracestate` and `baggage` carry trace context, following W3C
Trace Context. 2025-11-25 reserves nothing for it; its `_meta` takes any key,
and the OpenTelemetry MCP conventions use the same keys there, so a legacy
server gets the context in `params._meta` too."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from structlog.testing import capture_logs

from gateway import cli, wire
from gateway.config import Config, ConfigError, load
from gateway.core import trace_context as tc
from tests.inprocess import http_gateway
from tests.mrtr_calls import ELICIT, accept, ask_name, meta, mrtr_tool, send_and_wait
from tests.scripted import Recorder, ScriptedServer, gateway, legacy_server, modern_server

pytestmark = pytest.mark.anyio

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"  # the spec's example
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def traces() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


async def echo(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "hi"}]}


def of_kind(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is kind]


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [
        s
        for s in of_kind(exporter, SpanKind.CLIENT)
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


def context_of(span: ReadableSpan) -> str:
    ctx = span.context
    assert ctx is not None
    return tc.format_traceparent(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))


def sent_upstream(seen: Recorder, method: str) -> list[dict[str, Any]]:
    return [m["params"]["_meta"] for m in seen if m.get("method") == method]


async def test_modern_client_to_legacy_server(
    traces: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """The client's traceparent becomes the request span's parent; the
    upstream call is its CLIENT child, whose context the legacy server gets
    in `_meta` with the client's tracestate as it was and every other `_meta`
    key untouched. (These calls take the fast path, sent from the read loop;
    the MRTR tests below take the paths that wait, in a task.)"""
    provider, exporter = traces
    seen = Recorder()
    client_meta = {
        "traceparent": TRACEPARENT,
        "tracestate": TRACESTATE,
        "baggage": "user=ada",
        "com.example/tag": {"x": 1},
    }
    async with gateway(
        legacy_server({"tools/call": echo}, log=seen), tracer_provider=provider
    ) as c:
        for _ in range(2):
            reply = await c.call("tools/call", {"name": "echo", "_meta": client_meta})
            assert reply["result"]["content"][0]["text"] == "hi"
    servers = of_kind(exporter, SpanKind.SERVER)
    assert len(servers) == 2
    upstream = sent_upstream(seen, "tools/call")
    for server, meta_up in zip(servers, upstream, strict=True):
        assert server.name == "tools/call echo"
        assert server.parent is not None and server.parent.is_remote
        assert server.parent.span_id == PARENT_ID
        assert server.context is not None and server.context.trace_id == TRACE_ID
        attrs = dict(server.attributes or {})
        assert attrs["mcp.method.name"] == "tools/call"
        assert attrs["gen_ai.tool.name"] == "echo"
        assert attrs["mcp.era.client"] == "modern"
        assert attrs["mcp.era.path"] == "modern->legacy"
        assert attrs["mcp.era.upstream"] == "legacy"
        assert attrs["mcp.outcome"] == "ok"
        assert "mcp.mrtr.round" not in attrs
        (call,) = children(exporter, server)
        assert dict(call.attributes or {})["mcp.era.upstream"] == "legacy"
        assert dict(call.attributes or {})["mcp.outcome"] == "ok"
        assert meta_up["traceparent"] == context_of(call)
        assert meta_up["tracestate"] == TRACESTATE
        assert meta_up["baggage"] == "user=ada"
        assert meta_up["com.example/tag"] == {"x": 1}


async def test_legacy_client_to_modern_server(
    traces: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Issue #13: the same `_meta` keys on a legacy client's request; the
    modern server gets the gateway's child context beside the per-request
    fields the translation adds."""
    provider, exporter = traces
    seen = Recorder()
    async with gateway(
        modern_server({"tools/call": echo}, log=seen), tracer_provider=provider
    ) as c:
        await c.initialize()
        params = {"name": "echo", "_meta": {"traceparent": TRACEPARENT}}
        reply = await c.call("tools/call", params, modern=False)
    assert reply["result"]["content"][0]["text"] == "hi"
    server = next(s for s in of_kind(exporter, SpanKind.SERVER) if s.name == "tools/call echo")
    attrs = dict(server.attributes or {})
    assert attrs["mcp.era.client"] == "legacy"
    assert attrs["mcp.era.path"] == "legacy->modern"
    assert server.parent is not None and server.parent.span_id == PARENT_ID
    (call,) = children(exporter, server)
    (meta_up,) = sent_upstream(seen, "tools/call")
    assert meta_up["traceparent"] == context_of(call)
    assert "tracestate" not in meta_up
    assert meta_up["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"


async def test_an_mrtr_round_modern_client_to_legacy_server(
    traces: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """2026-07-28 basic/patterns/mrtr: the first request ends `input_required`,
    the retry (round 1) completes; the held upstream call is the first
    request's child and carries its context to the legacy server."""
    provider, exporter = traces
    seen = Recorder()
    async with gateway(
        legacy_server({"tools/call": ask_name}, log=seen), tracer_provider=provider
    ) as c:
        first_params = {
            "name": "ask_name",
            "arguments": {},
            "_meta": {**meta(), "traceparent": TRACEPARENT},
        }
        first = await send_and_wait(c, wire.request(1, "tools/call", first_params), None)
        assert first["result"]["resultType"] == "input_required"
        retry_params = {
            **first_params,
            "inputResponses": {"input-1": accept("Ada")},
            "requestState": first["result"]["requestState"],
        }
        final = await send_and_wait(c, wire.request(2, "tools/call", retry_params), None)
    assert final["result"]["content"][0]["text"] == "Hello, Ada"
    by_id = {
        dict(s.attributes or {})["jsonrpc.request.id"]: s
        for s in of_kind(exporter, SpanKind.SERVER)
    }
    asked, answered = dict(by_id["1"].attributes or {}), dict(by_id["2"].attributes or {})
    assert asked["mcp.outcome"] == "input_required" and "mcp.mrtr.round" not in asked
    assert answered["mcp.outcome"] == "ok"
    assert answered["mcp.mrtr.retry"] is True and answered["mcp.mrtr.round"] == 1
    (call,) = children(exporter, by_id["1"])
    assert dict(call.attributes or {})["mcp.outcome"] == "ok"
    (meta_up,) = sent_upstream(seen, "tools/call")
    assert meta_up["traceparent"] == context_of(call)
    assert ELICIT  # the server asked the spec's elicitation (tests/test_mrtr_bridge.py)


async def test_an_mrtr_round_legacy_client_to_modern_server(
    traces: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """DESIGN §5.2.5: the gateway retries upstream with the legacy client's
    answers; the retry is round 1 of the same request, each upstream call
    carrying its own span's context."""
    provider, exporter = traces
    seen = Recorder()
    needs = {"who": {"method": "elicitation/create", "params": ELICIT}}
    async with gateway(
        modern_server({"tools/call": mrtr_tool(needs)}, log=seen), tracer_provider=provider
    ) as c:
        await c.initialize({"elicitation": {}})
        params = {"name": "t", "_meta": {"traceparent": TRACEPARENT}}
        await c.send(wire.request(9, "tools/call", params))
        asked = await c.next()
        await c.send(wire.result_response(asked["id"], {"action": "accept", "content": {"n": 1}}))
        final = await c.next()
    assert final["id"] == 9 and "result" in final
    server = next(s for s in of_kind(exporter, SpanKind.SERVER) if s.name == "tools/call t")
    assert dict(server.attributes or {})["mcp.mrtr.round"] == 1
    calls = sorted(children(exporter, server), key=lambda s: s.start_time or 0)
    assert [dict(s.attributes or {}).get("mcp.mrtr.round") for s in calls] == [None, 1]
    assert dict(calls[0].attributes or {})["mcp.outcome"] == "input_required"
    assert dict(calls[1].attributes or {})["mcp.outcome"] == "ok"
    assert [m["traceparent"] for m in sent_upstream(seen, "tools/call")] == [
        context_of(s) for s in calls
    ]


async def test_an_error_outcome(traces: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """A JSON-RPC error ends both spans in error with its code."""
    provider, exporter = traces
    async with gateway(legacy_server({"tools/call": echo}), tracer_provider=provider) as c:
        reply = await c.call("prompts/get", {"name": "nope"})
    assert reply["error"]["code"] == -32601
    (server,) = of_kind(exporter, SpanKind.SERVER)
    attrs = dict(server.attributes or {})
    assert server.name == "prompts/get nope"
    assert attrs["mcp.outcome"] == "error"
    assert attrs["rpc.response.status_code"] == "-32601"
    assert server.status.status_code is StatusCode.ERROR
    (call,) = children(exporter, server)
    assert dict(call.attributes or {})["error.type"] == "-32601"


async def test_a_cancelled_request(traces: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """2026-07-28 "Cancellation": no reply goes to the client; its span ends
    `cancelled`, and so does the upstream call's."""
    provider, exporter = traces
    started = anyio.Event()

    async def silent(server: ScriptedServer, msg: wire.Message) -> None:
        started.set()

    async with gateway(legacy_server({"tools/call": silent}), tracer_provider=provider) as c:
        await c.call("tools/list", {})  # settled: the call below takes the fast path
        await c.send(wire.request(7, "tools/call", {"name": "x", "_meta": meta({})}))
        with anyio.fail_after(5):
            await started.wait()
        await c.send(wire.notification("notifications/cancelled", {"requestId": 7}))
    server = next(s for s in of_kind(exporter, SpanKind.SERVER) if s.name == "tools/call x")
    assert dict(server.attributes or {})["mcp.outcome"] == "cancelled"
    (call,) = children(exporter, server)
    assert dict(call.attributes or {})["mcp.outcome"] == "cancelled"


async def test_a_reused_id_leaves_the_span_of_the_call_that_has_it(
    traces: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """JSON-RPC ids of requests in progress are unique; a client that reuses
    one gets -32600 under that id, and that refusal must not end (as an
    error) the span of the call still running under it."""
    provider, exporter = traces
    arrived, release = anyio.Event(), anyio.Event()

    async def slow(server: ScriptedServer, msg: wire.Message) -> dict[str, Any]:
        arrived.set()
        await release.wait()
        return {"content": []}

    async with gateway(legacy_server({"tools/call": slow}), tracer_provider=provider) as c:
        await c.call("tools/list", {})
        call = wire.request(5, "tools/call", {"name": "slow", "_meta": meta({})})
        await c.send(call)
        with anyio.fail_after(5):
            await arrived.wait()
        await c.send(call)
        refused = await c.next()
        assert refused["id"] == 5 and refused["error"]["code"] == -32600
        release.set()
        answered = await c.next()
        assert answered["id"] == 5 and "result" in answered
    (server,) = [s for s in of_kind(exporter, SpanKind.SERVER) if s.name == "tools/call slow"]
    assert dict(server.attributes or {})["mcp.outcome"] == "ok"


@pytest.mark.parametrize(
    "bad",
    [
        TRACEPARENT.upper(),
        "ff" + TRACEPARENT[2:],
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        TRACEPARENT + "-extra",
        12,
    ],
)
async def test_a_malformed_traceparent_is_ignored(
    traces: tuple[TracerProvider, InMemorySpanExporter], bad: object
) -> None:
    """Issue #13: "a malformed traceparent from a client is ignored (a new
    root span), never an error, and never forwarded as a parent"; its
    tracestate goes with it (W3C §3.3)."""
    provider, exporter = traces
    seen = Recorder()
    async with gateway(
        legacy_server({"tools/call": echo}, log=seen), tracer_provider=provider
    ) as c:
        params = {"name": "echo", "_meta": {"traceparent": bad, "tracestate": TRACESTATE}}
        reply = await c.call("tools/call", params)
    assert "result" in reply
    (server,) = of_kind(exporter, SpanKind.SERVER)
    assert server.parent is None
    assert server.context is not None and server.context.trace_id != TRACE_ID
    (call,) = children(exporter, server)
    (meta_up,) = sent_upstream(seen, "tools/call")
    assert meta_up["traceparent"] == context_of(call) != bad
    assert "tracestate" not in meta_up


@pytest.mark.parametrize("traceparent", [TRACEPARENT, "junk"])
async def test_tracing_off_passes_meta_through_as_today(traceparent: str) -> None:
    """Issue #13: when tracing is off, `_meta` passes through exactly as
    before, a client's traceparent (valid or not) included."""
    seen = Recorder()
    client_meta = {"traceparent": traceparent, "tracestate": TRACESTATE, "baggage": "k=v"}
    async with gateway(legacy_server({"tools/call": echo}, log=seen)) as c:
        assert c.service.tracing is None
        await c.call("tools/call", {"name": "echo", "_meta": client_meta})
    (meta_up,) = sent_upstream(seen, "tools/call")
    assert {k: meta_up[k] for k in client_meta} == client_meta


def test_opentelemetry_is_never_imported_when_not_configured() -> None:
    """Issue #13: "No cost when not configured": a gateway built without
    `[tracing]` imports no opentelemetry module."""
    code = (
        "import sys\n"
        "import gateway.cli, gateway.runtime.stdio_app, gateway.runtime.http_app\n"
        "from gateway.config import Config\n"
        "from gateway.runtime.service import GatewayService\n"
        "service = GatewayService(Config(command=('x',), state_key='k' * 32))\n"
        "assert service.tracing is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_tracing_table(tmp_path: Path) -> None:
    """`[tracing]`: on when enabled or an endpoint is given; values checked."""
    path = tmp_path / "g.toml"
    path.write_text('[tracing]\notlp_endpoint = "http://127.0.0.1:4318/v1/traces"\n')
    cfg = load(path)
    assert cfg.tracing and cfg.tracing_sample_ratio == 1.0
    assert not Config().tracing
    assert Config(tracing_enabled=True).tracing
    for bad in (
        "[tracing]\nsample_ratio = 1.5\n",
        '[tracing]\notlp_endpoint = "collector:4318"\n',
        '[tracing]\nservice_name = " "\n',
    ):
        path.write_text(bad)
        with pytest.raises(ConfigError, match=r"\[tracing\]"):
            load(path)


def test_configured_without_the_extra_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #13: "Configured but the extra not installed: one clear error at
    start-up, exit non-zero (never a traceback)"."""
    path = tmp_path / "g.toml"
    path.write_text("[tracing]\nenabled = true\n")
    # Import of opentelemetry fails as it does when the extra is missing.
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "gateway.runtime.tracing", raising=False)
    status = cli.main(["--config", str(path), "--", sys.executable, "-c", "pass"])
    err = capsys.readouterr().err
    assert status == cli.EXIT_CONFIG
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "pip install 'mcp-era-gateway[otel]'" in err


def test_install_names_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service name: `[tracing] service_name`, else OTEL_SERVICE_NAME,
    else mcp-era-gateway."""
    from opentelemetry import trace

    from gateway.runtime import tracing

    monkeypatch.setattr(trace, "set_tracer_provider", lambda provider: None)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    for cfg, name in (
        (Config(tracing_enabled=True), "from-env"),
        (Config(tracing_enabled=True, tracing_service_name="mine"), "mine"),
    ):
        provider = tracing.install(cfg)
        assert provider.resource.attributes["service.name"] == name
        provider.shutdown()
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    provider = tracing.install(Config(tracing_enabled=True))
    assert provider.resource.attributes["service.name"] == "mcp-era-gateway"
    provider.shutdown()


async def test_over_the_http_front(traces: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """The same spans and context for a modern client's POST and for a legacy
    client's session (each answered through the HTTP front's own outputs; a
    2025-06-18 session, whose answers are plain JSON)."""
    provider, exporter = traces
    seen = Recorder()
    async with http_gateway(
        legacy_server({"tools/call": echo}, log=seen), tracer_provider=provider
    ) as gw:
        reply = await gw.modern(
            "tools/call", {"name": "echo", "_meta": {"traceparent": TRACEPARENT}}
        )
        assert reply.status_code == 200 and "result" in reply.json()
        init = await gw.post(
            wire.request(
                1,
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            )
        )
        session = {"mcp-session-id": init.headers["mcp-session-id"]}
        await gw.post(wire.notification("notifications/initialized"), session)
        call = wire.request(
            2, "tools/call", {"name": "echo", "_meta": {"traceparent": TRACEPARENT}}
        )
        legacy = await gw.post(call, {**session, "mcp-protocol-version": "2025-06-18"})
        assert legacy.status_code == 200 and "result" in legacy.json()
    servers = [s for s in of_kind(exporter, SpanKind.SERVER) if s.name == "tools/call echo"]
    assert [dict(s.attributes or {})["mcp.era.client"] for s in servers] == ["modern", "legacy"]
    upstream = sent_upstream(seen, "tools/call")
    for server, meta_up in zip(servers, upstream, strict=True):
        assert server.parent is not None and server.parent.span_id == PARENT_ID
        assert dict(server.attributes or {})["mcp.outcome"] == "ok"
        (call_span,) = children(exporter, server)
        assert meta_up["traceparent"] == context_of(call_span)


def test_the_sdks_own_log_is_one_limited_line() -> None:
    """A collector that is down makes the SDK log a line per retry from its
    export thread: the operator sees one gateway line a minute with a count,
    never a traceback or a flood."""
    import logging

    from gateway.runtime.tracing import SdkLog

    handler = SdkLog()
    record = logging.LogRecord(
        "opentelemetry.exporter.otlp",
        logging.WARNING,
        __file__,
        1,
        "Transient error %s",
        ("x",),
        None,
    )
    with capture_logs() as logs:
        for _ in range(100):
            handler.emit(record)
    assert [entry["detail"] for entry in logs] == ["Transient error x"]
