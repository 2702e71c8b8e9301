"""Lag of many groups read at once (lists, the overview, the sampler): a fixed number of
broker rounds, and each group still gets the timestamps of its own next records, also
where two groups read the same partition from different offsets."""

from __future__ import annotations

import pytest

from control_plane.groups import lag
from control_plane.groups.models import ConsumerGroup
from control_plane.tenancy.models import Tenant
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db(transaction=True)  # the broker sees the commits

BASE_MS = 1_700_000_000_000


def test_many_groups_at_once_read_their_own_next_records(kafka):
    from confluent_kafka import Consumer, Producer, TopicPartition

    name = topic_name("many-lag")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for partition in (0, 1):
        for offset in range(10):
            # The record at offset o of partition p has timestamp BASE + p*100 s + o s.
            ts = BASE_MS + partition * 100_000 + offset * 1000
            producer.produce(name, value=b"v", partition=partition, timestamp=ts)
    assert producer.flush(30) == 0
    commits = {
        "g-early": {0: 2},
        "g-late": {0: 7, 1: 1},
        "g-done": {0: 10},  # caught up: no next record
    }
    for group_id, offsets in commits.items():
        c = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": f"{name}-{group_id}"}))
        c.commit(
            offsets=[TopicPartition(name, p, o) for p, o in offsets.items()], asynchronous=False
        )
        c.close()

    tenant = Tenant.objects.get(slug=kafka.tenant_a)
    groups = list(
        ConsumerGroup.objects.filter(tenant=tenant, group_id__startswith=name).order_by("group_id")
    )
    assert [g.group_id.removeprefix(f"{name}-") for g in groups] == ["g-done", "g-early", "g-late"]

    asked = []
    with lag.Brokers(tenant) as brokers:
        real = brokers.client.positions
        brokers.client.positions = lambda offsets, **kw: (
            asked.append(dict(offsets)) or real(offsets, **kw)
        )
        together = lag.many_group_offsets(groups, brokers)
    # Partition 0 is read from offsets 2 and 7: two rounds, not one per group.
    assert len(asked) == 2, asked

    by_group = {
        g.group_id.removeprefix(f"{name}-"): rows
        for g, (rows, _) in zip(groups, together, strict=True)
    }
    for group_id, offsets in commits.items():
        rows = {r["partition"]: r for r in by_group[group_id]}
        assert set(rows) == set(offsets)
        for partition, committed in offsets.items():
            assert rows[partition]["lag"] == 10 - committed
            assert rows[partition]["log_end_offset"] == 10
    # Each group's lag in seconds comes from its own next record's timestamp: the two
    # readers of partition 0 differ by exactly the 5 s between offsets 2 and 7.
    early = {r["partition"]: r for r in by_group["g-early"]}[0]["lag_seconds"]
    late = {r["partition"]: r for r in by_group["g-late"]}[0]["lag_seconds"]
    assert early is not None and late is not None
    assert round(early - late, 1) == 5.0
    assert {r["partition"]: r for r in by_group["g-done"]}[0]["lag_seconds"] == 0

    # And they agree with asking one group at a time.
    for group in groups:
        with lag.Brokers(tenant) as brokers:
            _, alone, _ = lag.group_offsets(group, brokers)
        mine = by_group[group.group_id.removeprefix(f"{name}-")]
        assert [(r["partition"], r["lag"]) for r in alone] == [
            (r["partition"], r["lag"]) for r in mine
        ]
