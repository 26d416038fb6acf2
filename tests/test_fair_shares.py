"""Issue #29, class 4: "Shared caps that one principal fills for everyone".
Every shared pool has a total and a per-principal share (core/fair_share.py);
ended tasks keep their records but no slot (2025-11-25 basic/utilities/tasks
"Resource Management": "Enforce limits on concurrent tasks per requestor").
The pure parts, driven without sockets; tests/test_fair_shares_live.py runs
each trigger of the issue against a real gateway process and real SDK servers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import wire
from gateway.config import Config, ConfigError
from gateway.config.checks import check
from gateway.core import fair_share
from gateway.core.fair_share import Share, ShareCount
from gateway.core.session_choice import SessionKey, room_bounds
from gateway.core.task_book import TaskBook

DONE = wire.result_response(1, {"content": []})


def test_the_default_share_is_most_of_a_pool_but_never_all_of_it() -> None:
    assert [fair_share.default_share(n) for n in (1, 2, 4, 5, 16, 1000)] == [1, 1, 3, 3, 12, 750]
    assert Share.of(8) == Share(8, 6)
    assert Share.of(8, 8) == Share(8, 8)  # the operator may give one principal all
    assert Share.of(8, 20) == Share(8, 8)


def test_a_principal_past_its_share_is_refused_and_another_still_finds_room() -> None:
    count = ShareCount(Share(4, 3))
    for _ in range(3):
        assert count.refusal("a") is None
        count.take("a")
    assert count.refusal("a") == "share"
    assert count.refusal("b") is None
    count.take("b")
    assert count.refusal("b") == "total"
    count.release("a")
    count.release("b")
    count.release("b")  # released twice: frees nothing of another's
    assert (count.total, count.by_principal) == (2, {"a": 2})


def test_counting_where_a_pool_lives_gives_the_same_answers() -> None:
    share = Share(4, 2)
    assert fair_share.refusal_among(["a", "b"], "a", share) is None
    assert fair_share.refusal_among(["a", "a", "b"], "a", share) == "share"
    assert fair_share.refusal_among(["a", "b", "c", "d"], "e", share) == "total"


@given(
    st.integers(1, 12),
    st.integers(0, 12),
    st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=200),
)
@settings(max_examples=300, deadline=None, derandomize=True)
def test_no_sequence_lets_one_principal_take_more_than_its_share(
    total: int, per: int, steps: list[tuple[str, bool]]
) -> None:
    """Whatever principals take and release: the pool never holds more than
    its total nor a principal more than its share, the table keeps no empty
    entries, and a principal refused for its share leaves room for one that
    holds nothing (when the share is less than the total)."""
    share = Share.of(total, per)
    count = ShareCount(share)
    for principal, take in steps:
        if take:
            why = count.refusal(principal)
            if why is None:
                count.take(principal)
            elif why == "share" and share.per_principal < share.total:
                assert count.refusal("idle") is None
        else:
            count.release(principal)
        assert count.total == sum(count.by_principal.values()) <= share.total
        assert all(0 < n <= share.per_principal for n in count.by_principal.values())


# -- tasks: ended ones keep their records, not their slots ----------------------------


def book(total: int = 4, per: int = 0) -> TaskBook:
    return TaskBook(Share.of(total, per), ttl_ms=60_000, poll_ms=1000)


def test_completed_tasks_free_their_slots_for_every_principal() -> None:
    """The issue: "five completed tasks of one principal with max_live = 5
    deny the next principal a task"."""
    b = book(total=5, per=5)
    done = [b.create(f"t{i}", "a", 0.0, 0) for i in range(5)]
    assert b.refusal("b") == "total"
    for record in done:
        b.settle(record, DONE, 1)
    assert b.refusal("b") is None and b.refusal("a") is None
    assert all(b.find(r.task_id, "a", 1.0) is r for r in done)  # still there for tasks/get


def test_one_principal_runs_at_most_its_share_of_tasks() -> None:
    b = book(total=4)  # share 3
    for i in range(3):
        b.create(f"a{i}", "a", 0.0, 0)
    assert b.refusal("a") == "share"
    assert b.refusal("b") is None


def test_cancelled_and_expired_tasks_free_their_slots() -> None:
    b = book(total=2, per=2)
    first, second = b.create("t1", "a", 0.0, 0), b.create("t2", "a", 0.0, 0, ttl_ms=1000)
    assert b.cancel(first, 1)
    assert b.refusal("a") is None
    b.create("t3", "a", 0.0, 0)
    assert b.refusal("a") == "total"
    assert b.sweep(2.0) == [second]  # past its ttl: its slot goes with it
    assert b.refusal("a") is None and b.live.total == 1


def test_ended_records_are_bounded_and_read_ones_go_first() -> None:
    b = book(total=4, per=3)
    records = []
    for i in range(3):
        record = b.create(f"a{i}", "a", 0.0, 0)
        b.settle(record, DONE, 1)
        records.append(record)
    b.result_read(records[2])
    # A fourth ended record of "a" passes its share of kept records: the
    # one whose result was read goes, not the oldest unread one.
    b.settle(b.create("a3", "a", 0.0, 0), DONE, 1)
    assert sorted(b.tasks) == ["a0", "a1", "a3"]
    b.settle(b.create("b0", "b", 0.0, 0), DONE, 1)
    assert sorted(b.tasks) == ["a0", "a1", "a3", "b0"]
    # The book is full: the next ended record takes the place of the oldest
    # of the principal that keeps the most, never of the one that keeps least.
    b.settle(b.create("b1", "b", 0.0, 0), DONE, 1)
    assert sorted(b.tasks) == ["a1", "a3", "b0", "b1"]
    assert b.kept.total == len(b.tasks) == 4


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("csxrt")), max_size=120))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_any_order_of_task_events_keeps_the_counts_true(steps: list[tuple[str, str]]) -> None:
    """create / settle / cancel / read / time passing, in any order: running
    tasks are counted in `live`, ended ones in `kept`, each within the share."""
    b = book(total=5)
    now, n = 0.0, 0
    for principal, op in steps:
        mine = [r for r in b.tasks.values() if r.principal == principal]
        if op == "c" and b.has_room(principal):
            n += 1
            b.create(f"t{n}", principal, now, int(now * 1000), ttl_ms=5000)
        elif op == "s" and mine:
            b.settle(mine[0], DONE, 1)
        elif op == "x" and mine:
            b.cancel(mine[-1], 1)
        elif op == "r" and mine:
            b.result_read(mine[0])
        elif op == "t":
            now += 1.0
            b.sweep(now)
        running = [r for r in b.tasks.values() if not r.terminal]
        assert b.live.total == len(running) <= b.share.total
        assert b.kept.total == len(b.tasks) - len(running) <= b.share.total
        for who in "abc":
            assert b.live.held(who) == sum(r.principal == who for r in running)
            assert b.live.held(who) <= b.share.per_principal
            assert b.kept.held(who) <= b.share.per_principal


# -- upstream processes, listens, configuration -----------------------------------------


class _Session:
    def __init__(self, principal: str) -> None:
        self.key = SessionKey(principal, frozenset({f"f-{id(self)}"}))


def test_one_principal_never_holds_every_upstream_process() -> None:
    """`max_sessions` as high as `max_processes`: busy sessions are never
    evicted, so one principal's share is three quarters of the processes."""
    others = [_Session("a") for _ in range(3)]
    own, every = room_bounds(
        SessionKey("a", frozenset()), others, upstream_era=None, max_sessions=4, max_processes=4
    )
    assert (own.limit, every.limit) == (3, 4)
    (own_b, _) = room_bounds(
        SessionKey("b", frozenset()), others, upstream_era=None, max_sessions=4, max_processes=4
    )
    assert own_b.members == []


@pytest.mark.parametrize(
    ("share", "total"),
    [
        ("max_parked_per_principal", "max_parked_calls"),
        ("tasks_max_live_per_principal", "tasks_max_live"),
        ("http_max_sessions_per_principal", "http_max_sessions"),
    ],
)
def test_a_share_larger_than_its_pool_is_a_configuration_error(share: str, total: str) -> None:
    def config(n: int) -> Config:
        fields: dict[str, Any] = {"command": ("server",), total: 10, share: n}
        return Config(**fields)

    check(config(10))
    with pytest.raises(ConfigError, match="at most"):
        check(config(11))
    with pytest.raises(ConfigError):
        check(config(-1))


def test_max_listen_uris_is_at_least_one() -> None:
    with pytest.raises(ConfigError, match="max_listen_uris"):
        check(Config(command=("server",), max_listen_uris=0))
