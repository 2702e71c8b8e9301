"""Topics get their replicas placed over the live brokers when created or grown."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from control_plane.catalog import services
from control_plane.catalog.models import Broker, Partition
from control_plane.core.errors import InvalidInput
from tests.conftest import SYSTEM

pytestmark = pytest.mark.django_db


def brokers(*specs):
    for broker_id, rack in specs:
        Broker.objects.create(id=broker_id, host="127.0.0.1", port=9000 + broker_id, rack=rack)


def layout(topic):
    return [
        (p.replicas, p.leader, p.isr)
        for p in Partition.objects.filter(topic=topic).order_by("index")
    ]


def test_replicas_are_spread_over_live_brokers_and_all_start_in_sync(tenant_a):
    brokers((1, ""), (2, ""), (3, ""))
    topic = services.create_topic(
        SYSTEM, tenant_a, name="orders", partition_count=6, replication_factor=3
    )
    rows = layout(topic)
    assert all(len(set(r)) == 3 and leader == r[0] and isr == r for r, leader, isr in rows)
    assert Counter(leader for _, leader, _ in rows) == {1: 2, 2: 2, 3: 2}
    # Added partitions continue the same pattern.
    services.add_partitions(SYSTEM, topic, partition_count=9)
    rows = layout(topic)
    assert len(rows) == 9 and Counter(leader for _, leader, _ in rows) == {1: 3, 2: 3, 3: 3}


def test_racks_are_spread(tenant_a):
    brokers((1, "a"), (2, "a"), (3, "b"), (4, "b"))
    topic = services.create_topic(
        SYSTEM, tenant_a, name="orders", partition_count=8, replication_factor=2
    )
    rack = {1: "a", 2: "a", 3: "b", 4: "b"}
    assert all({rack[b] for b in r} == {"a", "b"} for r, _, _ in layout(topic))


def test_dead_brokers_get_nothing_and_rf_is_bounded_by_live_ones(tenant_a):
    brokers((1, ""), (2, ""), (3, ""))
    Broker.objects.filter(id=3).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    topic = services.create_topic(
        SYSTEM, tenant_a, name="orders", partition_count=4, replication_factor=2
    )
    assert all(set(r) == {1, 2} for r, _, _ in layout(topic))
    with pytest.raises(InvalidInput, match="between 1 and 2") as err:
        services.create_topic(SYSTEM, tenant_a, name="big", partition_count=1, replication_factor=3)
    assert err.value.field == "replication_factor"


def test_partitions_created_before_any_broker_are_placed_when_brokers_come(tenant_a):
    topic = services.create_topic(
        SYSTEM, tenant_a, name="early", partition_count=3, replication_factor=2
    )
    assert layout(topic) == [([], None, [])] * 3
    brokers((1, ""))
    assert services.assign_unassigned_partitions() == 0  # one broker cannot hold RF 2
    brokers((2, ""))
    assert services.assign_unassigned_partitions() == 3
    assert all(set(r) == {1, 2} and isr == r for r, _, isr in layout(topic))
    assert services.assign_unassigned_partitions() == 0
