"""Lease renewals run on their own thread: a busy event loop does not delay them.

Under load a renewal that waited behind the broker's work came later than the lease, and
the controller fenced the only broker of `manage.py up`.
"""

from __future__ import annotations

import asyncio
import threading
import time

from data_plane.broker.heartbeat import Heartbeat
from data_plane.broker.server import Broker, BrokerConfig


class Store:
    def __init__(self) -> None:
        self.beats: list[float] = []
        self.fail = False

    def heartbeat(self, broker_id: int, metadata_version: int = 0) -> None:
        if self.fail:
            raise ConnectionError("store down")
        self.beats.append(time.monotonic())


def test_a_broker_renews_its_lease_while_its_event_loop_is_blocked(tmp_path):
    store = Store()
    broker = Broker(BrokerConfig(data_dir=tmp_path, heartbeat_seconds=0.05), store)  # type: ignore[arg-type]

    async def busy() -> tuple[float, float]:
        broker._heartbeat.start()
        await asyncio.sleep(0.2)
        began = time.monotonic()
        time.sleep(1.0)  # the loop does nothing else for a second
        return began, time.monotonic()

    try:
        began, ended = asyncio.run(busy())
    finally:
        broker._heartbeat.stop()
    during = [t for t in store.beats if began <= t <= ended]
    assert len(during) >= 3, store.beats


def test_stop_waits_for_the_renewal_in_flight():
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow_beat() -> None:
        entered.set()
        release.wait(5)
        calls.append("renewed")

    heartbeat = Heartbeat(slow_beat, 0.01)
    heartbeat.start()
    assert entered.wait(5)
    stopper = threading.Thread(target=heartbeat.stop)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # still waiting for the renewal
    release.set()
    stopper.join(5)
    assert calls == ["renewed"] and not heartbeat.running
    time.sleep(0.1)
    assert calls == ["renewed"]  # nothing after stop


def test_failures_are_retried_and_logged_once(caplog):
    store = Store()
    store.fail = True
    heartbeat = Heartbeat(lambda: store.heartbeat(1), 0.01)
    heartbeat.start()
    try:
        deadline = time.monotonic() + 5
        while caplog.text.count("heartbeat failed") == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        store.fail = False
        while not store.beats and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        heartbeat.stop()
    assert caplog.text.count("heartbeat failed") == 1
    assert store.beats and heartbeat.last_renewed is not None
