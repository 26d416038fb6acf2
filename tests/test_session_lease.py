"""The readers-writer lease that ties legacy server requests to one call (DESIGN §5.1.6)."""

from __future__ import annotations

import anyio
import pytest

from gateway.core.session_lease import LeaseState
from gateway.runtime.session_lease import SessionLease
from tests.mock_clock import on_mock_clock

pytestmark = pytest.mark.anyio


async def test_readers_share_and_a_writer_waits_for_them() -> None:
    lease = SessionLease()
    await lease.acquire_shared()
    await lease.acquire_shared()
    got = anyio.Event()

    async def writer() -> None:
        await lease.acquire_exclusive("w")
        got.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        await anyio.wait_all_tasks_blocked()
        assert not got.is_set()
        lease.release_shared()
        await anyio.wait_all_tasks_blocked()
        assert not got.is_set()
        lease.release_shared()
        with anyio.fail_after(1):
            await got.wait()
    assert lease.holder == "w"


async def test_waiting_writer_blocks_new_readers() -> None:
    lease = SessionLease()
    await lease.acquire_shared()
    order: list[str] = []

    async def writer() -> None:
        await lease.acquire_exclusive("w")
        order.append("writer")
        lease.release_exclusive("w")

    async def reader() -> None:
        await lease.acquire_shared()
        order.append("reader")
        lease.release_shared()

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        lease.release_shared()
    assert order == ["writer", "reader"]


async def test_only_the_holder_releases() -> None:
    lease = SessionLease()
    await lease.acquire_exclusive("a")
    lease.release_exclusive("b")
    assert lease.holder == "a"
    lease.release_exclusive("a")
    assert lease.holder is None


@on_mock_clock
async def test_waits_are_bounded_by_the_caller() -> None:
    """The caller's timeout fires on the mock clock (no wall-clock wait)."""
    lease = SessionLease()
    await lease.acquire_exclusive("a")
    with pytest.raises(TimeoutError), anyio.fail_after(0.05):
        await lease.acquire_exclusive("b")
    lease.release_exclusive("a")
    with anyio.fail_after(1):
        await lease.acquire_exclusive("c")  # the timed-out waiter left no trace


async def test_a_writer_that_gives_up_lets_the_readers_it_held_back_in() -> None:
    """Every lease and slot is released on every path (the issue): a writer
    that waited for the readers, and so held new readers back, then gave up
    (its timeout, or its client cancelled) must let those readers in. On main
    they stayed blocked until their own timeout, since nothing woke them."""
    lease = SessionLease()
    await lease.acquire_shared()
    reader_in = anyio.Event()

    async def reader() -> None:
        await lease.acquire_shared()
        reader_in.set()

    async with anyio.create_task_group() as tg:
        writer_scope = anyio.CancelScope()
        tg.start_soon(_cancellable_writer, lease, writer_scope)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        assert not reader_in.is_set()  # held back by the waiting writer
        writer_scope.cancel()
        with anyio.fail_after(1):
            await reader_in.wait()
    assert lease.readers == 2 and lease.holder is None


async def _cancellable_writer(lease: SessionLease, scope: anyio.CancelScope) -> None:
    with scope:
        await lease.acquire_exclusive("w")


def test_the_rules_as_plain_data() -> None:
    """The immediate path takes a share only when nobody holds or awaits the
    session alone; a writer goes when the last share is given back."""
    state = LeaseState()
    assert state.share_now() and state.share_now()
    state.waiting_writers = 1  # a writer waits: no new share jumps ahead of it
    assert not state.share_now()
    assert not state.can_hold_alone_now()
    assert not state.release_shared()  # one share still out
    assert state.release_shared()  # the writer may go
    state.waiting_writers, state.holder = 0, "w"
    assert not state.share_now()
    assert not state.release_exclusive("someone else") and state.holder == "w"
    assert state.release_exclusive("w") and state.holder is None
