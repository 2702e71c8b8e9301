"""Requests parked until something happens to a partition (Kafka's purgatory, in small).

A fetch waits for data on the partitions it asked for, an acks=all produce for the high
watermark of the partition it wrote. Waking only the requests that care about a partition
keeps one append from waking every parked request of every tenant, and a plain future
with a timer is much cheaper than ``asyncio.wait_for`` on an ``Event`` (which starts a
task for every wait). Everything here runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable, Iterable, Iterator


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Watch:
    """One parked request's registration on its keys, kept across wake-ups: a fetch of
    many partitions that wakes for one of them and waits again does not register on all
    of them again. Keys notified meanwhile queue up (each once) until :meth:`next`."""

    __slots__ = ("_future", "_moved")

    def __init__(self) -> None:
        self._moved: dict[Hashable, None] = {}
        self._future: asyncio.Future[None] | None = None

    def wake(self, key: Hashable) -> None:
        self._moved[key] = None
        if self._future is not None:
            _wake(self._future)

    async def next(self, timeout: float) -> Hashable | None:
        """A key notified since the last call, or the next one within ``timeout`` seconds
        (None when none comes)."""
        if not self._moved:
            if timeout <= 0:
                return None
            loop = asyncio.get_running_loop()
            future = self._future = loop.create_future()
            timer = loop.call_later(timeout, _wake, future)
            try:
                await future
            finally:
                timer.cancel()
                self._future = None
            if not self._moved:
                return None
        key = next(iter(self._moved))
        del self._moved[key]
        return key


class Waiters:
    """Watches keyed by what they wait for; ``notify(key)`` wakes every one on that key."""

    def __init__(self) -> None:
        self._by_key: dict[Hashable, set[Watch]] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_key.values())

    def notify(self, key: Hashable) -> None:
        watches = self._by_key.get(key)
        if watches:
            for watch in watches:
                watch.wake(key)

    def notify_all(self) -> None:
        for key in list(self._by_key):
            self.notify(key)

    @contextlib.contextmanager
    def watching(self, keys: Iterable[Hashable]) -> Iterator[Watch]:
        """A :class:`Watch` on ``keys`` for the duration of the ``with`` block."""
        watch = Watch()
        keys = list(keys)
        for key in keys:
            self._by_key.setdefault(key, set()).add(watch)
        try:
            yield watch
        finally:
            for key in keys:
                waiting = self._by_key.get(key)
                if waiting is not None:
                    waiting.discard(watch)
                    if not waiting:
                        del self._by_key[key]

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> Hashable | None:
        """Until one of ``keys`` is notified (that key is returned) or ``timeout`` seconds
        pass (None)."""
        if timeout <= 0:
            return None
        with self.watching(keys) as watch:
            return await watch.next(timeout)
