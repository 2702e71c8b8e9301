"""Per-address back-off for failed logins (KIP-306's idea, applied per address).

A failed SASL authentication is answered after a delay that starts at 0.1 s and doubles
with each failure from the same address within a minute, up to 5 s, so guessing from
one address gets slower and slower. Only failures wait: a right credential from the same
address (a shared NAT, say) is answered at once, so valid keys are never locked out.
"""

from __future__ import annotations

import time
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
