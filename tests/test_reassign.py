"""Reassignments, decommissioning and rebalancing in the metadata store, and their REST
actions. The brokers' side (copying, dropping) is tests/broker/test_reassignment.py."""

from __future__ import annotations

import pytest

from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker, Partition
from control_plane.controller import reassign
from control_plane.controller import services as controller
from control_plane.core.errors import Conflict, InvalidInput
from tests.conftest import SYSTEM, session_client
from tests.test_controller import brokers, kill, topic

pytestmark = pytest.mark.django_db


def row(t, index=0):
    return Partition.objects.select_related("topic__tenant").get(topic=t, index=index)


def layout(t):
    return [
        (p.replicas, p.leader, p.isr, p.adding_replicas, p.removing_replicas)
        for p in Partition.objects.filter(topic=t).order_by("index")
    ]


def place(t, replicas):
    Partition.objects.filter(topic=t).update(replicas=replicas, leader=replicas[0], isr=replicas)


def catch_up(t, index=0):
    """What the leader does once the new replicas reach it: propose them into the ISR."""
    p = row(t, index)
    result = controller.alter_partition(
        str(p.topic.topic_id),
        index,
        leader=p.leader,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        new_isr=list(p.replicas),
    )
    assert result.error == 0


def test_a_reassignment_copies_then_switches_then_drops(tenant_a):
    brokers(1, 2, 3, 4)
    t = topic(tenant_a, rf=3)
    place(t, [1, 2, 3])
    reassign.reassign(row(t), [4, 2, 3], SYSTEM)
    # Start: the target first, then the leaving replica; the leader and ISR stay.
    assert layout(t) == [([4, 2, 3, 1], 1, [1, 2, 3], [4], [1])]
    assert row(t).leader_epoch == 0 and row(t).partition_epoch == 1
    assert controller.controller_tick() == []  # 4 has not caught up: nothing to switch
    # Catching up switches at once, and leadership leaves broker 1 with a new epoch.
    catch_up(t)
    assert layout(t) == [([4, 2, 3], 4, [4, 2, 3], [], [])]
    assert row(t).leader_epoch == 1
    actions = list(AuditEvent.objects.values_list("action", flat=True))
    assert "partition.reassignment_started" in actions
    assert "partition.reassignment_completed" in actions


def test_a_new_order_alone_applies_at_once(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a, rf=2)
    place(t, [1, 2])
    reassign.reassign(row(t), [2, 1], SYSTEM)  # a new preferred leader only: nothing to copy
    # The leader stays; preferred leader election moves it later.
    assert layout(t) == [([2, 1], 1, [1, 2], [], [])]
    assert controller.controller_tick() == []
    (change,) = controller.preferred_leader_election()
    assert change.leader == 2


def test_bad_targets_are_refused_and_change_nothing(tenant_a):
    brokers(1, 2, 3, 4)
    t = topic(tenant_a, rf=3)
    place(t, [1, 2, 3])
    kill(4)
    for bad, words in [
        ([], "non-empty"),
        ([1, 2], "replication factor is 3"),
        ([1, 1, 2], "repeat"),
        ([1, 2, 4], "broker 4 is not live"),
        ([1, 2, 9], "broker 9 is not live"),
        ([1, 2, "3"], "integers"),
    ]:
        with pytest.raises(InvalidInput, match=words):
            reassign.reassign(row(t), bad, SYSTEM)
    assert layout(t) == [([1, 2, 3], 1, [1, 2, 3], [], [])]
    assert reassign.reassign(row(t), [1, 2, 3], SYSTEM) is None  # already there


def test_a_second_reassignment_waits_and_cancel_restores_the_original(tenant_a):
    brokers(1, 2, 3, 4, 5)
    t = topic(tenant_a, rf=3)
    place(t, [1, 2, 3])
    reassign.reassign(row(t), [4, 5, 3], SYSTEM)
    with pytest.raises(Conflict, match="already being reassigned"):
        reassign.reassign(row(t), [1, 4, 5], SYSTEM)
    reassign.cancel(row(t), SYSTEM)
    assert layout(t) == [([1, 2, 3], 1, [1, 2, 3], [], [])]
    with pytest.raises(Conflict, match="not being reassigned"):
        reassign.cancel(row(t), SYSTEM)


def test_cancel_after_a_new_replica_took_leadership_hands_it_back(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a, rf=2)
    place(t, [1, 2])
    reassign.reassign(row(t), [3, 2], SYSTEM)
    # 3 caught up and then led (say 1 died and came back) before the switch.
    Partition.objects.filter(topic=t).update(leader=3, isr=[3, 2, 1], partition_epoch=7)
    Partition.objects.filter(topic=t).update(adding_replicas=[3], removing_replicas=[1])
    reassign.cancel(row(t), SYSTEM)
    replicas, leader, isr, *_ = layout(t)[0]
    assert (replicas, leader, isr) == ([1, 2], 1, [1, 2])  # back in the original order


def test_decommission_moves_every_replica_to_the_emptiest_brokers(tenant_a):
    brokers(1, 2, 3, 4)
    t = topic(tenant_a, partitions=6, rf=2)
    for i, replicas in enumerate([[1, 2], [2, 3], [3, 1], [1, 3], [2, 1], [3, 2]]):
        Partition.objects.filter(topic=t, index=i).update(
            replicas=replicas, leader=replicas[0], isr=replicas
        )
    moves = reassign.decommission_broker(1, SYSTEM)
    assert len(moves) == 4
    assert Broker.objects.get(id=1).decommissioning
    targets = [reassign.target_replicas(p) for p in Partition.objects.filter(topic=t)]
    assert all(1 not in r and len(set(r)) == 2 for r in targets)
    counts = {b: sum(b in r for r in targets) for b in (2, 3, 4)}
    assert counts == {2: 4, 3: 4, 4: 4}
    # The replaced broker keeps its place: partition 0 prefers broker 4 now.
    assert reassign.target_replicas(row(t, 0)) == [4, 2]
    # New topics avoid a decommissioning broker.
    fresh = topic(tenant_a, name="fresh", partitions=4, rf=3)
    assert all(1 not in p.replicas for p in Partition.objects.filter(topic=fresh))


def test_decommission_is_all_or_nothing(tenant_a):
    brokers(1, 2, 3)
    t = topic(tenant_a, partitions=2, rf=3)
    place(t, [1, 2, 3])
    with pytest.raises(Conflict, match="no live broker can take"):
        reassign.decommission_broker(1, SYSTEM)
    assert not Broker.objects.get(id=1).decommissioning
    assert all(not reassign.is_reassigning(p) for p in Partition.objects.filter(topic=t))


def test_rebalance_spreads_replicas_onto_a_new_broker_with_racks_apart(tenant_a):
    for broker_id, rack in [(1, "a"), (2, "b"), (3, "a"), (4, "b")]:
        Broker.objects.create(id=broker_id, host="127.0.0.1", port=9000 + broker_id, rack=rack)
    Broker.objects.filter(id=4).update(state="shutting_down")  # not up yet
    t = catalog_services.create_topic(
        SYSTEM, tenant_a, name="orders", partition_count=8, replication_factor=2
    )
    Broker.objects.filter(id=4).update(state="running")
    assert reassign.rebalance(SYSTEM, dry_run=True)
    assert all(not reassign.is_reassigning(p) for p in Partition.objects.filter(topic=t))
    moves = reassign.rebalance(SYSTEM)
    targets = [reassign.target_replicas(p) for p in Partition.objects.filter(topic=t)]
    counts = {b: sum(b in r for r in targets) for b in (1, 2, 3, 4)}
    assert counts == {1: 4, 2: 4, 3: 4, 4: 4}, counts
    racks = {1: "a", 2: "b", 3: "a", 4: "b"}
    assert all(len({racks[b] for b in r}) == 2 for r in targets)
    assert all(4 in m.target for m in moves)
    assert reassign.rebalance(SYSTEM) == []  # balanced (and the moves are still running)


def test_operators_reassign_and_decommission_over_rest(tenant_a, operator, owner):
    brokers(1, 2, 3, 4)
    t = topic(tenant_a, partitions=2, rf=3)
    place(t, [1, 2, 3])
    api = session_client(operator)
    tid = str(t.topic_id)
    url = "/api/v1/cluster/reassignments/"

    preview = api.post(
        url,
        {"partitions": [{"topic_id": tid, "partition": 0, "replicas": [4, 2, 3]}], "dry_run": True},
        format="json",
    )
    assert preview.status_code == 200 and preview.json()["moves"][0]["target"] == [4, 2, 3]
    assert not reassign.is_reassigning(row(t))

    # One bad entry refuses the whole batch, naming it.
    bad = api.post(
        url,
        {
            "partitions": [
                {"topic_id": tid, "partition": 0, "replicas": [4, 2, 3]},
                {"topic_id": tid, "partition": 1, "replicas": [4, 2]},
            ]
        },
        format="json",
    )
    assert bad.status_code == 400
    assert "partitions[1].replicas" in bad.json()["error"]["details"]
    assert not reassign.is_reassigning(row(t))
    missing = api.post(
        url,
        {"partitions": [{"topic_id": tid, "partition": 5, "replicas": [4, 2, 3]}]},
        format="json",
    )
    assert missing.status_code == 400 and "partitions[0]" in missing.json()["error"]["details"]

    started = api.post(
        url,
        {"partitions": [{"topic_id": tid, "partition": 0, "replicas": [4, 2, 3]}]},
        format="json",
    )
    assert started.status_code == 202
    listed = api.get(url).json()["results"]
    assert [(p["partition"], p["adding_replicas"], p["removing_replicas"]) for p in listed] == [
        (0, [4], [1])
    ]
    assert listed[0]["status"] == "online"  # copying to 4 is not under-replication
    again = api.post(
        url,
        {"partitions": [{"topic_id": tid, "partition": 0, "replicas": [1, 2, 4]}]},
        format="json",
    )
    assert again.status_code == 409
    cancelled = api.post(
        url + "cancel/", {"partitions": [{"topic_id": tid, "partition": 0}]}, format="json"
    )
    assert cancelled.status_code == 200 and cancelled.json()[0]["replicas"] == [1, 2, 3]

    # Decommissioning broker 3 needs broker 4 for both partitions: a plan, then the moves.
    plan = api.post("/api/v1/brokers/3/decommission/", {"dry_run": True}, format="json")
    assert plan.status_code == 200 and len(plan.json()["moves"]) == 2
    assert not Broker.objects.get(id=3).decommissioning
    done = api.post("/api/v1/brokers/3/decommission/", {}, format="json")
    assert done.status_code == 202
    listed = {b["id"]: b for b in api.get("/api/v1/brokers/").json()["results"]}
    assert listed[3]["decommissioning"] is True
    assert api.post("/api/v1/brokers/99/decommission/", {}, format="json").status_code == 404
    assert api.post("/api/v1/brokers/3/recommission/").status_code == 204
    assert api.post("/api/v1/cluster/rebalance/", {"dry_run": True}, format="json").status_code in (
        200,
    )

    # Tenant owners are not operators.
    assert session_client(owner).post(url, {}, format="json").status_code == 403
    assert session_client(owner).post("/api/v1/brokers/3/decommission/").status_code == 403
