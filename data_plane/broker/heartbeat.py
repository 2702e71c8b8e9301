"""The broker's lease renewal, on a thread of its own.

A broker proves it is alive by renewing its lease every quarter of
``MILLRACE_BROKER_LEASE_SECONDS``; the controller fences a broker whose lease lapsed. The
renewal used to be a task on the broker's event loop that ran the store call on the
loop's shared executor, so it waited behind everything else the broker did: under load
on a two-core machine a renewal came later than the whole lease, and the controller
fenced a broker that was serving clients. Here the renewal is a daemon thread that does
nothing else, so it runs whenever the operating system schedules it, however busy the
event loop or the executor is.

Thread safety: ``beat`` is called only from this thread; ``stop`` may be called from any
thread and returns after the thread has finished its last renewal (or ``timeout``), so a
caller that stops heartbeats (a controlled shutdown) is not followed by a late renewal
that marks the broker running again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("millrace.broker")


class Heartbeat:
    """Calls ``beat`` every ``interval`` seconds until stopped."""

    def __init__(
        self, beat: Callable[[], None], interval: float, *, name: str = "heartbeat"
    ) -> None:
        self._beat = beat
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.last_renewed: float | None = None  # time.monotonic() of the last success

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self._interval):
            try:
                self._beat()
            except Exception:
                # Logged once per run of failures: the store may be down for a while.
                if not failing:
                    logger.warning("heartbeat failed; retrying", exc_info=True)
                failing = True
                continue
            if failing:
                logger.info("heartbeats succeed again")
            failing = False
            self.last_renewed = time.monotonic()
