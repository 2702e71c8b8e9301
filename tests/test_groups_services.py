"""The control plane's side of consumer groups: what the coordinator stores, resets,
deletes and offset expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.core.actor import Actor
from control_plane.core.errors import Conflict, InvalidInput, NotFound, Unavailable
from control_plane.groups import lag, services
from control_plane.groups.models import CommittedOffset, ConsumerGroup, LagSample
from control_plane.groups.tasks import expire_offsets
from control_plane.tenancy import services as tenancy_services
from data_plane.groups.model import (
    ConsumerMemberRecord,
    GroupRecord,
    GroupState,
    GroupType,
    MemberRecord,
    OffsetRecord,
)

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system()


@pytest.fixture
def tenant():
    t = tenancy_services.create_tenant(SYSTEM, slug="acme", name="Acme")
    catalog_services.create_topic(SYSTEM, t, name="orders", partition_count=3, replication_factor=1)
    return t


def record(tenant, state=GroupState.STABLE, members=1, group_id="g1"):
    return GroupRecord(
        tenant_id=tenant.pk,
        group_id=group_id,
        state=state,
        generation=4,
        protocol_type="consumer",
        protocol_name="range",
        leader="m-0" if members else None,
        members=tuple(
            MemberRecord(f"m-{i}", None, "app", "10.0.0.1", 10_000, 30_000, b"\x00\x01", b"\x02")
            for i in range(members)
        ),
        state_since_ms=int(timezone.now().timestamp() * 1000),
    )


def test_group_record_round_trips(tenant):
    services.store_group(record(tenant))
    loaded = services.load_group(tenant.pk, "g1")
    assert loaded is not None
    assert loaded.state == GroupState.STABLE and loaded.generation == 4
    assert loaded.members[0].metadata == b"\x00\x01" and loaded.members[0].assignment == b"\x02"
    assert services.load_group(tenant.pk, "other") is None


def consumer_record(tenant, topic_id: str):
    """A KIP-848 group as the coordinator stores it: one member moving partition 2."""
    return GroupRecord(
        tenant_id=tenant.pk,
        group_id="kip848",
        state=GroupState.RECONCILING,
        generation=6,
        protocol_type="consumer",
        protocol_name="uniform",
        leader=None,
        members=(),
        state_since_ms=int(timezone.now().timestamp() * 1000),
        group_type=GroupType.CONSUMER,
        assignment_epoch=6,
        consumer_members=(
            ConsumerMemberRecord(
                member_id="m-1",
                instance_id="host-1",
                rack_id=None,
                client_id="app",
                host="/10.0.0.1",
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=("orders",),
                subscribed_topic_regex="ord.*",
                server_assignor=None,
                member_epoch=5,
                previous_member_epoch=4,
                state="unrevoked_partitions",
                assigned=((topic_id, (0, 1)),),
                revoking=((topic_id, (2,)),),
                target=((topic_id, (0, 1)),),
                resolved=(("orders", topic_id, 3),),
            ),
        ),
    )


def test_consumer_group_record_round_trips_and_reads_by_topic_name(tenant):
    topic_id = str(tenant.topics.get(name="orders").topic_id)
    services.store_group(consumer_record(tenant, topic_id))
    loaded = services.load_group(tenant.pk, "kip848")
    assert loaded is not None
    assert loaded.group_type == GroupType.CONSUMER and loaded.assignment_epoch == 6
    assert loaded.consumer_members == consumer_record(tenant, topic_id).consumer_members
    group = ConsumerGroup.objects.get(tenant=tenant, group_id="kip848")
    detail = lag.describe(tenant, group)
    assert (detail["group_type"], detail["generation"], detail["assignment_epoch"]) == (
        "consumer",
        6,
        6,
    )
    [member] = detail["members"]
    assert member["member_epoch"] == 5 and member["subscription_regex"] == "ord.*"
    assert member["assignment"] == [{"topic": "orders", "partitions": [0, 1]}]
    assert member["target_assignment"] == [{"topic": "orders", "partitions": [0, 1]}]
    # The partitions it holds show it as their member in the offsets table.
    owners = {o["partition"]: o["member_id"] for o in detail["offsets"]}
    assert owners == {0: "m-1", 1: "m-1"}


def test_offsets_upsert_in_one_request_and_read_back(tenant):
    services.store_offsets(
        tenant.pk,
        "g1",
        [OffsetRecord("orders", 0, 10, 3, "meta"), OffsetRecord("orders", 1, 20, -1, None)],
    )
    services.store_offsets(tenant.pk, "g1", [OffsetRecord("orders", 0, 15, 3, "")])
    got = {
        (o.topic, o.partition): (o.offset, o.metadata)
        for o in services.load_offsets(tenant.pk, "g1")
    }
    assert got == {("orders", 0): (15, ""), ("orders", 1): (20, None)}
    services.remove_offsets(tenant.pk, "g1", [("orders", 1)])
    assert [o.partition for o in services.load_offsets(tenant.pk, "g1")] == [0]


def test_reset_and_delete_are_refused_while_the_group_has_members(tenant):
    services.store_group(record(tenant))
    with pytest.raises(Conflict, match="while it has members"):
        services.reset_offsets(SYSTEM, tenant, "g1", {("orders", 0): 5})
    with pytest.raises(Conflict):
        services.delete_group(SYSTEM, tenant, "g1")
    assert ConsumerGroup.objects.filter(group_id="g1").exists()


def test_reset_of_an_empty_group_writes_offsets_and_audits(tenant):
    services.store_group(record(tenant, GroupState.EMPTY, members=0))
    services.store_offsets(tenant.pk, "g1", [OffsetRecord("orders", 0, 100, -1, None)])
    out = services.reset_offsets(SYSTEM, tenant, "g1", {("orders", 0): 5, ("orders", 2): 7})
    assert out == [
        {"topic": "orders", "partition": 0, "offset": 5},
        {"topic": "orders", "partition": 2, "offset": 7},
    ]
    got = {o.partition: o.offset for o in services.load_offsets(tenant.pk, "g1")}
    assert got == {0: 5, 2: 7}
    event = AuditEvent.objects.get(action="group.reset_offsets")
    assert event.before == {"orders-0": 100} and event.after == {"orders-0": 5, "orders-2": 7}
    with pytest.raises(InvalidInput, match="no partition 9"):
        services.reset_offsets(SYSTEM, tenant, "g1", {("orders", 9): 0})
    with pytest.raises(NotFound):
        services.reset_offsets(SYSTEM, tenant, "nope", {("orders", 0): 0})


def test_delete_removes_an_empty_group_with_its_offsets(tenant):
    services.store_group(record(tenant, GroupState.EMPTY, members=0))
    services.store_offsets(tenant.pk, "g1", [OffsetRecord("orders", 0, 1, -1, None)])
    services.delete_group(SYSTEM, tenant, "g1")
    assert not ConsumerGroup.objects.exists() and not CommittedOffset.objects.exists()
    assert AuditEvent.objects.filter(action="group.delete").count() == 1


def test_offsets_expire_as_kafka_expires_them(tenant, settings):
    settings.MILLRACE_OFFSETS_RETENTION_MINUTES = 60
    old = timezone.now() - timedelta(hours=2)
    # A group that had members and has been empty for two hours: all offsets go.
    services.store_group(record(tenant, GroupState.EMPTY, members=0, group_id="gone"))
    services.store_offsets(tenant.pk, "gone", [OffsetRecord("orders", 0, 1, -1, None)])
    ConsumerGroup.objects.filter(group_id="gone").update(state_changed_at=old)
    # A group that never had members (assign() + commit): offsets expire one by one.
    services.store_offsets(
        tenant.pk,
        "standalone",
        [OffsetRecord("orders", 0, 1, -1, None), OffsetRecord("orders", 1, 1, -1, None)],
    )
    CommittedOffset.objects.filter(group__group_id="standalone", partition=0).update(
        committed_at=old
    )
    # A stable group keeps everything, however old.
    services.store_group(record(tenant, group_id="busy"))
    services.store_offsets(tenant.pk, "busy", [OffsetRecord("orders", 0, 1, -1, None)])
    CommittedOffset.objects.filter(group__group_id="busy").update(committed_at=old)
    ConsumerGroup.objects.filter(group_id="busy").update(state_changed_at=old)

    assert expire_offsets() == 2
    assert not ConsumerGroup.objects.filter(group_id="gone").exists()
    assert [o.partition for o in services.load_offsets(tenant.pk, "standalone")] == [1]
    assert len(services.load_offsets(tenant.pk, "busy")) == 1


@pytest.mark.parametrize(
    ("committed", "end", "stamp", "expected"),
    [
        (None, 10, None, (None, None)),  # nothing committed: lag unknown
        (4, None, None, (None, None)),  # log end unknown (brokers unreachable)
        (10, 10, None, (0, 0.0)),  # caught up
        (12, 10, None, (0, 0.0)),  # committed past the end (log truncated): never negative
        (4, 10, 40_000, (6, 60.0)),  # the record at offset 4 is 60 s old
        (4, 10, None, (6, None)),  # its timestamp is unknown
        (4, 10, 200_000, (6, 0.0)),  # a producer clock ahead of ours: not negative
    ],
)
def test_compute_lag(committed, end, stamp, expected):
    assert lag.compute_lag(committed, end, stamp, 100_000) == expected


def test_lag_without_brokers_keeps_the_database_part_and_says_why(tenant):
    services.store_group(record(tenant, state=GroupState.EMPTY, members=0))
    services.store_offsets(tenant.pk, "g1", [OffsetRecord("orders", 1, 7, -1, "", 0)])
    group = ConsumerGroup.objects.get(tenant=tenant, group_id="g1")
    detail = lag.describe(tenant, group)
    (row,) = detail["offsets"]
    assert (row["topic"], row["partition"], row["committed_offset"]) == ("orders", 1, 7)
    assert row["lag"] is None and row["log_end_offset"] is None
    assert "no broker is running" in detail["offsets_error"]
    with pytest.raises(Unavailable):
        lag.plan_reset(tenant, group, to="earliest")
    # The sampler writes nothing it cannot measure, and still prunes the old window.
    old = LagSample.objects.create(
        group=group,
        topic=group.offsets.get().topic,
        partition=1,
        at=timezone.now() - timedelta(days=30),
        committed_offset=1,
        log_end_offset=2,
        lag=1,
    )
    assert lag.sample_lag() == 0
    assert not LagSample.objects.filter(pk=old.pk).exists()


def test_reset_plan_validates_topics_before_asking_brokers(tenant):
    services.store_group(record(tenant, state=GroupState.EMPTY, members=0))
    group = ConsumerGroup.objects.get(tenant=tenant, group_id="g1")
    with pytest.raises(InvalidInput, match="no committed offsets"):
        lag.plan_reset(tenant, group, to="earliest")
    with pytest.raises(InvalidInput, match="does not exist"):
        lag.plan_reset(tenant, group, to="earliest", topics=[{"topic": "nope"}])
    with pytest.raises(InvalidInput, match="no partition 3"):
        lag.plan_reset(tenant, group, to="latest", topics=[{"topic": "orders", "partitions": [3]}])
