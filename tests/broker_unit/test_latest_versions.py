"""Metadata 13, ListOffsets 8-10, DescribeCluster 2 and FindCoordinator 5-6, through the
wire: each request is encoded and decoded at its version, handled, and the answer encoded
and decoded at that version too (what a client would read)."""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import Any

import pytest

from data_plane.acl import Operation, ResourceType
from data_plane.broker.handlers import DISPATCH
from data_plane.broker.handlers.context import RequestContext, Services
from data_plane.metadata.model import Principal
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import (
    delete_records,
    describe_cluster,
    find_coordinator,
    list_offsets,
    metadata,
)
from data_plane.protocol.messages import produce as produce_api
from tests.broker_unit.test_handlers import (  # noqa: F401  (world: a fixture)
    call,
    principal_of,
    produce_three,
    world,
)

E = ErrorCode


def wire_call(
    services: Services, principal: Any, api: ModuleType, version: int, body: dict[str, Any]
) -> dict[str, Any]:
    request = api.REQUEST.decode(api.REQUEST.encode(body, version), version)
    ctx = RequestContext(services, principal, "127.0.0.1", version, "unit-test", False)
    answer = asyncio.run(DISPATCH[api.KEY](ctx, request))
    return api.RESPONSE.decode(api.RESPONSE.encode(answer, version), version)


# --- Metadata ---------------------------------------------------------------------------


def _metadata_request(topics: list[str] | None) -> dict[str, Any]:
    return {
        "topics": None if topics is None else [{"name": n} for n in topics],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_empty_topic_list_means_all_only_in_v0(world, version):  # noqa: F811
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    store.add_topic(acme, "payments")
    viewer = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    empty = wire_call(services, viewer, metadata, version, _metadata_request([]))
    names = sorted(t["name"] for t in empty["topics"])
    # Kafka's MetadataRequest.json: in v0 an empty array asks for all topics; from v1 it
    # asks for none, and null (which v0 cannot encode) asks for all.
    assert names == (["orders", "payments"] if version == 0 else [])
    if version >= 1:
        every = wire_call(services, viewer, metadata, version, _metadata_request(None))
        assert sorted(t["name"] for t in every["topics"]) == ["orders", "payments"]
    named = wire_call(services, viewer, metadata, version, _metadata_request(["orders"]))
    assert [t["name"] for t in named["topics"]] == ["orders"]


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_top_level_error_code_from_v13(world, version):  # noqa: F811
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    viewer = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    answer = wire_call(services, viewer, metadata, version, _metadata_request(["orders"]))
    if version >= 13:
        assert answer["error_code"] == E.NONE
    else:
        assert "error_code" not in answer
    assert answer["topics"][0]["error_code"] == E.NONE


# --- ListOffsets ------------------------------------------------------------------------


def _list_offsets(services, principal, version, timestamp):
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
        "timeout_ms": 5000,
    }
    [topic] = wire_call(services, principal, list_offsets, version, body)["topics"]
    [part] = topic["partitions"]
    return part["error_code"], part["offset"], part["timestamp"], part.get("leader_epoch", -1)


@pytest.fixture
def three_records_from_one(world):  # noqa: F811
    """Topic orders with offsets 0-2 written and records before 1 deleted (log start 1)."""
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    app = principal_of(
        store,
        acme,
        (Operation.WRITE, ResourceType.TOPIC),
        (Operation.DESCRIBE, ResourceType.TOPIC),
        (Operation.DELETE, ResourceType.TOPIC),
    )
    asyncio.run(node.refresh_metadata())
    produce_three(services, app, "orders")
    deleted = call(
        services,
        app,
        delete_records.KEY,
        2,
        {
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout_ms": 1000,
        },
    )
    assert deleted["topics"][0]["partitions"][0]["low_watermark"] == 1
    return services, app


@pytest.mark.parametrize("version", range(1, 11))
def test_list_offsets_special_timestamps_at_each_version(three_records_from_one, version):
    services, app = three_records_from_one
    ask = lambda ts: _list_offsets(services, app, version, ts)  # noqa: E731
    assert ask(-1)[:3] == (E.NONE, 3, -1)  # LATEST: the high watermark
    assert ask(-2)[:3] == (E.NONE, 1, -1)  # EARLIEST: the log start offset
    # MAX_TIMESTAMP from v7 (KIP-734), EARLIEST_LOCAL from v8 (KIP-405: without tiered
    # storage the local log start is the log start), LATEST_TIERED from v9 (KIP-1005:
    # nothing is tiered, so -1), as Kafka answers a topic without remote storage; before
    # its version each is UNSUPPORTED_VERSION, as is any other negative timestamp.
    if version >= 7:
        assert ask(-3)[0] == E.NONE and ask(-3)[1] >= 1
    else:
        assert ask(-3)[:2] == (E.UNSUPPORTED_VERSION, -1)
    if version >= 8:
        assert ask(-4)[:3] == (E.NONE, 1, -1)
    else:
        assert ask(-4)[:2] == (E.UNSUPPORTED_VERSION, -1)
    if version >= 9:
        assert ask(-5) == (E.NONE, -1, -1, -1)
    else:
        assert ask(-5)[:2] == (E.UNSUPPORTED_VERSION, -1)
    assert ask(-6)[:2] == (E.UNSUPPORTED_VERSION, -1)
    # A real timestamp: the first record at or after it (all three have timestamp >= 0).
    assert ask(0)[:2] == (E.NONE, 1)


def test_list_offsets_v10_carries_timeout_ms():
    raw = list_offsets.REQUEST.encode(
        {"replica_id": -1, "isolation_level": 0, "topics": [], "timeout_ms": 1234}, 10
    )
    assert list_offsets.REQUEST.decode(raw, 10)["timeout_ms"] == 1234
    assert "timeout_ms" not in list_offsets.REQUEST.decode(raw[:-5] + raw[-1:], 9)


# --- DescribeCluster --------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 3))
@pytest.mark.parametrize("include_fenced", [False, True])
def test_describe_cluster_lists_fenced_brokers_when_asked(world, version, include_fenced):  # noqa: F811
    store, node, services, acme, _ = world
    store.register_broker(2, "127.0.0.2", 9093, "rack-b")
    store.register_broker(3, "127.0.0.3", 9094, None)
    store.deregister_broker(3)  # stopped: still registered, not live
    viewer = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.CLUSTER))
    asyncio.run(node.refresh_metadata())
    body = {
        "include_cluster_authorized_operations": False,
        "endpoint_type": 1,
        "include_fenced_brokers": include_fenced,
    }
    answer = wire_call(services, viewer, describe_cluster, version, body)
    assert answer["error_code"] == E.NONE
    brokers = {b["broker_id"]: b for b in answer["brokers"]}
    assert (brokers[2]["host"], brokers[2]["port"], brokers[2]["rack"]) == (
        "127.0.0.2",
        9093,
        "rack-b",
    )
    # v2 (KIP-1073): the stopped broker is listed, fenced, only when asked for.
    if version >= 2 and include_fenced:
        assert sorted(brokers) == [1, 2, 3]
        assert (brokers[3]["host"], brokers[3]["port"], brokers[3]["is_fenced"]) == (
            "127.0.0.3",
            9094,
            True,
        )
    else:
        assert sorted(brokers) == [1, 2]
    for b in brokers.values():
        assert ("is_fenced" in b) == (version >= 2)
    for broker_id in (1, 2):
        assert brokers[broker_id].get("is_fenced", False) is False


# --- FindCoordinator --------------------------------------------------------------------


def _find(services, principal, version, key_type, key="g1"):
    body = {"key": key, "key_type": key_type, "coordinator_keys": [key]}
    answer = wire_call(services, principal, find_coordinator, version, body)
    if version >= 4:
        [one] = answer["coordinators"]
        assert one["key"] == key
        return one
    return answer


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_groups_and_transactions_at_every_version(world, version):  # noqa: F811
    store, node, services, acme, _ = world
    app = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.GROUP))
    asyncio.run(node.refresh_metadata())
    group = _find(services, app, version, 0)
    assert (group["error_code"], group["node_id"], group["port"]) == (E.NONE, 1, 9092)
    if version >= 1:
        # Describe on the transactional id is needed to find its coordinator.
        txn = _find(services, app, version, 1)
        assert txn["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        producer = principal_of(
            store, acme, (Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID), name="producer"
        )
        asyncio.run(node.refresh_metadata())
        txn = _find(services, producer, version, 1)
        assert (txn["error_code"], txn["node_id"], txn["port"]) == (E.NONE, 1, 9092)
        # An unknown key type is an invalid request, as in Kafka.
        assert _find(services, app, version, 3)["error_code"] == E.INVALID_REQUEST


@pytest.mark.parametrize("version", range(1, 7))
def test_find_coordinator_share_key_type(world, version):  # noqa: F811
    store, node, services, acme, _ = world
    app = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.GROUP))
    asyncio.run(node.refresh_metadata())
    share = _find(services, app, version, 2, key="g1:AAAAAAAAAAAAAAAAAAAAAA:0")
    # Key type 2 (KIP-932) is refused below v6; from v6 Kafka first checks ClusterAction
    # (a tenant lacks it), then, with no share coordinator (no share groups here),
    # answers INVALID_REQUEST.
    expected = E.CLUSTER_AUTHORIZATION_FAILED if version >= 6 else E.INVALID_REQUEST
    assert (share["error_code"], share["node_id"], share["port"]) == (expected, -1, -1)
    # Another broker holds ClusterAction: it hears that there is no share coordinator.
    broker = Principal(0, "", "User:broker-2", "broker-2", internal=True, broker=True)
    assert _find(services, broker, version, 2)["error_code"] == E.INVALID_REQUEST


def test_list_offsets_max_timestamp_and_leader_epochs(world):  # noqa: F811
    """MAX_TIMESTAMP finds the first record holding the largest timestamp (not the first
    record of the log), and from v4 each answer carries Kafka's leader epoch: the
    leader's current epoch for LATEST, the first epoch for EARLIEST, the found batch's
    epoch for MAX_TIMESTAMP and timestamp lookups."""
    from data_plane.records import Record, RecordBatch

    store, node, services, acme, _ = world
    topic = store.add_topic(acme, "orders")
    app = principal_of(
        store, acme, (Operation.WRITE, ResourceType.TOPIC), (Operation.DESCRIBE, ResourceType.TOPIC)
    )
    asyncio.run(node.refresh_metadata())
    for stamps in ([1_000, 5_000, 3_000], [5_000, 2_000]):
        records = tuple(
            Record(offset=i, timestamp=ts, key=None, value=b"v") for i, ts in enumerate(stamps)
        )
        answer = call(
            services,
            app,
            produce_api.KEY,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 1000,
                "topic_data": [
                    {
                        "name": "orders",
                        "partition_data": [
                            {
                                "index": 0,
                                "records": RecordBatch(base_offset=0, records=records).encode(),
                            }
                        ],
                    }
                ],
            },
        )
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == E.NONE
    info = node.snapshot.topics[topic.tenant_id]["orders"].partitions[0]
    epoch = info.leader_epoch
    for version in (4, 7, 10):
        ask = lambda ts: _list_offsets(services, app, version, ts)  # noqa: E731, B023
        assert ask(-1) == (E.NONE, 5, -1, epoch)  # LATEST
        assert ask(-2) == (E.NONE, 0, -1, epoch)  # EARLIEST
        if version >= 7:  # MAX_TIMESTAMP: offset 1, not 0 (the first) or 3 (a later tie)
            assert ask(-3) == (E.NONE, 1, 5_000, epoch)
        assert ask(4_000) == (E.NONE, 1, 5_000, epoch)
        assert ask(2_500) == (E.NONE, 1, 5_000, epoch)  # first at or after, in offset order
        assert ask(9_000)[:2] == (E.NONE, -1)
    assert _list_offsets(services, app, 3, -1)[3] == -1  # no leader epoch before v4
