"""The runner: one client process for a run, or for the four MRTR runs one
`--feature all` client run serves, with its HTTP server and gateway started
first and everything it started stopped after (`run_job`), and many of those
at a time (`run_many`)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from compat_matrix.cells import MRTR_FEATURES, REPO
from compat_matrix.environment import Context
from compat_matrix.processes import (
    RUN_TAG_VAR,
    Started,
    StartError,
    _kill_group,
    _reap_tagged,
    _start,
    _stop,
)
from compat_matrix.runs import Launch, Run
from compat_matrix.verdicts import Observation, _observe, _parse_report, first_line


def _start_all(
    run: Run, ctx: Context, feature: str | None, env: dict[str, str]
) -> tuple[Launch, list[Started]]:
    """Start the run's background processes in order; a port lost to a race
    (address in use) is retried with new ports, twice at most."""
    for attempt in range(3):
        launch = run.launch(ctx, feature)
        started: list[Started] = []
        try:
            for spec in launch.background:
                started.append(_start(spec, env, ctx.start_timeout))
            return launch, started
        except StartError as exc:
            for item in reversed(started):
                _stop(item)
                item.output.close()
            if not exc.retry or attempt == 2:
                raise
    raise AssertionError("unreachable")


def run_job(runs: Sequence[Run], ctx: Context) -> list[Observation]:
    """One client process for `runs`: a single run, or the MRTR runs of one
    client x server pair, route and transports that `--feature all` serves
    together. HTTP servers and gateways are started first and stopped after."""
    first = runs[0]
    feature = "all" if len(runs) > 1 else None
    tag = uuid.uuid4().hex
    env = dict(os.environ, **dict(first.cell.env))
    env.update({"MCP_PEERS_DIR": str(ctx.peers), RUN_TAG_VAR: tag})
    env.setdefault("PYTHONUNBUFFERED", "1")
    timed_out = False
    started_at = time.monotonic()
    background: list[Started] = []
    try:
        launch, background = _start_all(first, ctx, feature, env)
    except (StartError, OSError) as exc:
        leftovers = _reap_tagged(tag)
        failed = first.launch(ctx, feature, ports=lambda: 0)
        return [
            Observation(
                run,
                ok=False,
                duration=time.monotonic() - started_at,
                exit_code=None,
                error=f"setup failed: {first_line(str(exc), 300)}",
                leftovers=leftovers,
                commands=failed.describe(),
                shared=len(runs),
            )
            for run in runs
        ]
    # Temporary files, not pipes: a grandchild holding a pipe open must not
    # block us after the client itself has exited.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            try:
                proc = subprocess.Popen(
                    launch.client,
                    cwd=REPO,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                return [
                    Observation(
                        run,
                        ok=False,
                        duration=0.0,
                        exit_code=None,
                        error=str(exc),
                        commands=launch.describe(),
                    )
                    for run in runs
                ]
            try:
                proc.wait(timeout=ctx.hard_timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
            duration = time.monotonic() - started_at
        finally:
            background_tail: list[str] = []
            for item in reversed(background):  # the gateway before its upstream
                _stop(item)
                background_tail += item.tail()
                item.output.close()
        leftovers = _reap_tagged(tag)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    report = _parse_report(stdout)
    observations = [
        _observe(
            run,
            report,
            duration=duration,
            exit_code=proc.returncode,
            timed_out=timed_out,
            hard_timeout=ctx.hard_timeout,
            leftovers=leftovers,
            stderr=stderr,
            first_stderr=first_line(stderr),
            shared=len(runs),
        )
        for run in runs
    ]
    for obs in observations:
        obs.commands = launch.describe()
        obs.stderr_tail = obs.stderr_tail + background_tail
    return observations


def run_one(run: Run, ctx: Context) -> Observation:
    """Run one client against one server (direct or through the gateway)."""
    return run_job([run], ctx)[0]


def group_runs(runs: Sequence[Run], group: bool = True) -> list[list[int]]:
    """Indices of `runs`, one list per client process. With `group`, the four
    MRTR cells' runs of one client x server pair, route and options share one
    `--feature all` run; everything else (and an incomplete set of the four)
    runs on its own."""
    jobs: list[list[int]] = []
    buckets: dict[tuple[str, str, str, str, str, tuple[str, ...]], list[int]] = {}
    for index, run in enumerate(runs):
        if (
            group
            and run.feature_arg is None
            and run.cell.feature in MRTR_FEATURES
            and run.client.takes_feature
        ):
            cell = run.cell
            key = (run.client.name, run.server.name, run.via, cell.front, cell.back, run.options)
            if key not in buckets:
                buckets[key] = []
                jobs.append(buckets[key])  # first appearance keeps its place
            buckets[key].append(index)
        else:
            jobs.append([index])
    split: list[list[int]] = []
    for job in jobs:
        features = sorted(runs[i].cell.feature for i in job)
        if len(job) > 1 and features != sorted(MRTR_FEATURES):
            split.extend([i] for i in job)
        else:
            split.append(job)
    return split


def run_many(
    runs: Sequence[Run],
    ctx: Context,
    jobs: int = 2,
    progress: Callable[[int, int, Observation], None] | None = None,
    *,
    group: bool = True,
) -> list[Observation]:
    """Run independent client runs `jobs` at a time (see `group_runs`);
    observations in the order of `runs`."""
    results: list[Observation | None] = [None] * len(runs)
    done = 0
    lock = threading.Lock()

    def one(indices: list[int]) -> None:
        nonlocal done
        observations = run_job([runs[i] for i in indices], ctx)
        with lock:
            for index, obs in zip(indices, observations, strict=True):
                results[index] = obs
                done += 1
                if progress is not None:
                    progress(done, len(runs), obs)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(one, job) for job in group_runs(runs, group)]:
            future.result()
    return [r for r in results if r is not None]
