"""Operator-only cluster APIs in-process (the in-memory store, no sockets): ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments."""

from __future__ import annotations

import asyncio

import pytest

from data_plane.acl import Operation, ResourceType
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import (
    alter_partition_reassignments,
    elect_leaders,
    list_partition_reassignments,
)
from tests.broker_unit import test_handlers
from tests.broker_unit.test_handlers import call, principal_of

E = ErrorCode
world = test_handlers.world  # the in-process broker's fixture


def elect(services, principal, version, topics, election_type=0):
    body = {"election_type": election_type, "topic_partitions": topics, "timeout_ms": 1000}
    got = call(services, principal, elect_leaders.KEY, version, body)
    # What goes on the wire at that version (v0 has no top-level error code).
    return elect_leaders.RESPONSE.decode(elect_leaders.RESPONSE.encode(got, version), version)


def codes(answer) -> dict[tuple[str, int], int]:
    return {
        (t["topic"], p["partition_id"]): p["error_code"]
        for t in answer["replica_election_results"]
        for p in t["partition_result"]
    }


def off_preferred(store, tenant_id, name):
    """Leadership of partition 0 moved off its first replica, which is back in sync."""
    topic = store.snapshot().topic(tenant_id, name)
    p = topic.partitions[0]
    preferred = p.replicas[0]
    store.controlled_shutdown(preferred)
    store.register_broker(preferred, "127.0.0.1", 9000 + preferred, None)
    p = store.snapshot().topic(tenant_id, name).partitions[0]
    isr = sorted(p.replicas)
    assert (
        store.alter_partition(
            str(topic.topic_id), 0, p.leader, p.leader_epoch, p.partition_epoch, isr
        )[0]
        == E.NONE
    )
    return preferred


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_tenant_is_refused_and_nothing_moves(world, version):
    store, node, services, acme, _ = world
    for b in (2, 3):
        store.register_broker(b, "127.0.0.1", 9000 + b, None)
    store.add_topic(acme, "orders", partitions=1, replication_factor=3)
    preferred = off_preferred(store, acme, "orders")
    # Even with every ACL on the cluster: only an operator elects.
    app = principal_of(store, acme, (Operation.ALTER, ResourceType.CLUSTER))
    asyncio.run(node.refresh_metadata())
    answer = elect(services, app, version, [{"topic": "orders", "partitions": [0]}])
    assert codes(answer) == {("orders", 0): E.CLUSTER_AUTHORIZATION_FAILED}
    if version >= 1:
        assert answer["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    everything = elect(services, app, version, None)
    assert everything["replica_election_results"] == []
    assert store.snapshot().topic(acme, "orders").partitions[0].leader != preferred


@pytest.mark.parametrize("version", [0, 1, 2])
def test_an_operator_elects_the_preferred_replica(world, version):
    store, node, services, acme, globex = world
    for b in (2, 3):
        store.register_broker(b, "127.0.0.1", 9000 + b, None)
    store.add_topic(acme, "orders", partitions=2, replication_factor=3)
    store.add_topic(globex, "theirs", partitions=1, replication_factor=1)
    preferred = off_preferred(store, acme, "orders")
    ops = store.system_principal(acme)
    asyncio.run(node.refresh_metadata())
    asked = [
        {"topic": "orders", "partitions": [0, 1, 5]},
        {"topic": "theirs", "partitions": [0]},
        {"topic": "nope", "partitions": [0]},
    ]
    answer = elect(services, ops, version, asked)
    assert codes(answer) == {
        ("orders", 0): E.NONE,
        ("orders", 1): E.ELECTION_NOT_NEEDED,
        ("orders", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("theirs", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    if version >= 1:
        assert answer["error_code"] == E.NONE
    assert store.snapshot().topic(acme, "orders").partitions[0].leader == preferred
    # Asked for everything: only the partitions that needed an election are answered.
    assert codes(elect(services, ops, version, None)) == {}


def test_all_partitions_answers_those_that_could_not_be_elected(world):
    store, _node, services, acme, _ = world
    for b in (2, 3):
        store.register_broker(b, "127.0.0.1", 9000 + b, None)
    store.add_topic(acme, "orders", partitions=2, replication_factor=3)
    topic = store.snapshot().topic(acme, "orders")
    preferred = topic.partitions[0].replicas[0]
    store.controlled_shutdown(preferred)  # moves every partition it leads, and out of ISRs
    ops = store.system_principal(acme)
    answer = elect(services, ops, 2, None)
    expected = {
        ("orders", p.index): E.PREFERRED_LEADER_NOT_AVAILABLE
        for p in topic.partitions
        if p.replicas[0] == preferred
    }
    assert expected and codes(answer) == expected


def test_unclean_election_elects_a_live_replica_only_without_a_leader_and_is_audited(world):
    store, _node, services, acme, _ = world
    store.register_broker(2, "127.0.0.1", 9002, None)
    store.add_topic(acme, "orders", partitions=1, replication_factor=2)
    topic = store.snapshot().topic(acme, "orders")
    p = topic.partitions[0]
    leader = p.leader
    (other,) = [b for b in p.replicas if b != leader]
    ops = store.system_principal(acme)
    asked = [{"topic": "orders", "partitions": [0]}]
    assert codes(elect(services, ops, 1, asked, 1)) == {("orders", 0): E.ELECTION_NOT_NEEDED}
    tid = str(topic.topic_id)
    assert (
        store.alter_partition(tid, 0, leader, p.leader_epoch, p.partition_epoch, [leader])[0]
        == E.NONE
    )
    store.deregister_broker(leader)
    # v0 has no election type: a preferred election, which cannot be held.
    assert codes(elect(services, ops, 0, asked, 1)) == {
        ("orders", 0): E.PREFERRED_LEADER_NOT_AVAILABLE
    }
    before = len(store.audit_events)
    assert codes(elect(services, ops, 2, asked, 1)) == {("orders", 0): E.NONE}
    after = store.snapshot().topic(acme, "orders").partitions[0]
    assert (after.leader, after.isr) == (other, (other,))
    [event] = store.audit_events[before:]
    assert event["action"] == "partition.unclean_election"
    store.deregister_broker(other)
    assert codes(elect(services, ops, 2, asked, 1)) == {
        ("orders", 0): E.ELIGIBLE_LEADERS_NOT_AVAILABLE
    }
    unknown_type = elect(services, ops, 2, asked, 7)
    assert unknown_type["error_code"] == E.INVALID_REQUEST


def wire(api, services, principal, body):
    """A v0 request and its answer as they go on the wire."""
    body = api.REQUEST.decode(api.REQUEST.encode(body, 0), 0)
    got = call(services, principal, api.KEY, 0, body)
    return api.RESPONSE.decode(api.RESPONSE.encode(got, 0), 0)


def alter(services, principal, topics):
    body = {
        "timeout_ms": 1000,
        "topics": [
            {
                "name": name,
                "partitions": [{"partition_index": i, "replicas": r} for i, r in parts.items()],
            }
            for name, parts in topics.items()
        ],
    }
    return wire(alter_partition_reassignments, services, principal, body)


def listed(services, principal, topics=None):
    body = {
        "timeout_ms": 1000,
        "topics": None
        if topics is None
        else [{"name": n, "partition_indexes": i} for n, i in topics.items()],
    }
    return wire(list_partition_reassignments, services, principal, body)


def test_a_tenant_may_neither_reassign_nor_list_reassignments(world):
    store, node, services, acme, _ = world
    store.register_broker(2, "127.0.0.1", 9002, None)
    store.add_topic(acme, "orders", partitions=1, replication_factor=1)
    app = principal_of(store, acme, (Operation.ALTER, ResourceType.CLUSTER))
    asyncio.run(node.refresh_metadata())
    answer = alter(services, app, {"orders": {0: [2]}})
    assert (answer["error_code"], answer["responses"]) == (E.CLUSTER_AUTHORIZATION_FAILED, [])
    assert store.list_reassignments(store.system_principal(acme), None) == {}
    answer = listed(services, app)
    assert (answer["error_code"], answer["topics"]) == (E.CLUSTER_AUTHORIZATION_FAILED, [])


def test_an_operator_reassigns_lists_and_the_move_completes(world):
    store, _node, services, acme, _ = world
    store.register_broker(2, "127.0.0.1", 9002, None)
    store.add_topic(acme, "orders", partitions=2, replication_factor=1)
    ops = store.system_principal(acme)
    topic = store.snapshot().topic(acme, "orders")
    (old,) = topic.partitions[0].replicas
    new = 3 - old
    answer = alter(services, ops, {"orders": {0: [new], 1: None}, "nope": {0: [1]}})
    assert answer["error_code"] == E.NONE
    assert {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in answer["responses"]
        for p in t["partitions"]
    } == {
        ("orders", 0): E.NONE,
        ("orders", 1): E.NO_REASSIGNMENT_IN_PROGRESS,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    expected = [
        {
            "name": "orders",
            "partitions": [
                {
                    "partition_index": 0,
                    "replicas": [new, old],
                    "adding_replicas": [new],
                    "removing_replicas": [old],
                }
            ],
        }
    ]
    assert listed(services, ops)["topics"] == expected
    assert listed(services, ops, {"orders": [0]})["topics"] == expected
    assert listed(services, ops, {"orders": [1]})["topics"] == []
    # The new replica catches up; the leader adds it to the ISR; the move completes.
    p = store.snapshot().topic(acme, "orders").partitions[0]
    tid = str(topic.topic_id)
    assert (
        store.alter_partition(tid, 0, old, p.leader_epoch, p.partition_epoch, [old, new])[0]
        == E.NONE
    )
    done = store.snapshot().topic(acme, "orders").partitions[0]
    assert (done.replicas, done.leader, done.isr) == ((new,), new, (new,))
    assert listed(services, ops)["topics"] == []
