"""A broker's /readyz, which a StatefulSet's rolling restart waits on: ready only once it
is live in the metadata and in sync with every partition it replicates (the next broker
must not stop while this one would still be missing from an ISR)."""

from __future__ import annotations

import uuid

from data_plane.broker.server import Broker, BrokerConfig
from data_plane.metadata.model import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo


def snapshot(isr, leader=2, live=(1, 2, 3)):
    partitions = (
        PartitionInfo(0, leader, 1, (1, 2, 3), isr),
        PartitionInfo(1, 2, 1, (2, 3), (2, 3)),  # not a replica here: never counts
    )
    topic = TopicInfo(7, "orders", uuid.uuid4(), partitions, {})
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9092 + b, None) for b in live}
    return MetadataSnapshot(topics={7: {"orders": topic}}, brokers=brokers)


def readiness(tmp_path, snap, started=True):
    broker = Broker(BrokerConfig(broker_id=1, data_dir=tmp_path), store=None)  # type: ignore[arg-type]
    broker.snapshot = snap
    broker._ready = started
    return broker._readiness()


def test_ready_when_live_and_in_every_isr(tmp_path):
    assert readiness(tmp_path, snapshot(isr=(1, 2, 3))) == (True, "ready")


def test_unready_while_starting_or_not_yet_live(tmp_path):
    assert readiness(tmp_path, snapshot(isr=(1, 2, 3)), started=False) == (False, "starting")
    ok, why = readiness(tmp_path, snapshot(isr=(1, 2, 3), live=(2, 3)))
    assert not ok and "not (yet) a live broker" in why


def test_unready_while_catching_up(tmp_path):
    ok, why = readiness(tmp_path, snapshot(isr=(2, 3)))
    assert not ok and why == "catching up: not yet in the ISR of 1 partition(s)"


def test_an_offline_partition_does_not_hold_readiness_back(tmp_path):
    # No leader to catch up from: waiting would stall a rolling restart for nothing.
    assert readiness(tmp_path, snapshot(isr=(3,), leader=None)) == (True, "ready")
