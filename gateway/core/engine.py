"""The engine's vocabulary (issue #11): the protocol logic takes events and
returns commands, and the runtime turns commands into I/O and what it waited
for into events (h11's and mitmproxy's proxy layers are built this way).

Nothing here has a clock: an event that can start a timer carries `now`, and a
timer is a command (`StartTimer`) whose expiry comes back as an event
(`TimerFired`). Ids are injected the same way. Each subsystem of the engine
defines its own events and commands on these bases.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened, told to the engine."""


@dataclass(frozen=True, slots=True)
class Command:
    """Something the engine wants done."""


@dataclass(frozen=True, slots=True)
class StartTimer(Command):
    """Fire `TimerFired(timer)` at `deadline` (the runtime's clock, the same
    one as the events' `now`); starting a running timer moves its deadline."""

    timer: Hashable
    deadline: float


@dataclass(frozen=True, slots=True)
class CancelTimer(Command):
    """Stop a timer; nothing happens for one that is not running."""

    timer: Hashable


@dataclass(frozen=True, slots=True)
class TimerFired(Event):
    timer: Hashable
    now: float


@dataclass(frozen=True, slots=True)
class Log(Command):
    """One line for the operator."""

    message: str
    level: str = "info"
    fields: Mapping[str, Any] = field(default_factory=dict)
    # A line a peer can cause without end: written at most once a minute
    # (with a count of the ones held back), never a flood.
    rate_limited: bool = False
