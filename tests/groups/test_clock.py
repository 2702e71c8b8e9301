"""The coordinator's clocks: FakeClock fires due timers in order; LoopClock is the loop's."""

from __future__ import annotations

import asyncio

import pytest

from data_plane.groups.clock import FakeClock, LoopClock


def test_advance_fires_due_timers_in_deadline_order_ties_in_scheduling_order():
    clock = FakeClock(start=10.0, wall_start_ms=5_000)
    fired: list[tuple[str, float, int]] = []

    def note(name: str) -> None:
        fired.append((name, clock.now(), clock.wall_ms()))

    clock.call_later(2, note, "b")
    clock.call_later(1, note, "a")
    clock.call_later(2, note, "b2")
    cancelled = clock.call_later(1.5, note, "never")
    cancelled.cancel()
    clock.call_later(3, note, "later")

    assert clock.advance(1.999) == 1
    assert fired == [("a", 11.0, 6_000)]
    assert clock.advance(0.001) == 2
    assert fired[1:] == [("b", 12.0, 7_000), ("b2", 12.0, 7_000)]
    assert (clock.now(), clock.pending) == (12.0, 1)


def test_timers_set_by_a_callback_fire_in_the_same_advance_if_due():
    clock = FakeClock(start=0.0)
    fired: list[float] = []

    def chain(n: int) -> None:
        fired.append(clock.now())
        if n:
            clock.call_later(0.25, chain, n - 1)

    clock.call_later(0, chain, 3)
    assert clock.advance(0.5) == 3  # at 0, 0.25 and 0.5; the one at 0.75 waits
    assert fired == [0.0, 0.25, 0.5] and clock.now() == 0.5
    assert clock.advance(1) == 1 and fired[-1] == 0.75


def test_small_steps_add_up_exactly_and_time_never_goes_back():
    clock = FakeClock(start=500.0)
    fired: list[bool] = []
    clock.call_later(10, fired.append, True)
    for _ in range(9_999):
        clock.advance(0.001)
    assert not fired
    clock.advance(0.001)
    assert fired == [True]
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_loop_clock_is_the_running_loop():
    async def scenario() -> None:
        clock = LoopClock()
        loop = asyncio.get_running_loop()
        assert abs(clock.now() - loop.time()) < 1
        done = loop.create_future()
        handle = clock.call_later(0, done.set_result, "fired")
        assert isinstance(handle, asyncio.TimerHandle)
        assert await done == "fired"
        cancelled: list[str] = []
        clock.call_later(0, cancelled.append, "no").cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert cancelled == []

    asyncio.run(scenario())
