"""Per-address back-off for failed logins (KIP-306's idea, applied per address).

A failed SASL authentication is answered after a delay that starts at 0.1 s and doubles
with each failure from the same address within a minute, up to 5 s, so guessing from
one address gets slower and slower. Only failures wait: a right credential from the same
address (a shared NAT, say) is answered at once, so valid keys are never locked out.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

FIRST_DELAY_SECONDS = 0.1
MAX_DELAY_SECONDS = 5.0
WINDOW_SECONDS = 60.0
MAX_TRACKED = 10_000  # addresses remembered at once (bounded memory under a wide attack)


class FailureDelays:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_delay: float = MAX_DELAY_SECONDS
    ) -> None:
        self._clock = clock
        self._max_delay = max_delay
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (count, window start)

    def failed(self, address: str) -> float:
        """Record a failure from ``address``; the seconds to hold its answer back."""
        now = self._clock()
        count, since = self._failures.get(address, (0, now))
        if now - since > WINDOW_SECONDS:
            count, since = 0, now
        count += 1
        if address not in self._failures and len(self._failures) >= MAX_TRACKED:
            self._failures.clear()
        self._failures[address] = (count, since)
        first = min(FIRST_DELAY_SECONDS, self._max_delay)
        return float(min(first * 2 ** (count - 1), self._max_delay))


class MemoryPool:
    """Bytes of requests in flight, broker-wide (Kafka's ``queued.max.request.bytes``).

    A connection reserves a request's whole announced size before it reads the body, and
    gives it back once the request is answered. When the pool is empty the connection
    waits before reading on (TCP pushes back on the client), so all connections together,
    authenticated or not, hold at most ``capacity`` bytes of requests, instead of up to
    ``max_request_bytes`` each. Reserving the whole size up front means a request that got
    its bytes can always be completed: partial reservations could deadlock. Waiters are
    served in order. A request larger than the pool waits for the whole pool.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, size: int) -> int:
        """Reserve ``size`` bytes (at most the capacity); returns what was reserved."""
        size = min(size, self.capacity)
        if not self._waiters and self.available >= size:
            self.available -= size
            return size
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(size)  # granted as we were cancelled: give it back
            else:
                self._waiters.remove((size, future))
            raise
        return size

    def release(self, size: int) -> None:
        self.available = min(self.capacity, self.available + size)
        while self._waiters and self._waiters[0][0] <= self.available:
            wanted, future = self._waiters.popleft()
            if future.cancelled():
                continue
            self.available -= wanted
            future.set_result(None)
