"""The controller: fencing, elections from the ISR, unclean elections, AlterPartition, and
one decision winning when controllers race."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker, BrokerState, Partition
from control_plane.controller import services as controller
from control_plane.core.actor import Actor
from data_plane.protocol.errors import ErrorCode as E
from tests.conftest import SYSTEM, session_client

pytestmark = pytest.mark.django_db


def brokers(*ids):
    for broker_id in ids:
        Broker.objects.update_or_create(
            id=broker_id, defaults={"host": "127.0.0.1", "port": 9000 + broker_id}
        )


def kill(*ids):
    """Let these brokers' leases expire."""
    Broker.objects.filter(id__in=ids).update(last_heartbeat=timezone.now() - timedelta(minutes=5))


def revive(*ids):
    Broker.objects.filter(id__in=ids).update(
        last_heartbeat=timezone.now(), state=BrokerState.RUNNING
    )


def topic(tenant, name="orders", partitions=1, rf=3, configs=None):
    return catalog_services.create_topic(
        SYSTEM,
        tenant,
        name=name,
        partition_count=partitions,
        replication_factor=rf,
        configs=configs or {},
    )


def state(t, index=0):
    p = Partition.objects.get(topic=t, index=index)
    return p.leader, p.leader_epoch, list(p.isr), p.partition_epoch


def set_row(t, **fields):
    Partition.objects.filter(topic=t, index=0).update(**fields)


def test_dead_leader_is_replaced_from_the_isr_and_epochs_move(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a)
    set_row(t, replicas=[1, 2, 3], leader=1, isr=[1, 2, 3])
    assert controller.controller_tick() == []  # all is well: nothing to do
    kill(1)
    (change,) = controller.controller_tick()
    assert (change.leader, change.leader_epoch, change.isr) == (2, 1, (2, 3))
    assert state(t) == (2, 1, [2, 3], 1)
    assert Broker.objects.get(id=1).state == BrokerState.FENCED
    assert controller.controller_tick() == []  # decided once


def test_a_dead_follower_leaves_the_isr_without_a_new_leader_epoch(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a)
    set_row(t, replicas=[1, 2, 3], leader=1, isr=[1, 2, 3])
    kill(3)
    controller.controller_tick()
    assert state(t) == (1, 0, [1, 2], 1)


def test_last_in_sync_replica_keeps_its_place_and_leads_again(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a)
    set_row(t, replicas=[1, 2, 3], leader=1, isr=[1])
    kill(1)
    controller.controller_tick()
    assert state(t) == (None, 1, [1], 1)  # offline: 2 and 3 are out of sync
    assert controller.controller_tick() == []
    revive(1)
    controller.controller_tick()
    assert state(t) == (1, 2, [1], 2)


def test_unclean_election_only_where_the_topic_allows_it_and_audited(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a, configs={"unclean.leader.election.enable": "true"})
    set_row(t, replicas=[1, 2, 3], leader=1, isr=[1])
    kill(1)
    controller.controller_tick()
    assert state(t) == (2, 1, [2], 1)
    event = AuditEvent.objects.get(action="partition.unclean_election")
    assert event.before == {"leader": 1, "isr": [1]} and event.after == {"leader": 2, "isr": [2]}


def test_a_requested_unclean_election_ignores_the_topic_config_and_audits_the_operator(
    tenant_a, operator
):
    brokers(1, 2, 3)
    t = topic(tenant_a)  # unclean.leader.election.enable: false
    set_row(t, replicas=[1, 2, 3], leader=1, isr=[1])
    kill(1)
    controller.controller_tick()
    assert state(t) == (None, 1, [1], 1)  # the controller alone keeps it offline
    row = Partition.objects.select_related("topic__tenant").get(topic=t, index=0)
    actor = Actor(user=operator)
    assert controller.elect_requested(row, unclean=False, actor=actor) == (
        E.PREFERRED_LEADER_NOT_AVAILABLE
    )
    assert controller.elect_requested(row, unclean=True, actor=actor) == E.NONE
    assert state(t) == (2, 2, [2], 2)
    event = AuditEvent.objects.get(action="partition.unclean_election")
    assert event.actor == operator.get_username()
    assert event.before == {"leader": None, "isr": [1]} and event.after == {"leader": 2, "isr": [2]}
    row.refresh_from_db()
    assert controller.elect_requested(row, unclean=True, actor=actor) == E.ELECTION_NOT_NEEDED
    Broker.objects.filter(id__in=[2, 3]).update(state=BrokerState.SHUTTING_DOWN)
    row.refresh_from_db()
    assert controller.elect_requested(row, unclean=True, actor=actor) == (
        E.ELIGIBLE_LEADERS_NOT_AVAILABLE
    )


def test_preferred_leader_election(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a)
    set_row(t, replicas=[1, 2, 3], leader=2, leader_epoch=4, isr=[1, 2, 3], partition_epoch=7)
    (change,) = controller.preferred_leader_election()
    assert state(t) == (1, 5, [1, 2, 3], 8) and change.reason == "preferred leader"
    assert controller.preferred_leader_election() == []


def test_alter_partition_checks_leader_and_epochs(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a)
    set_row(t, replicas=[1, 2, 3], leader=1, leader_epoch=3, isr=[1, 2, 3], partition_epoch=5)
    tid = str(t.topic_id)

    def alter(**kw):
        args = {"leader": 1, "leader_epoch": 3, "partition_epoch": 5, "new_isr": [1, 2]}
        return controller.alter_partition(tid, 0, **{**args, **kw})

    assert alter(leader=2).error == E.FENCED_LEADER_EPOCH
    assert alter(leader_epoch=2).error == E.FENCED_LEADER_EPOCH
    assert alter(partition_epoch=4).error == E.INVALID_UPDATE_VERSION
    assert alter(new_isr=[2, 3]).error == E.INVALID_REQUEST  # without the leader
    assert alter(new_isr=[1, 9]).error == E.INVALID_REQUEST  # not a replica
    assert controller.alter_partition(
        str(t.topic_id), 7, leader=1, leader_epoch=3, partition_epoch=5, new_isr=[1]
    ).error == (E.UNKNOWN_TOPIC_OR_PARTITION)
    assert state(t) == (1, 3, [1, 2, 3], 5)  # nothing applied
    shrunk = alter(new_isr=[2, 1])
    assert (shrunk.error, shrunk.partition_epoch, shrunk.isr) == (E.NONE, 6, (1, 2))
    assert state(t) == (1, 3, [1, 2], 6)
    # Expanding to a dead broker that is not in the ISR is refused.
    kill(3)
    assert alter(partition_epoch=6, new_isr=[1, 2, 3]).error == E.INELIGIBLE_REPLICA


@pytest.mark.django_db(transaction=True)
def test_racing_controllers_make_one_decision(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a, partitions=8)
    Partition.objects.filter(topic=t).update(replicas=[1, 2, 3], leader=1, isr=[1, 2, 3])
    kill(1)
    results: list[list[controller.Change]] = []
    barrier = threading.Barrier(4)

    def run():
        try:
            rows = list(Partition.objects.filter(topic=t).select_related("topic__tenant"))
            barrier.wait(10)  # all four read the same epochs before anyone writes
            results.append(controller.elect_leaders(rows))
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    made = [c for r in results for c in r]
    assert len(results) == 4 and len(made) == 8  # one change per partition, in total
    for index in range(8):
        assert state(t, index) == (2, 1, [2, 3], 1)


def test_operators_see_brokers_and_unhealthy_partitions(tenant_a, operator, owner):
    brokers(1, 2, 3)
    t = topic(tenant_a, partitions=3)
    Partition.objects.filter(topic=t).update(replicas=[1, 2, 3], leader=1, isr=[1, 2, 3])
    kill(3)
    controller.controller_tick()  # 3 leaves every ISR: under-replicated
    set_row(t, leader=None)  # partition 0 offline
    api = session_client(operator)
    listed = {b["id"]: b for b in api.get("/api/v1/brokers/").json()["results"]}
    assert (listed[1]["live"], listed[1]["leader_count"], listed[1]["replica_count"]) == (
        True,
        2,
        3,
    )
    assert (listed[3]["live"], listed[3]["state"]) == (False, "fenced")
    under = api.get("/api/v1/cluster/partitions/?status=under_replicated").json()["results"]
    assert [(p["topic"], p["partition"], p["isr"]) for p in under] == [
        ("orders", 1, [1, 2]),
        ("orders", 2, [1, 2]),
    ]
    offline = api.get("/api/v1/cluster/partitions/?status=offline").json()["results"]
    assert [(p["tenant"], p["partition"]) for p in offline] == [(tenant_a.slug, 0)]
    bad = api.get("/api/v1/cluster/partitions/?status=sideways")
    assert bad.status_code == 400 and "status" in bad.json()["error"]["details"]
    # Tenant owners are not operators.
    assert session_client(owner).get("/api/v1/cluster/partitions/").status_code == 403


def test_a_broker_whose_process_is_gone_is_fenced_before_its_lease_runs_out(tenant_a):
    from control_plane.core.liveness import LivenessLock

    if connection.vendor != "postgresql":
        pytest.skip("liveness locks need Postgres")
    brokers(1, 2, 3)
    t = topic(tenant_a)
    set_row(t, replicas=[1, 2, 3], leader=1, isr=[1, 2, 3])
    alive = LivenessLock()
    try:
        assert alive.ensure(2)
        assert alive.ensure(2)  # held: a cheap check
        assert not LivenessLock().ensure(2)  # one holder per broker id
        # 1 and 2 claim their locks, but only 2's process (``alive``) holds one; 3 never
        # took one (SQLite, say) and is judged by its lease alone.
        Broker.objects.filter(id__in=[1, 2]).update(liveness_lock=True)
        (change,) = controller.controller_tick()
        assert Broker.objects.get(id=1).state == BrokerState.FENCED
        assert Broker.objects.get(id=2).state == BrokerState.RUNNING
        assert Broker.objects.get(id=3).state == BrokerState.RUNNING
        assert (change.leader, change.isr) == (2, (2, 3))
    finally:
        alive.release()
    controller.controller_tick()
    assert Broker.objects.get(id=2).state == BrokerState.FENCED  # released: gone


def test_the_only_broker_is_not_fenced_when_its_lease_lapses(tenant_a, caplog):
    """`manage.py up` under load: a late heartbeat of the one broker must not take every
    partition offline (there is nobody to hand leadership to)."""
    brokers(1)
    t = topic(tenant_a, rf=1)
    set_row(t, replicas=[1], leader=1, isr=[1])
    kill(1)
    assert controller.controller_tick() == []
    assert Broker.objects.get(id=1).state == BrokerState.RUNNING
    assert state(t) == (1, 0, [1], 0)
    assert "nothing is fenced" in caplog.text
    assert list(Broker.objects.live(10).values_list("id", flat=True)) == [1]


def test_when_every_lease_lapses_at_once_nothing_moves(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a)
    set_row(t, replicas=[1, 2, 3], leader=1, isr=[1, 2, 3])
    kill(1, 2, 3)
    assert controller.controller_tick() == []
    assert state(t) == (1, 0, [1, 2, 3], 0)
    assert set(Broker.objects.values_list("state", flat=True)) == {BrokerState.RUNNING}
    # As soon as one broker renews, the others' lapsed leases count again.
    revive(2)
    (change,) = controller.controller_tick()
    assert (change.leader, change.isr) == (2, (2,))
    assert Broker.objects.get(id=1).state == BrokerState.FENCED


def test_a_tick_reads_only_the_partitions_an_election_could_change(tenant_a):
    """A healthy cluster's partitions are not even read (the tick costs what the failures
    cost); a dead broker brings in exactly the partitions it leads or is in sync for."""
    brokers(1, 2, 3)
    t = topic(tenant_a, partitions=6)
    rows = {
        0: dict(replicas=[1, 2, 3], leader=1, isr=[1, 2, 3]),
        1: dict(replicas=[2, 3, 1], leader=2, isr=[2, 3]),
        2: dict(replicas=[3, 1, 2], leader=3, isr=[3, 1]),
        3: dict(replicas=[1, 3, 2], leader=None, isr=[1]),
        4: dict(replicas=[2, 1, 3], leader=2, isr=[2, 1, 3]),
        5: dict(replicas=[3, 2, 1], leader=3, isr=[3]),
    }
    for index, fields in rows.items():
        Partition.objects.filter(topic=t, index=index).update(**fields)
    live = controller.live_broker_ids()
    candidates = {p.index for p in controller._may_need_election(live)}
    assert candidates == {3}  # only the one without a leader
    kill(2)
    live = controller.live_broker_ids()
    candidates = {p.index for p in controller._may_need_election(live)}
    if connection.features.supports_json_field_contains:
        # Led by 2 (1 and 4), in sync on 2 (0 and 4), no leader (3); not 2 and 5.
        assert candidates == {0, 1, 3, 4}
    else:
        assert candidates == set(rows)  # SQLite: every partition once a broker is down


def test_a_tick_finds_leaders_that_are_not_live_brokers_at_all(tenant_a):
    """Leaders outside the live set, including ids no broker registered (a restored
    database, a row removed by hand), are found by index ranges around the live ids:
    below the lowest, in each gap, above the highest."""
    brokers(1, 2, 4, 7)
    t = topic(tenant_a, partitions=8)
    leaders = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 7, 7: 8}
    for index, leader in leaders.items():
        Partition.objects.filter(topic=t, index=index).update(
            replicas=[1, 2, 4, 7], leader=leader, isr=[1, 2, 4, 7]
        )
    live = controller.live_broker_ids()
    assert live == {1, 2, 4, 7}
    candidates = {p.index for p in controller._may_need_election(live)}
    assert candidates == {0, 3, 5, 7}  # led by 0, 3, 5 and 8
    assert controller._not_in("leader", set()) == Q(leader__isnull=False)
