"""OpenTelemetry traces (the `otel` extra): a SERVER span for each client
request the gateway takes and a CLIENT span, its child, for each upstream
call made for it, whose context goes upstream in `params._meta`.

Imported only when `[tracing]` is configured (GatewayService, cli.py): with
tracing off, opentelemetry is never imported and a request pays one
attribute check. What the messages carry and mean is core/trace_context.py's.

A request's span ends when its reply goes to the client: the link's output
is wrapped once (`_TracedOutput`), so every way a reply leaves — the fast
path's callback, a task, a refusal — ends it, and a request cancelled by the
client or its link's end ends it as `cancelled`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

import gateway
from gateway import era, wire
from gateway.client_link import CURRENT_REQUEST, MRTR_ROUND, ClientLink
from gateway.config import Config
from gateway.core import trace_context as tc
from gateway.log_limit import limited
from gateway.runtime.pending_calls import ReplyCallback
from gateway.runtime.upstream_pool import UpstreamPool
from gateway.runtime.upstream_session import UpstreamSession
from gateway.upstream_errors import UpstreamError

DEFAULT_SERVICE_NAME = "mcp-era-gateway"
# Requests traced at once on one client link; past it a request goes
# untraced rather than the table grow without bound.
MAX_OPEN_PER_LINK = 4096

CallFn = Callable[..., Awaitable[wire.Message]]
StartFn = Callable[..., int]


def install(config: Config) -> TracerProvider:
    """The process's tracer provider, exporting over OTLP/HTTP. What the
    config leaves unset the SDK takes from the standard variables
    (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_HEADERS…); ImportError without the exporter."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    name = (
        config.tracing_service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    )
    resource = Resource.create({SERVICE_NAME: name, SERVICE_VERSION: gateway.__version__})
    # A client's sampled flag decides its traces; the ratio, new ones.
    sampler = ParentBased(TraceIdRatioBased(config.tracing_sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(config.tracing_otlp_endpoint)))
    trace.set_tracer_provider(provider)
    sdk_log = logging.getLogger("opentelemetry")
    if not any(isinstance(h, SdkLog) for h in sdk_log.handlers):
        sdk_log.addHandler(SdkLog())
    sdk_log.propagate = False
    return provider


class SdkLog(logging.Handler):
    """The SDK's own log records in the gateway's log, one line a minute with
    a count: a collector that is down makes its export thread log a line per
    retry, with a traceback, in a format of its own."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._limit = limited("gateway.tracing")

    def emit(self, record: logging.LogRecord) -> None:
        self._limit.warning(
            "traces: OpenTelemetry SDK problem", sdk=record.name, detail=record.getMessage()[:300]
        )


def _remote_parent(found: tc.ClientContext) -> Context:
    parent = found.parent
    state = TraceState.from_header([found.tracestate]) if found.tracestate else None
    context = SpanContext(
        parent.trace_id,
        parent.span_id,
        is_remote=True,
        trace_flags=TraceFlags(parent.flags),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(context))


def _record(span: Span, outcome: tc.Outcome) -> None:
    span.set_attribute("mcp.outcome", outcome.kind)
    if outcome.kind == tc.ERROR:
        code = "" if outcome.code is None else str(outcome.code)
        span.set_attribute("error.type", code or "error")
        if outcome.code is not None:
            span.set_attribute("rpc.response.status_code", code)
        span.set_status(Status(StatusCode.ERROR, outcome.message))
    elif outcome.kind == tc.TOOL_ERROR:
        span.set_attribute("error.type", tc.TOOL_ERROR)
        span.set_status(Status(StatusCode.ERROR))


class RequestSpan:
    """One client request's SERVER span, and the upstream calls made for it."""

    __slots__ = ("fast_call", "legacy", "span", "tracestate", "tracing")

    def __init__(
        self, tracing: RequestTracing, span: Span, legacy: bool, tracestate: str | None
    ) -> None:
        self.tracing = tracing
        self.span = span
        self.legacy = legacy
        self.tracestate = tracestate
        # The upstream call sent at once, in progress: a cancellation drops it
        # upstream without a reply, so the request's end ends its span.
        self.fast_call: Span | None = None

    def finish(self, reply: wire.Message | None, round_: int = 0) -> None:
        """End the span with `reply` (None: cancelled); `round_`: the MRTR
        round the request was on, as its own task knows it."""
        span = self.span
        pool = self.tracing.pool
        if pool.settled:
            span.set_attribute("mcp.era.path", pool.path_for(self.legacy))
            span.set_attribute("mcp.era.upstream", pool.era_name or "")
        if round_:
            span.set_attribute("mcp.mrtr.round", round_)
        if reply is None:
            span.set_attribute("mcp.outcome", tc.CANCELLED)
            if self.fast_call is not None:
                self.fast_call.set_attribute("mcp.outcome", tc.CANCELLED)
                self.fast_call.end()
                self.fast_call = None
        else:
            _record(span, tc.outcome_of(reply))
        span.end()

    def _upstream_span(
        self, session: UpstreamSession, method: str, params: dict[str, Any] | None
    ) -> tuple[Span, dict[str, Any]]:
        """The CLIENT span of one upstream call, and the params that carry
        its context upstream (in `_meta`, both eras)."""
        attrs: dict[str, str | bool | int] = dict(
            tc.request_attributes({"method": method, "params": params})
        )
        profile = session.profile
        if profile is not None:
            attrs["mcp.era.upstream"] = profile.era.value
        round_ = MRTR_ROUND.get()
        if round_:
            attrs["mcp.mrtr.round"] = round_
        name = tc.span_name({"method": method, "params": params})
        span = self.tracing.tracer.start_span(
            name,
            context=trace.set_span_in_context(self.span),
            kind=SpanKind.CLIENT,
            attributes=attrs,
        )
        ctx = span.get_span_context()
        header = tc.format_traceparent(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))
        return span, tc.with_trace_context(params, header, self.tracestate)

    def start_call(self, session: UpstreamSession) -> StartFn:
        """`session.start_call` with a CLIENT span (a call sent at once)."""

        def start(
            method: str, params: dict[str, Any] | None, on_reply: ReplyCallback, **kw: Any
        ) -> int:
            span, params = self._upstream_span(session, method, params)

            def replied(reply: wire.Message) -> None:
                self.fast_call = None
                _record(span, tc.outcome_of(reply))
                span.end()
                on_reply(reply)

            try:
                upstream_id = session.start_call(method, params, replied, **kw)
            except UpstreamError as exc:  # not sent: the task path takes the call
                span.set_status(Status(StatusCode.ERROR, f"not sent: {exc}"))
                span.end()
                raise
            self.fast_call = span
            return upstream_id

        return start

    def call(self, session: UpstreamSession) -> CallFn:
        """`session.call` with a CLIENT span (calls that wait)."""

        async def call(method: str, params: dict[str, Any] | None, **kw: Any) -> wire.Message:
            span, params = self._upstream_span(session, method, params)
            try:
                reply = await session.call(method, params, **kw)
            except UpstreamError as exc:
                span.set_attribute("mcp.outcome", tc.ERROR)
                span.set_attribute("error.type", type(exc).__name__)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                raise
            except anyio.get_cancelled_exc_class():  # the call is over upstream too
                span.set_attribute("mcp.outcome", tc.CANCELLED)
                raise
            else:
                _record(span, tc.outcome_of(reply))
                return reply
            finally:
                span.end()

        return call


class _TracedOutput:
    """A client link's output, ending each request's span as its reply leaves."""

    __slots__ = ("_send", "_send_nowait", "spans")

    def __init__(self, link: ClientLink) -> None:
        self._send = link.send
        self._send_nowait = link.send_nowait
        self.spans: dict[wire.RequestId, RequestSpan] = {}

    def _replied(self, msg: wire.Message, round_: int) -> None:
        if "method" not in msg and self.spans:
            span = self.spans.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if span is not None:
                span.finish(msg, round_)

    async def send(self, msg: wire.Message) -> None:
        # A task's reply: the request's own task, whose context has its round.
        self._replied(msg, MRTR_ROUND.get())
        await self._send(msg)

    def send_past_spans(self, msg: wire.Message) -> None:
        self._send_nowait(msg)

    def send_nowait(self, msg: wire.Message) -> None:
        # From the read loop or an upstream reader, whose context is no
        # request's; an MRTR round is always answered by a task.
        self._replied(msg, 0)
        self._send_nowait(msg)


def _output_of(link: ClientLink) -> _TracedOutput | None:
    owner = getattr(link.send_nowait, "__self__", None)
    return owner if isinstance(owner, _TracedOutput) else None


class RequestTracing:
    def __init__(self, pool: UpstreamPool, provider: trace.TracerProvider | None = None) -> None:
        self.pool = pool
        provider = provider or trace.get_tracer_provider()
        self.tracer = provider.get_tracer(DEFAULT_SERVICE_NAME, gateway.__version__)

    def request(self, link: ClientLink, msg: wire.Message) -> RequestSpan | None:
        """Start the SERVER span of a client request the gateway takes: a
        child of the client's valid `traceparent`, else a new trace."""
        output = _output_of(link)
        if output is None:
            output = _TracedOutput(link)
            link.send, link.send_nowait = output.send, output.send_nowait
        msg_id = msg["id"]
        if len(output.spans) >= MAX_OPEN_PER_LINK or msg_id in output.spans:
            return None
        found = tc.client_context(msg)
        legacy = not era.is_modern(msg)
        attrs: dict[str, str | bool] = {
            **tc.request_attributes(msg),
            "mcp.era.client": "legacy" if legacy else "modern",
            "jsonrpc.request.id": str(msg_id),
        }
        span = self.tracer.start_span(
            tc.span_name(msg),
            context=None if found is None else _remote_parent(found),
            kind=SpanKind.SERVER,
            attributes=attrs,
        )
        traced = RequestSpan(self, span, legacy, None if found is None else found.tracestate)
        output.spans[msg_id] = traced
        return traced

    def current(self, link: ClientLink) -> RequestSpan | None:
        """The span of the request the current task works for."""
        output = _output_of(link)
        msg_id = CURRENT_REQUEST.get()
        if output is None or msg_id is None:
            return None
        return output.spans.get(msg_id)

    def call(self, session: UpstreamSession, link: ClientLink) -> CallFn:
        """`session.call`, traced as a child of the current request's span."""
        traced = self.current(link)
        return session.call if traced is None else traced.call(session)

    def send_untraced(self, link: ClientLink, msg: wire.Message) -> None:
        """Send `msg` ending no span: the refusal of a request whose id is
        still in progress answers under that id."""
        output = _output_of(link)
        (link.send_nowait if output is None else output.send_past_spans)(msg)

    def cancelled(self, link: ClientLink, msg_id: wire.RequestId) -> None:
        output = _output_of(link)
        traced = None if output is None else output.spans.pop(msg_id, None)
        if traced is not None:
            traced.finish(None)

    def link_dropped(self, link: ClientLink) -> None:
        output = _output_of(link)
        if output is not None:
            spans, output.spans = output.spans, {}
            for traced in spans.values():
                traced.finish(None)
