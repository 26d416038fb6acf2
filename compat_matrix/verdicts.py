"""How a run is judged: the `Observation` made from its client's JSON report
(`_observe`: a basic, notifications or tasks run on the whole report, an MRTR
run on its feature's steps), and the `Verdict` on it against what its cell
expects (`judge`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compat_matrix.cells import MRTR_FEATURES, URL_REQUIRED
from compat_matrix.runs import Run

# The steps of a client's notifications check start with this.
NOTIFY_STEP = "notifications: "
# ... and those of its tasks check (io.modelcontextprotocol/tasks, issue #16) with this;
# its `tasks: path` step says what happened (task statuses, or the ordinary answers).
TASKS_STEP = "tasks: "
# The features judged on the client's whole report that must hold their own steps.
STEPPED_FEATURES = {"notifications": NOTIFY_STEP, "tasks": TASKS_STEP}


@dataclass
class Observation:
    run: Run
    ok: bool
    duration: float
    exit_code: int | None
    timed_out: bool = False
    era: str | None = None
    protocol_version: str | None = None
    route: str | None = None  # py2: server/discover or initialize
    error: str | None = None
    leftovers: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    report: dict[str, Any] | None = None  # the client's whole report
    shared: int = 1  # how many cell runs this one client run served (--feature all)
    # MRTR: how the server's input requests reached the client; notifications:
    # how the change notifications did (the client's `notifications: delivered` step)
    input_path: str | None = None
    commands: list[str] = field(default_factory=list)  # role: command, as run (real ports)

    @property
    def outcome(self) -> str:
        return "works" if self.ok else "fails"

    @property
    def evidence(self) -> str:
        if not self.ok:
            return ("timeout: " if self.timed_out else "") + (self.error or "failed")
        bits = [self.era or "?"]
        if self.protocol_version:
            bits.append(self.protocol_version)
        if self.route:
            bits.append(f"via {self.route}")
        text = " ".join(bits)
        return f"{text}; {self.input_path}" if self.input_path else text

    def steps(self, feature: str | None = None) -> list[dict[str, Any]]:
        """The report's steps; with `feature`, only that feature's own steps."""
        steps = [s for s in (self.report or {}).get("steps") or [] if isinstance(s, dict)]
        if feature is None:
            return steps
        return [s for s in steps if _step_feature(s) == feature]


def first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _parse_report(stdout: str) -> dict[str, Any] | None:
    """The fixture clients print one JSON object; take the last line that is one."""
    for raw in reversed(stdout.strip().splitlines()):
        line = raw.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                if isinstance(parsed, dict):
                    return parsed
    return None


def _step_feature(step: dict[str, Any]) -> str | None:
    """The MRTR feature (or notifications) a report step belongs to
    (`<feature>: ...`), else None."""
    name = str(step.get("step", ""))
    for feature in (*MRTR_FEATURES, URL_REQUIRED, *STEPPED_FEATURES):
        if name.startswith(f"{feature}: "):
            return feature
    return None


def _input_path(steps: Sequence[dict[str, Any]]) -> str | None:
    """How the input a tool needed reached the client, from its call step:
    `input_required` rounds (the raw client: keys and methods, and whether a
    requestState came along) or the callbacks the SDK called (method#request id;
    a pushed request's JSON-RPC id, or the inputRequests key when the SDK ran the
    MRTR rounds itself)."""
    calls = [s for s in steps if not str(s.get("step", "")).endswith(" listed")]
    bits: list[str] = []
    for step in calls:
        tool = str(step.get("step", "")).split(": ", 1)[-1]
        rounds = step.get("rounds")
        callbacks = step.get("callbacks")
        if isinstance(rounds, list):
            asked = [
                f"{key}={method}"
                for item in rounds
                if isinstance(item, dict)
                for key, method in (item.get("inputRequests") or {}).items()
            ]
            state = any(isinstance(i, dict) and i.get("requestState") for i in rounds)
            bits.append(
                f"{tool}: input_required x{len(rounds)} [{', '.join(asked)}]"
                + (" +requestState" if state else "")
                if rounds
                else f"{tool}: no input_required"
            )
        elif isinstance(callbacks, list):
            seen = [
                f"{c.get('method')}#{c.get('request_id')}"
                if c.get("request_id") is not None
                else str(c.get("method"))
                for c in callbacks
                if isinstance(c, dict)
            ]
            bits.append(
                f"{tool}: callbacks [{', '.join(seen)}]"
                if seen
                else f"{tool}: no callback during the call"
            )
    return "; ".join(bits) or None


def _observe(  # noqa: PLR0912, PLR0915 - over the budget: one long procedure still to split
    run: Run,
    report: dict[str, Any] | None,
    *,
    duration: float,
    exit_code: int | None,
    timed_out: bool,
    hard_timeout: float,
    leftovers: list[str],
    stderr: str,
    first_stderr: str,
    shared: int,
) -> Observation:
    """One run's observation from its client's report. A basic client's run works
    iff its report is ok (and exit 0); so does a notifications run, whose report
    must also hold the client's notifications steps (a client that ignored
    `--feature notifications` does not pass). An MRTR client's run is judged on
    the feature it
    checks: every step that belongs to no feature (connect, tools/list, the
    requestState checks, ...) and every step of this feature must pass, its
    tool call must have run, and the client must not have died (timeout, crash,
    an error outside the steps). Steps of the other features of a shared
    `--feature all` run do not count."""
    obs = Observation(
        run,
        ok=False,
        duration=duration,
        exit_code=exit_code,
        timed_out=timed_out,
        leftovers=leftovers,
        stderr_tail=stderr.strip().splitlines()[-20:],
        report=report,
        shared=shared,
    )
    if report is None:
        obs.error = (
            f"hard timeout after {hard_timeout:g}s"
            if timed_out
            else f"no JSON report (exit {exit_code}): {first_stderr or 'no stderr'}"
        )
        return obs
    obs.era = report.get("era")
    steps = obs.steps()
    for item in steps:
        if obs.protocol_version is None and isinstance(item.get("protocolVersion"), str):
            obs.protocol_version = item["protocolVersion"]
            obs.route = item.get("via")
        versions = item.get("supportedVersions")
        if obs.protocol_version is None and item.get("ok") and isinstance(versions, list):
            # raw modern client: no negotiation, the discovered versions say it
            obs.protocol_version = ",".join(str(v) for v in versions)
            obs.route = "server/discover"
    error = report.get("error")
    if not run.client.mrtr:
        obs.ok = report.get("ok") is True and exit_code == 0 and not timed_out
        if not obs.ok:
            failed = [s for s in steps if not s.get("ok")]
            detail = (
                f"failed step {failed[0].get('step')}: "
                f"{failed[0].get('error') or failed[0].get('text') or ''}"
                if failed and str(error or "").startswith("failed step: ")
                else error
            )
            obs.error = first_line(str(detail or f"exit {exit_code}"))
        prefix = STEPPED_FEATURES.get(run.checks)
        if prefix is not None:
            own = obs.steps(run.checks)
            last = "delivered" if run.checks == "notifications" else "path"
            told = [s for s in own if s.get("step") == f"{prefix}{last}"]
            obs.input_path = str(told[-1].get("path")) if told else None
            if obs.ok and not own:
                obs.ok = False
                obs.error = f"the report has no {run.checks} check"
        return obs

    feature = run.checks
    own = obs.steps(feature)
    common = [s for s in steps if _step_feature(s) is None]
    called = [s for s in own if not str(s.get("step", "")).endswith(" listed")]
    failed = [s for s in [*common, *own] if not s.get("ok")]
    # The client's own error, unless it only names a failed step (judged above).
    fatal = error is not None and not str(error).startswith("failed step: ")
    obs.input_path = _input_path(own)
    expected_error = run.cell.tool_error
    if expected_error is not None:
        # The call must fail with the server's error, and only the call.
        refused = [s for s in called if not s.get("ok")]
        others = [s for s in failed if s not in refused]
        texts = [str(s.get("error") or s.get("text") or "") for s in refused]
        if refused:
            obs.input_path = f"tool error: {first_line(texts[0], 120)}"
        if timed_out:
            obs.error = f"hard timeout after {hard_timeout:g}s"
        elif others:
            first = others[0]
            obs.error = first_line(
                f"failed step {first.get('step')}: {first.get('error') or first.get('text')}"
            )
        elif fatal:
            obs.error = first_line(str(error))
        elif not called:
            obs.error = f"the report has no {feature} tool call"
        elif len(refused) != len(called) or not all(expected_error in t for t in texts):
            obs.error = first_line(
                f"the {feature} call should fail with {expected_error!r}: "
                f"{texts[0] if texts else called[0].get('text')}"
            )
        else:
            obs.ok = True
        return obs
    if timed_out:
        obs.error = f"hard timeout after {hard_timeout:g}s"
    elif failed:
        first = failed[0]
        detail = first.get("error") or first.get("text")
        obs.error = first_line(f"failed step {first.get('step')}: {detail}")
        if fatal:  # the client's own account says more (e.g. why discover failed)
            obs.error = first_line(str(error))
    elif fatal:
        obs.error = first_line(str(error))
    elif not called:
        obs.error = f"the report has no {feature} tool call"
    elif report.get("ok") is True and exit_code != 0:
        obs.error = f"report ok, but exit {exit_code}"
    else:
        obs.ok = True
    return obs


@dataclass(frozen=True)
class Verdict:
    expected: str
    observed: str
    matched: bool
    reason: str


def judge(obs: Observation) -> Verdict:
    """Compare an observation with what its cell expects for that route."""
    want, want_era = obs.run.cell.expected(obs.run.via)
    expected = f"{want} ({want_era})" if want == "works" and want_era else want
    observed = obs.outcome
    if want == "works":
        # A push-style tool refused on a modern request: the era works, the call does not.
        refused = ", tool error" if obs.run.cell.tool_error else ""
        expected += refused
        if not obs.ok:
            return Verdict(expected, observed, False, f"fails: {obs.error}")
        if want_era and obs.era != want_era:
            return Verdict(expected, f"works ({obs.era})", False, f"works, but in era {obs.era}")
        return Verdict(expected, f"works ({obs.era}){refused}", True, obs.evidence)
    if want == "fails":
        if obs.ok:
            return Verdict(
                expected,
                f"works ({obs.era})",
                False,
                f"works where the spec says it fails ({obs.evidence})",
            )
        return Verdict(expected, observed, True, obs.evidence)
    return Verdict(expected, observed, False, f"ran a cell whose outcome is {want!r}")
