"""Moving replicas between real brokers while an acks=all producer runs: adding a broker
and rebalancing onto it, then decommissioning a broker. Every acknowledged record stays
readable, the new replicas hold the leader's bytes, and the old ones drop their copies.

As in test_replication, the test process plays the controller (``tick``), and anything
the brokers must see is written from a thread with its own, committed connection.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection

from control_plane.catalog.models import Broker, Partition
from control_plane.controller import reassign
from control_plane.core.actor import Actor
from tests.broker.conftest import _brokers, confluent_conf, start_broker, stop_broker
from tests.broker.test_clients import topic_name
from tests.broker.test_replication import (  # noqa: F401 (_lease: an autouse fixture)
    REPLICATION_ENV,
    _lease,
    assert_nothing_acked_lost,
    create,
    log_bytes,
    wait_for,
)

pytestmark = pytest.mark.django_db
PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _brokers(django_db_blocker, tmp_path_factory, 4, REPLICATION_ENV)


def committed(fn, *args, **kwargs):
    """Run ``fn`` on a thread with its own autocommit connection; its result."""

    def run():
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(60)


class SteadyProducer(threading.Thread):
    """acks=all at about 500 records/s until stopped (bounded: at most 60 s)."""

    def __init__(self, env, name: str) -> None:
        super().__init__(daemon=True)
        self.env, self.name = env, name
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._done = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            confluent_conf(
                self.env,
                self.env.admin_a,
                **{"acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000},
            )
        )

        def done(err, msg):
            if err is None:
                self.acked.append(int(msg.value()))
            else:
                self.errors.append(str(err))

        deadline = time.monotonic() + 60
        value = 0
        while not self._done.is_set() and time.monotonic() < deadline:
            for _ in range(50):
                producer.produce(
                    self.name, key=str(value).encode(), value=str(value).encode(), on_delivery=done
                )
                value += 1
            producer.poll(0.1)
        producer.flush(60)

    def finish(self) -> list[int]:
        self._done.set()
        self.join(90)
        assert not self.errors, self.errors[:5]
        return self.acked


def rows(topic):
    return list(Partition.objects.filter(topic=topic).order_by("index"))


def settled(topic) -> bool:
    return not any(reassign.is_reassigning(p) for p in rows(topic))


def partition_dir(env, topic, index) -> Path:
    return Path(env.data_dir) / f"{topic.topic_id}-{index}"


def check_copies(cluster, topic):
    """Every replica holds the leader's bytes; every other broker holds no copy."""
    for p in rows(topic):
        holders = [k for k in cluster if k.broker_id in p.replicas]
        wait_for(
            lambda p=p, holders=holders: len({log_bytes(k, topic, p.index) for k in holders}) == 1,
            30,
            f"replicas of partition {p.index} to match",
        )
        assert log_bytes(holders[0], topic, p.index), "the replicas hold the records"
        for k in cluster:
            if k.broker_id not in p.replicas and k.process and k.process.poll() is None:
                wait_for(
                    lambda k=k, p=p: not partition_dir(k, topic, p.index).exists(),
                    15,
                    f"broker {k.broker_id} to drop partition {p.index}",
                )


def test_adding_a_broker_and_rebalancing_moves_replicas_onto_it(cluster):
    newcomer = cluster[3]
    stop_broker(newcomer)  # a three-broker cluster, for now
    wait_for(lambda: 4 not in reassign.eligible_broker_ids(), 10, "broker 4 to leave")
    name = topic_name("grow")
    topic = create(cluster, name, partitions=PARTITIONS)
    assert all(4 not in p.replicas for p in rows(topic))

    producer = SteadyProducer(cluster[0], name)
    producer.start()
    time.sleep(1.0)
    start_broker(newcomer)
    wait_for(lambda: 4 in reassign.eligible_broker_ids(), 15, "broker 4 to register")
    moves = committed(reassign.rebalance, Actor.system())
    assert moves, "a rebalance onto an empty broker moves replicas"
    assert all(4 in m.target for m in moves)
    wait_for(lambda: settled(topic), 60, "the reassignments to finish", tick_controller=True)
    acked = producer.finish()

    counts = {b: sum(b in p.replicas for p in rows(topic)) for b in (1, 2, 3, 4)}
    assert sum(counts.values()) == PARTITIONS * 3
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    assert all(len(p.isr) == 3 and p.leader in p.replicas for p in rows(topic))
    check_copies(cluster, topic)
    assert len(acked) > 500
    assert_nothing_acked_lost(cluster, name, acked, PARTITIONS)


def test_decommissioning_a_broker_empties_it_without_losing_records(cluster):
    name = topic_name("shrink")
    topic = create(cluster, name, partitions=PARTITIONS)
    victim = next(b for b in (1, 2, 3, 4) if any(p.leader == b for p in rows(topic)))
    producer = SteadyProducer(cluster[0], name)
    producer.start()
    time.sleep(1.0)
    moves = committed(reassign.decommission_broker, victim, Actor.system())
    assert moves and all(victim not in m.target for m in moves)
    wait_for(lambda: settled(topic), 60, "the reassignments to finish", tick_controller=True)
    acked = producer.finish()

    assert all(victim not in p.replicas and p.leader != victim for p in rows(topic))
    assert all(len(p.isr) == 3 for p in rows(topic))
    assert Broker.objects.get(id=victim).decommissioning
    check_copies(cluster, topic)
    assert_nothing_acked_lost(cluster, name, acked, PARTITIONS)

    # Nothing new lands on it either.
    later = create(cluster, topic_name("after"), partitions=PARTITIONS)
    assert all(victim not in p.replicas for p in rows(later))
    committed(reassign.recommission_broker, victim, Actor.system())
    assert not Broker.objects.get(id=victim).decommissioning
