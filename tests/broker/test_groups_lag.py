"""Lag of a group still catching up on a backlog, against a real broker and a slow real
consumer: partitions assigned but not yet committed count from the log start, and the
group page, the list, the overview, the REST API and the lag sampler agree with the
backlog the consumer really has."""

from __future__ import annotations

import time

import pytest

from control_plane.groups import lag
from control_plane.groups.models import ConsumerGroup, LagSample
from frontend.groups import lag_history
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer, wait_assigned
from tests.broker.test_groups_rest import _key_hashes, rest, tenant, url  # noqa: F401

# The broker (another process) must see what is committed; one test per module.
pytestmark = pytest.mark.django_db(transaction=True)

PARTITIONS, PER_PARTITION = 3, 400


def backlog(kafka, name, committed):
    """The true backlog: each partition's high watermark minus where the group resumes
    (its committed offset, or the log start, 0 here, without one)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": "unused"}))
    ends = {
        p: c.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1]
        for p in range(PARTITIONS)
    }
    c.close()
    return sum(end - committed.get(p, 0) for p, end in ends.items())


def views_agree(kafka, group_id, expected):
    """Every place that shows the group's lag shows ``expected``."""
    group = ConsumerGroup.objects.get(tenant=tenant(kafka), group_id=group_id)
    detail = lag.describe(tenant(kafka), group)
    assert detail["total_lag"] == expected, detail
    [summary] = lag.summaries(tenant(kafka), [group])
    assert summary["total_lag"] == expected
    api = rest(kafka)
    body = api.get(url(kafka, group_id)).json()
    assert body["total_lag"] == expected
    listed = [g for g in api.get(url(kafka)).json()["results"] if g["group_id"] == group_id]
    assert listed[0]["total_lag"] == expected
    assert listed[0]["uncommitted_partition_count"] == body["uncommitted_partition_count"]
    return body


def test_a_slow_consumer_on_a_backlog_shows_its_whole_lag_everywhere(kafka):
    from confluent_kafka import Producer, TopicPartition

    name = topic_name("backlog")
    confluent_create(kafka, kafka.admin_a, name, partitions=PARTITIONS)
    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"linger.ms": 5}))
    for i in range(PARTITIONS * PER_PARTITION):
        producer.produce(name, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    group_id = f"g-{name}"
    c = consumer(kafka, group_id)
    c.subscribe([name])
    wait_assigned([c], [PARTITIONS])

    # Assigned, nothing committed: the whole backlog, counted from the log start.
    body = views_agree(kafka, group_id, backlog(kafka, name, {}))
    assert body["total_lag"] == PARTITIONS * PER_PARTITION
    assert body["uncommitted_partition_count"] == PARTITIONS
    assert {o["lag_basis"] for o in body["offsets"]} == {"log_start"}
    assert all(o["committed_offset"] is None for o in body["offsets"])

    # The slow consumer reads a little and commits one partition: that partition counts
    # from its commit, the others still from the log start.
    read: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while read.get(0, 0) < 50 and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            read[msg.partition()] = msg.offset() + 1
    committed = {0: read[0]}
    c.commit(offsets=[TopicPartition(name, 0, read[0])], asynchronous=False)
    body = views_agree(kafka, group_id, backlog(kafka, name, committed))
    rows = {o["partition"]: o for o in body["offsets"]}
    assert rows[0]["lag_basis"] == "committed" and rows[0]["lag"] == PER_PARTITION - read[0]
    assert {rows[p]["lag_basis"] for p in (1, 2)} == {"log_start"}
    assert body["uncommitted_partition_count"] == PARTITIONS - 1

    # The sampler records the same total, so the history does not climb while the group
    # catches up; it sampled the group although it had committed on one partition only.
    LagSample.objects.all().delete()
    assert lag.sample_lag() == PARTITIONS
    samples = LagSample.objects.filter(group__group_id=group_id)
    assert sum(s.lag for s in samples) == body["total_lag"]
    assert sorted(s.lag_basis for s in samples) == ["committed", "log_start", "log_start"]
    group = ConsumerGroup.objects.get(tenant=tenant(kafka), group_id=group_id)
    chart = lag_history(group, 1)
    assert chart["series"][0]["values"] == [body["total_lag"]]  # the console's chart
    history = rest(kafka).get(url(kafka, group_id, "lag-history/")).json()
    assert sum(h["lag"] for h in history) == body["total_lag"]
    c.close()
