"""Playbooks for the engine (issue #11), after mitmproxy's test/mitmproxy/proxy/tutils.py.

    assert (
        Playbook(table)
        >> CallArrived(1, "c1", call)
        << AcquireSession(1, "c1")
        >> SessionAcquired(1, "c1")
        << StartUpstream(1)
        << AwaitOutcome(1, "c1")
    )

`>>` gives the engine an event, `<<` names the next command it must return;
`assert playbook` runs the events not run yet and compares every command in
order, with a diff on mismatch. Further steps can be added and asserted again.

Values the engine makes up (a sealed requestState, an error text) are matched
by a `Placeholder`, bound on first match and compared after that; `.match`
puts one where a value is expected, and `placeholder()` reads it back.
Event fields whose value only exists once earlier steps ran are written
`later(lambda: ...)`. Log commands are left out of the comparison unless the
playbook is made with `logs=True`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

from gateway.core.engine import Command, Event, Log

T = TypeVar("T")


class Engine(Protocol):
    def handle(self, event: Event) -> list[Command]: ...


class Placeholder(Generic[T]):
    """A value assigned inside the engine, bound where it first appears."""

    def __init__(self, cls: type[T], pattern: str | None = None) -> None:
        self._cls = cls
        self._pattern = pattern
        self._bound = False
        self._value: T | None = None

    def __call__(self) -> T:
        assert self._bound, "placeholder not bound yet"
        return cast(T, self._value)

    @property
    def match(self) -> T:
        """This placeholder, typed as the value it stands for."""
        return cast(T, self)

    def bind(self, value: object) -> bool:
        if self._bound:
            return bool(self._value == value)
        if not isinstance(value, self._cls):
            return False
        if self._pattern is not None and not re.search(self._pattern, str(value)):
            return False
        self._value, self._bound = value, True
        return True

    def __repr__(self) -> str:
        return f"<{self._value!r}>" if self._bound else f"<{self._cls.__name__} placeholder>"


def matching(pattern: str) -> str:
    """A string the engine makes up that must contain `pattern` (a regex)."""
    return Placeholder(str, pattern).match


class _Later:
    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn


def later(fn: Callable[[], T]) -> T:
    """An event field computed when the event runs (from bound placeholders)."""
    return cast(T, _Later(fn))


def _matches(expected: object, actual: object) -> bool:
    if isinstance(expected, _Later):
        return True  # the event as run is in `actual`
    if isinstance(expected, Placeholder):
        return expected.bind(actual)
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        if type(expected) is not type(actual):
            return False
        return all(
            _matches(getattr(expected, f.name), getattr(actual, f.name))
            for f in dataclasses.fields(expected)
        )
    if isinstance(expected, Mapping):
        return (
            isinstance(actual, Mapping)
            and expected.keys() == actual.keys()
            and all(_matches(v, actual[k]) for k, v in expected.items())
        )
    if isinstance(expected, Sequence) and not isinstance(expected, str):
        return (
            isinstance(actual, Sequence)
            and not isinstance(actual, str)
            and len(expected) == len(actual)
            and all(_matches(x, y) for x, y in zip(expected, actual, strict=True))
        )
    return expected == actual


def _resolve(event: Event) -> Event:
    if not dataclasses.is_dataclass(event):
        return event
    changes = {
        f.name: value.fn()
        for f in dataclasses.fields(event)
        if isinstance(value := getattr(event, f.name), _Later)
    }
    return dataclasses.replace(event, **changes) if changes else event


class Playbook:
    def __init__(self, engine: Engine, *, logs: bool = False) -> None:
        self.engine = engine
        self.logs = logs
        self.expected: list[Event | Command] = []
        self.actual: list[Event | Command] = []
        self._ran = 0  # entries of `expected` already run

    def __rshift__(self, event: Event) -> Playbook:
        assert isinstance(event, Event), event
        self.expected.append(event)
        return self

    def __lshift__(self, command: Command) -> Playbook:
        assert isinstance(command, Command), command
        self.expected.append(command)
        return self

    def __bool__(self) -> bool:
        for entry in self.expected[self._ran :]:
            if isinstance(entry, Event):
                event = _resolve(entry)
                self.actual.append(event)
                self.actual += [
                    c for c in self.engine.handle(event) if self.logs or not isinstance(c, Log)
                ]
                # Match what is in so far, so that later events can use the
                # placeholders bound here.
                for e, a in zip(self.expected, self.actual, strict=False):
                    if not _matches(e, a):
                        break
        self._ran = len(self.expected)
        matched = [_matches(e, a) for e, a in zip(self.expected, self.actual, strict=False)]
        if len(self.expected) != len(self.actual) or not all(matched):
            # Entries that matched show as the engine gave them (placeholders filled).
            shown = [
                _fmt(a if ok else e)
                for e, a, ok in zip(self.expected, self.actual, matched, strict=False)
            ]
            shown += [_fmt(e) for e in self.expected[len(shown) :]]
            diff = "\n".join(difflib.ndiff(shown, [_fmt(x) for x in self.actual]))
            raise AssertionError(f"Playbook mismatch (- expected, + actual):\n{diff}")
        return True


def _fmt(entry: Any) -> str:
    return f"{'>>' if isinstance(entry, Event) else '<<'} {entry!r}"
