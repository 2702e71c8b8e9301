"""The group coordinator's clock: monotonic time, wall time and timers, as one port.

The coordinator's timing (session timeouts, the join timer, the initial rebalance delay,
KIP-394 pending member ids, ``state_since_ms``) all goes through a :class:`Clock`, so
tests can drive it with a :class:`FakeClock` instead of waiting in real time.

:class:`LoopClock` is the broker's: it delegates to the running asyncio loop and
``time.time``, exactly what the coordinator called before. :class:`FakeClock` moves only
when told to: ``advance(seconds)`` runs every timer that falls due, in deadline order
(ties in scheduling order), each with the clock set to its deadline. Neither is
thread-safe; both are used from the event loop's thread only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds (only differences mean anything)."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch, for what is stored and shown."""
        ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` once, ``delay`` seconds from now, unless cancelled."""
        ...


class LoopClock:
    """The running event loop's clock and timers; wall time from ``time.time``."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any
    ) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback, *args)


class FakeTimer:
    def __init__(self, when_ns: int, callback: Callable[..., object], args: tuple[Any, ...]):
        self.when_ns = when_ns
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock for tests: time stands still until :meth:`advance` moves it.

    Time is kept in integer nanoseconds, so steps such as ``advance(0.001)`` add up
    exactly and a timer due at a deadline fires when the steps reach it.
    """

    def __init__(self, start: float = 1_000.0, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._now_ns = _ns(start)
        self._wall_offset_ms = wall_start_ms - self._now_ns // 1_000_000
        self._timers: list[tuple[int, int, FakeTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now_ns / 1e9

    def wall_ms(self) -> int:
        return self._now_ns // 1_000_000 + self._wall_offset_ms

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        timer = FakeTimer(self._now_ns + max(_ns(delay), 0), callback, args)
        heapq.heappush(self._timers, (timer.when_ns, next(self._seq), timer))
        return timer

    def advance(self, seconds: float) -> int:
        """Move time forward, firing what falls due (timers they set too); how many fired."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        until = self._now_ns + _ns(seconds)
        fired = 0
        while self._timers and self._timers[0][0] <= until:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now_ns = when
            timer.cancelled = True  # fired: a late cancel() is a no-op, as with asyncio
            timer.callback(*timer.args)
            fired += 1
        self._now_ns = until
        return fired

    @property
    def pending(self) -> int:
        """Timers still to fire."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)
