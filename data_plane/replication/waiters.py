"""Requests parked until something happens to a partition (Kafka's purgatory, in small).

A fetch waits for data on the partitions it asked for, an acks=all produce for the high
watermark of the partition it wrote. Waking only the requests that care about a partition
keeps one append from waking every parked request of every tenant, and a plain future
with a timer is much cheaper than ``asyncio.wait_for`` on an ``Event`` (which starts a
task for every wait). Everything here runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


def _wake(future: asyncio.Future[Hashable | None], key: Hashable | None = None) -> None:
    if not future.done():
        future.set_result(key)


class Waiters:
    """Futures keyed by what they wait for; ``notify(key)`` wakes every one on that key."""

    def __init__(self) -> None:
        self._by_key: dict[Hashable, set[asyncio.Future[Hashable | None]]] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_key.values())

    def notify(self, key: Hashable) -> None:
        futures = self._by_key.pop(key, None)
        if futures:
            for future in futures:
                _wake(future, key)

    def notify_all(self) -> None:
        for key in list(self._by_key):
            self.notify(key)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> Hashable | None:
        """Until one of ``keys`` is notified (that key is returned) or ``timeout`` seconds
        pass (None)."""
        if timeout <= 0:
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Hashable | None] = loop.create_future()
        keys = list(keys)
        for key in keys:
            self._by_key.setdefault(key, set()).add(future)
        timer = loop.call_later(timeout, _wake, future)
        try:
            return await future
        finally:
            timer.cancel()
            for key in keys:
                waiting = self._by_key.get(key)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._by_key[key]
