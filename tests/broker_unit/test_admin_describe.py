"""DescribeGroups 5-6, DescribeTopicPartitions 0 and DescribeProducers 0, through the
wire: each request is encoded and decoded at its version, handled, and the answer encoded
and decoded at that version too."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest

from data_plane.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from data_plane.broker.handlers import DISPATCH
from data_plane.broker.handlers.context import RequestContext
from data_plane.groups.coordinator import CoordinatorConfig, GroupCoordinator
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import (
    describe_groups,
    describe_producers,
    describe_topic_partitions,
    join_group,
    produce,
)
from data_plane.records.batch import Record, RecordBatch
from tests.broker_unit.test_handlers import ME, principal_of, world  # noqa: F401  (a fixture)
from tests.broker_unit.test_latest_versions import wire_call

E = ErrorCode


# --- DescribeGroups ---------------------------------------------------------------------


def _describe(services: Any, principal: Any, version: int, *groups: str) -> list[dict]:
    body = {"groups": list(groups), "include_authorized_operations": False}
    return wire_call(services, principal, describe_groups, version, body)["groups"]


@pytest.mark.parametrize("version", [5, 6])
def test_describe_groups_unknown_group_not_found_from_v6(world, version):  # noqa: F811
    store, node, services, acme, _ = world
    app = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.GROUP))
    asyncio.run(node.refresh_metadata())
    [group] = _describe(services, app, version, "nobody")
    assert group["group_id"] == "nobody"
    assert group["group_state"] == "Dead" and group["members"] == []
    # KIP-1043: before v6 an unknown group is an empty Dead group with no error; from v6
    # Kafka's coordinator answers GROUP_ID_NOT_FOUND with "Group <id> not found.".
    if version >= 6:
        assert group["error_code"] == E.GROUP_ID_NOT_FOUND
        assert group["error_message"] == "Group nobody not found."
    else:
        assert group["error_code"] == E.NONE
        assert "error_message" not in group


@pytest.mark.parametrize("version", [5, 6])
def test_describe_groups_refused_group_carries_a_message_from_v6(world, version):  # noqa: F811
    store, node, services, acme, _ = world
    nobody = principal_of(store, acme)
    asyncio.run(node.refresh_metadata())
    [group] = _describe(services, nobody, version, "g1")
    assert group["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    if version >= 6:
        assert group["error_message"] == "Group authorization failed."
    else:
        assert "error_message" not in group


@pytest.mark.parametrize("version", [5, 6])
def test_describe_groups_existing_group_has_no_error(world, version):  # noqa: F811
    store, node, services, acme, globex = world
    services = dataclasses.replace(
        services,
        groups=GroupCoordinator(store, _direct, CoordinatorConfig(initial_rebalance_delay_ms=0)),
    )
    app = principal_of(
        store, acme, (Operation.READ, ResourceType.GROUP), (Operation.DESCRIBE, ResourceType.GROUP)
    )
    other = principal_of(store, globex, (Operation.DESCRIBE, ResourceType.GROUP))
    asyncio.run(node.refresh_metadata())
    join = {
        "group_id": "g1",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00"}],
    }
    ctx = RequestContext(services, app, "127.0.0.1", 3, "unit-test", False)
    joined = asyncio.run(DISPATCH[join_group.KEY](ctx, join))
    assert joined["error_code"] == E.NONE
    [group] = _describe(services, app, version, "g1")
    assert group["error_code"] == E.NONE
    assert group["protocol_type"] == "consumer"
    assert [m["member_id"] for m in group["members"]] == [joined["member_id"]]
    if version >= 6:
        assert group["error_message"] is None
    # Another tenant's describe of the same id finds nothing.
    [theirs] = _describe(services, other, version, "g1")
    assert theirs["members"] == []
    assert theirs["error_code"] == (E.GROUP_ID_NOT_FOUND if version >= 6 else E.NONE)


async def _direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


# --- DescribeTopicPartitions ------------------------------------------------------------


def _dtp(
    services: Any,
    principal: Any,
    names: list[str],
    limit: int = 2000,
    cursor: tuple[str, int] | None = None,
) -> dict[str, Any]:
    body = {
        "topics": [{"name": n} for n in names],
        "response_partition_limit": limit,
        "cursor": None
        if cursor is None
        else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }
    return wire_call(services, principal, describe_topic_partitions, 0, body)


def _pages(services: Any, principal: Any, names: list[str], limit: int) -> list[list[str]]:
    """Every page until next_cursor is null, each as ["topic-partition", ...]."""
    pages, cursor = [], None
    for _ in range(20):
        answer = _dtp(services, principal, names, limit, cursor)
        pages.append(
            [
                f"{t['name']}-{p['partition_index']}"
                for t in answer["topics"]
                for p in t["partitions"]
            ]
        )
        nxt = answer["next_cursor"]
        if nxt is None:
            return pages
        cursor = (nxt["topic_name"], nxt["partition_index"])
    raise AssertionError("no last page")


@pytest.fixture
def three_topics(world):  # noqa: F811
    store, node, services, acme, globex = world
    store.add_topic(acme, "b-orders", 3)
    store.add_topic(acme, "a-clicks", 2)
    store.add_topic(acme, "c-secret", 1)
    store.add_topic(globex, "g-theirs", 2)
    viewer = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    return store, node, services, acme, globex, viewer


def test_describe_topic_partitions_all_topics_in_one_page(three_topics):
    _, node, services, acme, _, viewer = three_topics
    answer = _dtp(services, viewer, [])
    assert answer["next_cursor"] is None
    assert [t["name"] for t in answer["topics"]] == ["a-clicks", "b-orders", "c-secret"]
    orders = answer["topics"][1]
    snap = node.snapshot.tenant_topics(acme)["b-orders"]
    assert orders["error_code"] == E.NONE and orders["topic_id"] == snap.topic_id
    assert orders["is_internal"] is False
    for p, info in zip(orders["partitions"], snap.partitions, strict=True):
        assert p["error_code"] == E.NONE
        assert p["partition_index"] == info.index
        assert (p["leader_id"], p["leader_epoch"]) == (info.leader, info.leader_epoch)
        assert p["replica_nodes"] == list(info.replicas) == [1]
        assert p["isr_nodes"] == list(info.isr)
        assert p["eligible_leader_replicas"] is None and p["last_known_elr"] is None
        assert p["offline_replicas"] == []
    # Describe is granted and Read not: the bit field says so (bit 8 Describe, 3 Read).
    ops = orders["topic_authorized_operations"]
    assert ops & (1 << 8) and not ops & (1 << 3)


def test_describe_topic_partitions_pages_across_and_within_topics(three_topics):
    _, _, services, _, _, viewer = three_topics
    # 6 partitions, 4 a page: a-clicks 0-1 and b-orders 0-1, then b-orders 2 and c-secret 0.
    assert _pages(services, viewer, [], 4) == [
        ["a-clicks-0", "a-clicks-1", "b-orders-0", "b-orders-1"],
        ["b-orders-2", "c-secret-0"],
    ]
    # A page that ends exactly at a topic's end points the cursor at the next topic's start.
    first = _dtp(services, viewer, [], 2)
    assert first["next_cursor"] == {"topic_name": "b-orders", "partition_index": 0}
    assert _pages(services, viewer, ["c-secret", "b-orders"], 1) == [
        ["b-orders-0"],
        ["b-orders-1"],
        ["b-orders-2"],
        ["c-secret-0"],
    ]
    # A cursor mid-topic starts there.
    answer = _dtp(services, viewer, ["b-orders", "c-secret"], 10, ("b-orders", 2))
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in answer["topics"]
    ] == [
        ("b-orders", [2]),
        ("c-secret", [0]),
    ]


def test_describe_topic_partitions_a_cursor_not_among_the_named_topics_is_refused(three_topics):
    _, _, services, _, _, viewer = three_topics
    answer = _dtp(services, viewer, ["b-orders"], 10, ("a-clicks", 0))
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
        ("b-orders", E.INVALID_REQUEST)
    ]
    answer = _dtp(services, viewer, ["b-orders"], 10, ("b-orders", -1))
    assert answer["topics"][0]["error_code"] == E.INVALID_REQUEST


def test_describe_topic_partitions_unknown_refused_and_other_tenants(three_topics):
    store, node, services, acme, globex, _ = three_topics
    # Describe only on b-orders.
    key_id, _ = store.add_key(acme, "narrow")
    store.add_acl(
        acme,
        AclBinding(
            principal="User:narrow",
            resource_type=ResourceType.TOPIC,
            pattern_type=PatternType.LITERAL,
            resource_name="b-orders",
            operation=Operation.DESCRIBE,
            permission=Permission.ALLOW,
            host="*",
        ),
    )
    narrow = store.principal_for_key(key_id)
    asyncio.run(node.refresh_metadata())
    answer = _dtp(services, narrow, ["nope", "g-theirs", "b-orders", "a-clicks"])
    got = {t["name"]: (t["error_code"], len(t["partitions"])) for t in answer["topics"]}
    # Without Describe a name is refused whether or not it exists (Kafka does not
    # disclose existence); another tenant's topic is, to this tenant, like any other name.
    assert got == {
        "b-orders": (E.NONE, 3),
        "a-clicks": (E.TOPIC_AUTHORIZATION_FAILED, 0),
        "g-theirs": (E.TOPIC_AUTHORIZATION_FAILED, 0),
        "nope": (E.TOPIC_AUTHORIZATION_FAILED, 0),
    }
    # All topics: only what the caller may describe, never refusals.
    assert [t["name"] for t in _dtp(services, narrow, [])["topics"]] == ["b-orders"]
    # With Describe on everything, another tenant's name is unknown, as is a made-up one.
    viewer = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    answer = _dtp(services, viewer, ["g-theirs", "nope"])
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
        ("g-theirs", E.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", E.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert all(t["topic_id"] == uuid.UUID(int=0) for t in answer["topics"])
    # Their authorized operations are filled in all the same (Describe: bit 8), as Kafka
    # does for every topic it looked up; refused names keep the "not asked" value.
    assert all(t["topic_authorized_operations"] & (1 << 8) for t in answer["topics"])
    refused = _dtp(services, narrow, ["a-clicks"])["topics"][0]
    assert refused["topic_authorized_operations"] == -(2**31)
    bad = _dtp(services, viewer, ["bad name!"])["topics"][0]
    assert bad["error_code"] == E.INVALID_TOPIC_EXCEPTION
    # And globex's own view holds only its topic.
    theirs = principal_of(store, globex, (Operation.DESCRIBE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    assert [t["name"] for t in _dtp(services, theirs, [])["topics"]] == ["g-theirs"]


# --- DescribeProducers ------------------------------------------------------------------


def _produce_idempotent(
    services: Any, principal: Any, topic: str, index: int, pid: int, epoch: int, seq: int, n: int
) -> None:
    records = tuple(
        Record(offset=i, timestamp=1_700_000_000_000 + seq + i, key=None, value=b"v")
        for i in range(n)
    )
    raw = RecordBatch(
        base_offset=0, records=records, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    ).encode()
    answer = wire_call(
        services,
        principal,
        produce,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": raw}]}],
        },
    )
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == E.NONE


def _producers(services: Any, principal: Any, topics: dict[str, list[int]]) -> dict:
    body = {"topics": [{"name": n, "partition_indexes": p} for n, p in topics.items()]}
    answer = wire_call(services, principal, describe_producers, 0, body)
    return {(t["name"], p["partition_index"]): p for t in answer["topics"] for p in t["partitions"]}


def test_describe_producers_reports_each_idempotent_producer(world):  # noqa: F811
    store, node, services, acme, globex = world
    store.register_broker(2, "10.0.0.2", 9192, None)
    store.add_topic(acme, "orders", partitions=4, replication_factor=1)
    store.add_topic(globex, "theirs", partitions=1)
    app = principal_of(
        store,
        acme,
        (Operation.WRITE, ResourceType.TOPIC),
        (Operation.READ, ResourceType.TOPIC),
        (Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER),
    )
    asyncio.run(node.refresh_metadata())
    info = node.snapshot.topic(acme, "orders")
    mine = next(p.index for p in info.partitions if p.leader == ME)
    theirs = next(p.index for p in info.partitions if p.leader == 2)
    _produce_idempotent(services, app, "orders", mine, 1000, 3, 0, 5)
    _produce_idempotent(services, app, "orders", mine, 1001, 0, 0, 2)
    _produce_idempotent(services, app, "orders", mine, 1001, 0, 2, 3)
    got = _producers(services, app, {"orders": [mine, theirs, 99], "nope": [0], "theirs": [0]})
    here = got[("orders", mine)]
    assert (here["error_code"], here["error_message"]) == (E.NONE, None)
    assert [
        (p["producer_id"], p["producer_epoch"], p["last_sequence"])
        for p in here["active_producers"]
    ] == [(1000, 3, 4), (1001, 0, 4)]
    for p in here["active_producers"]:
        assert p["coordinator_epoch"] == -1 and p["current_txn_start_offset"] == -1
    # The last timestamp is the newest batch's max timestamp.
    assert [p["last_timestamp"] for p in here["active_producers"]] == [
        1_700_000_000_004,
        1_700_000_000_004,
    ]
    assert got[("orders", theirs)]["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    assert got[("orders", 99)]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    # Another tenant's topic is as unknown as a made-up name.
    for key in (("nope", 0), ("theirs", 0)):
        assert got[key]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
        assert got[key]["error_message"] == "This server does not host this topic-partition."
        assert got[key]["active_producers"] == []


def test_describe_producers_needs_read(world):  # noqa: F811
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    writer = principal_of(
        store,
        acme,
        (Operation.WRITE, ResourceType.TOPIC),
        (Operation.DESCRIBE, ResourceType.TOPIC),
        (Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER),
    )
    asyncio.run(node.refresh_metadata())
    _produce_idempotent(services, writer, "orders", 0, 7, 0, 0, 1)
    got = _producers(services, writer, {"orders": [0], "nope": [0]})
    for key in (("orders", 0), ("nope", 0)):
        assert got[key]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
        assert got[key]["error_message"] == "Topic authorization failed."
        assert got[key]["active_producers"] == []
    bad = _producers(services, writer, {"bad name!": [0]})[("bad name!", 0)]
    assert bad["error_code"] == E.INVALID_TOPIC_EXCEPTION and bad["error_message"]
