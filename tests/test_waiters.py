"""The broker's parked-request waiters: only the notified key wakes, timeouts and
cancellation leave nothing behind."""

from __future__ import annotations

import asyncio
import time

from data_plane.replication.waiters import Waiters


def test_a_notify_wakes_only_the_requests_waiting_on_its_key():
    async def scenario():
        w = Waiters()
        woke: list[str] = []

        async def park(name, keys, timeout):
            await w.wait(keys, timeout)
            woke.append(name)

        tasks = [
            asyncio.create_task(park("a", ["p0"], 5)),
            asyncio.create_task(park("b", ["p1"], 5)),
            asyncio.create_task(park("ab", ["p0", "p1"], 5)),
        ]
        await asyncio.sleep(0)
        assert len(w) == 4
        w.notify("p0")
        await asyncio.sleep(0.01)
        assert sorted(woke) == ["a", "ab"]
        assert len(w) == 1  # "ab" left p1 too
        w.notify_all()
        await asyncio.gather(*tasks)
        assert sorted(woke) == ["a", "ab", "b"] and len(w) == 0

    asyncio.run(scenario())


def test_timeouts_and_cancellation_clean_up():
    async def scenario():
        w = Waiters()
        started = time.monotonic()
        await w.wait(["p0"], 0.05)
        assert time.monotonic() - started >= 0.04 and len(w) == 0
        await w.wait(["p0"], 0)  # no wait at all
        task = asyncio.create_task(w.wait(["p0", "p1"], 5))
        await asyncio.sleep(0)
        assert len(w) == 2
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert len(w) == 0
        w.notify("p0")  # nothing parked: harmless

    asyncio.run(scenario())


def test_a_watch_stays_registered_across_wake_ups_and_queues_each_key_once():
    async def scenario():
        w = Waiters()
        loop = asyncio.get_running_loop()
        with w.watching(["p0", "p1", "p2"]) as watch:
            assert len(w) == 3
            w.notify("p1")  # while the request is busy (not waiting): queued
            w.notify("p1")
            w.notify("p2")
            assert await watch.next(5) == "p1"
            assert await watch.next(5) == "p2"
            assert await watch.next(0.01) is None
            assert len(w) == 3  # waking did not unregister it
            loop.call_later(0.01, w.notify, "p0")
            assert await watch.next(5) == "p0"
        assert len(w) == 0

    asyncio.run(scenario())
