"""Versions Kafka 3.9 served and Kafka 4 dropped (KIP-896), through the wire: each request
is encoded and decoded at its version, handled, and the answer encoded and decoded at that
version too (what an old client reads). The schemas themselves are cross-checked against
aiokafka's classes for those versions (``tests/protocol/oracle.py``)."""

from __future__ import annotations

import asyncio

import pytest

from data_plane.acl import Operation, ResourceType
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import (
    create_acls,
    create_topics,
    delete_acls,
    delete_topics,
    describe_acls,
    describe_configs,
    list_offsets,
    offset_commit,
    offset_fetch,
    offset_for_leader_epoch,
)
from tests.broker_unit.test_handlers import (  # noqa: F401  (world: a fixture)
    principal_of,
    produce_three,
    world,
)
from tests.broker_unit.test_latest_versions import wire_call

E = ErrorCode
LITERAL, PREFIXED = 3, 4


@pytest.fixture
def orders(world):  # noqa: F811
    """Topic orders (one partition) with offsets 0-2, and a principal allowed everything
    these tests do."""
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    app = principal_of(
        store,
        acme,
        (Operation.WRITE, ResourceType.TOPIC),
        (Operation.READ, ResourceType.TOPIC),
        (Operation.DESCRIBE, ResourceType.TOPIC),
        (Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC),
        (Operation.CREATE, ResourceType.TOPIC),
        (Operation.DELETE, ResourceType.TOPIC),
        (Operation.READ, ResourceType.GROUP),
        (Operation.DESCRIBE, ResourceType.GROUP),
        (Operation.ALTER, ResourceType.CLUSTER),
        (Operation.DESCRIBE, ResourceType.CLUSTER),
    )
    asyncio.run(node.refresh_metadata())
    produce_three(services, app, "orders")
    return store, node, services, app


def _old_style(services, app, timestamp, max_num):
    body = {
        "replica_id": -1,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 0, "timestamp": timestamp, "max_num_offsets": max_num}
                ],
            }
        ],
    }
    [topic] = wire_call(services, app, list_offsets, 0, body)["topics"]
    [part] = topic["partitions"]
    return part["error_code"], part["old_style_offsets"]


def test_list_offsets_v0_answers_old_style_offsets(orders):
    _, _, services, app = orders
    assert _old_style(services, app, -1, 1) == (E.NONE, [3])  # the high watermark
    assert _old_style(services, app, -2, 1) == (E.NONE, [0])  # the log start
    # Every offset the log offers before a time in the future, newest first: the log end,
    # then the first segment's start (Kafka's legacyFetchOffsetsBefore).
    assert _old_style(services, app, 2**62, 10) == (E.NONE, [3, 0])
    assert _old_style(services, app, 2**62, 1) == (E.NONE, [3])
    assert _old_style(services, app, 0, 10) == (E.NONE, [])  # nothing that old
    assert _old_style(services, app, -3, 1) == (E.UNSUPPORTED_VERSION, [])  # MAX_TIMESTAMP: v7


@pytest.mark.parametrize("commit_version", [0, 1, 2])
def test_offset_commit_v0_v1_and_offset_fetch_v0_share_the_groups_offsets(orders, commit_version):
    _, _, services, app = orders
    partition = {"partition_index": 0, "committed_offset": 2, "committed_metadata": "m"}
    if commit_version == 1:
        partition["commit_timestamp"] = -1
    body = {
        "group_id": "legacy",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": [{"name": "orders", "partitions": [partition]}],
    }
    answer = wire_call(services, app, offset_commit, commit_version, body)
    assert answer["topics"][0]["partitions"][0]["error_code"] == E.NONE
    for fetch_version in (0, 1, 5):
        request = {
            "group_id": "legacy",
            "topics": [{"name": "orders", "partition_indexes": [0]}],
        }
        [topic] = wire_call(services, app, offset_fetch, fetch_version, request)["topics"]
        [found] = topic["partitions"]
        assert (found["committed_offset"], found["metadata"], found["error_code"]) == (
            2,
            "m",
            E.NONE,
        )


def test_create_topics_v0_v1_and_delete_topics_v0(orders):
    _, node, services, app = orders

    def create(version, name, **extra):
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 5000,
            **extra,
        }
        [result] = wire_call(services, app, create_topics, version, body)["topics"]
        return result

    assert create(0, "legacy-a")["error_code"] == E.NONE
    assert create(0, "legacy-a")["error_code"] == E.TOPIC_ALREADY_EXISTS
    dry = create(1, "legacy-b", validate_only=True)
    assert dry["error_code"] == E.NONE and dry["error_message"] is None
    asyncio.run(node.refresh_metadata())
    names = {t.name for t in node.snapshot.topics[app.tenant_id].values()}
    assert "legacy-a" in names and "legacy-b" not in names  # validate_only created nothing
    body = {"topic_names": ["legacy-a", "missing"], "timeout_ms": 5000}
    answer = wire_call(services, app, delete_topics, 0, body)
    assert {r["name"]: r["error_code"] for r in answer["responses"]} == {
        "legacy-a": E.NONE,
        "missing": E.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_describe_configs_v0_marks_defaults(orders):
    store, node, services, app = orders
    store.alter_topic_configs(
        store.system_principal(app.tenant_id), "orders", {"retention.ms": "86400000"}, False
    )
    asyncio.run(node.refresh_metadata())
    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "orders",
                "configuration_keys": ["retention.ms", "cleanup.policy"],
            }
        ]
    }
    [result] = wire_call(services, app, describe_configs, 0, body)["results"]
    assert result["error_code"] == E.NONE
    found = {c["name"]: (c["value"], c["is_default"]) for c in result["configs"]}
    assert found == {"retention.ms": ("86400000", False), "cleanup.policy": ("delete", True)}


def test_acls_v0_are_literal(orders):
    store, node, services, app = orders
    store.add_service_account(app.tenant_id, "reader")
    creation = {
        "resource_type": 2,
        "resource_name": "orders",
        "principal": "User:reader",
        "host": "*",
        "operation": 3,  # READ
        "permission_type": 3,  # ALLOW
    }
    answer = wire_call(services, app, create_acls, 0, {"creations": [creation]})
    assert answer["results"][0]["error_code"] == E.NONE, answer
    # A prefixed binding (v1+) is not what a v0 filter (literal only) matches.
    prefixed = {**creation, "resource_name": "ord", "resource_pattern_type": PREFIXED}
    assert (
        wire_call(services, app, create_acls, 1, {"creations": [prefixed]})["results"][0][
            "error_code"
        ]
        == E.NONE
    )
    asyncio.run(node.refresh_metadata())
    wanted = {
        "resource_type_filter": 1,  # ANY
        "resource_name_filter": None,
        "principal_filter": "User:reader",
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    described = wire_call(services, app, describe_acls, 0, wanted)
    assert described["error_code"] == E.NONE
    assert [r["resource_name"] for r in described["resources"]] == ["orders"]
    both = wire_call(services, app, describe_acls, 1, {**wanted, "pattern_type_filter": 1})
    assert sorted(r["resource_name"] for r in both["resources"]) == ["ord", "orders"]
    deleted = wire_call(services, app, delete_acls, 0, {"filters": [wanted]})
    [result] = deleted["filter_results"]
    assert [m["resource_name"] for m in result["matching_acls"]] == ["orders"]
    asyncio.run(node.refresh_metadata())
    left = wire_call(services, app, describe_acls, 1, {**wanted, "pattern_type_filter": 1})
    assert [r["resource_name"] for r in left["resources"]] == ["ord"]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_offset_for_leader_epoch_v0_to_v2(orders, version):
    _, _, services, app = orders
    body = {
        "replica_id": -1,
        "topics": [
            {
                "topic": "orders",
                "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
            }
        ],
    }
    [topic] = wire_call(services, app, offset_for_leader_epoch, version, body)["topics"]
    [part] = topic["partitions"]
    assert (part["error_code"], part["end_offset"]) == (E.NONE, 3)
    # The epoch itself is on the wire from v1.
    assert part.get("leader_epoch", -1) == (0 if version >= 1 else -1)
