"""ConsumerGroupHeartbeat and ConsumerGroupDescribe through the handlers, every body
encoded and decoded with the message schemas: versions, authorization, tenant isolation,
and what a broker without the consumer protocol answers."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from data_plane.acl import Operation, ResourceType
from data_plane.broker.config import group_protocols
from data_plane.broker.connection import CONSUMER_PROTOCOL_APIS, Connection
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import consumer_group_describe as describe
from data_plane.protocol.messages import consumer_group_heartbeat as heartbeat
from tests.broker_unit.test_handlers import principal_of, world  # noqa: F401  (a fixture)
from tests.broker_unit.test_latest_versions import wire_call

E = ErrorCode
READ_GROUPS = (Operation.READ, ResourceType.GROUP)
DESCRIBE_GROUPS = (Operation.DESCRIBE, ResourceType.GROUP)
DESCRIBE_TOPICS = (Operation.DESCRIBE, ResourceType.TOPIC)


def join(group: str, member_id: str = "", topics: list[str] | None = None) -> dict[str, Any]:
    return {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": topics if topics is not None else ["orders"],
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
    }


@pytest.fixture
def tenants(world):  # noqa: F811
    store, node, services, acme, globex = world
    store.add_topic(acme, "orders", partitions=4)
    store.add_topic(acme, "secret", partitions=1)
    store.add_topic(globex, "orders", partitions=2)
    app = principal_of(store, acme, READ_GROUPS, DESCRIBE_GROUPS, DESCRIBE_TOPICS)
    other = principal_of(store, globex, READ_GROUPS, DESCRIBE_GROUPS, DESCRIBE_TOPICS)
    asyncio.run(node.refresh_metadata())
    return SimpleNamespace(
        store=store, node=node, services=services, acme=acme, app=app, other=other
    )


def test_v0_names_the_member_and_v1_wants_the_client_to(tenants):
    t = tenants
    first = wire_call(t.services, t.app, heartbeat, 0, join("g0"))
    assert first["error_code"] == E.NONE and first["member_id"]
    assert first["member_epoch"] == 1 and first["heartbeat_interval_ms"] > 0
    [assigned] = first["assignment"]["topic_partitions"]
    acme_orders = t.store.snapshot().topic(t.acme, "orders").topic_id
    assert assigned == {"topic_id": acme_orders, "partitions": [0, 1, 2, 3]}
    refused = wire_call(t.services, t.app, heartbeat, 1, join("g1"))
    assert (refused["error_code"], refused["error_message"]) == (
        E.INVALID_REQUEST,
        "MemberId can't be empty.",
    )
    mine = str(uuid.uuid4())
    ok = wire_call(t.services, t.app, heartbeat, 1, join("g1", mine))
    assert (ok["error_code"], ok["member_id"]) == (E.NONE, mine)


def test_a_regex_sees_only_the_tenants_topics_it_may_describe(tenants):
    t = tenants
    body = join("re", str(uuid.uuid4()), topics=[]) | {"subscribed_topic_regex": ".*"}
    answer = wire_call(t.services, t.app, heartbeat, 1, body)
    ids = {tp["topic_id"] for tp in answer["assignment"]["topic_partitions"]}
    snapshot = t.store.snapshot()
    assert ids == {
        snapshot.topic(t.acme, "orders").topic_id,
        snapshot.topic(t.acme, "secret").topic_id,
    }
    bad = wire_call(t.services, t.app, heartbeat, 1, body | {"subscribed_topic_regex": "("})
    assert bad["error_code"] == E.INVALID_REGULAR_EXPRESSION


def test_groups_are_per_tenant_and_need_acls(tenants):
    t = tenants
    member = str(uuid.uuid4())
    assert wire_call(t.services, t.app, heartbeat, 1, join("shared", member))["error_code"] == 0
    mine = wire_call(
        t.services,
        t.app,
        describe,
        1,
        {"group_ids": ["shared"], "include_authorized_operations": True},
    )
    [group] = mine["groups"]
    assert (group["error_code"], group["group_state"], group["assignor_name"]) == (
        E.NONE,
        "Stable",
        "uniform",
    )
    [m] = group["members"]
    assert (m["member_id"], m["member_epoch"], m["member_type"]) == (member, 1, 1)
    assert m["assignment"]["topic_partitions"][0]["topic_name"] == "orders"
    assert group["authorized_operations"] > 0
    # Another tenant's group of the same name does not exist for this one.
    theirs = wire_call(
        t.services,
        t.other,
        describe,
        1,
        {"group_ids": ["shared"], "include_authorized_operations": False},
    )
    assert theirs["groups"][0]["error_code"] == E.GROUP_ID_NOT_FOUND
    # Without Read on the group, no heartbeat; without Describe, no description.
    nobody = principal_of(t.store, t.acme, name="nobody")
    assert wire_call(t.services, nobody, heartbeat, 1, join("shared", "x"))["error_code"] == (
        E.GROUP_AUTHORIZATION_FAILED
    )
    denied = wire_call(
        t.services,
        nobody,
        describe,
        0,
        {"group_ids": ["shared"], "include_authorized_operations": False},
    )
    assert denied["groups"][0]["error_code"] == E.GROUP_AUTHORIZATION_FAILED


def test_a_topic_named_without_describe_is_refused(tenants):
    t = tenants
    reader = principal_of(t.store, t.acme, READ_GROUPS, name="reader")
    asyncio.run(t.node.refresh_metadata())
    answer = wire_call(t.services, reader, heartbeat, 1, join("g", str(uuid.uuid4())))
    assert answer["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
    assert "orders" in answer["error_message"]


def test_without_the_consumer_protocol_both_apis_are_refused_and_not_advertised(tenants):
    t = tenants
    off = dataclasses.replace(t.services, consumer_protocol=False)
    answer = wire_call(off, t.app, heartbeat, 1, join("g", str(uuid.uuid4())))
    assert answer["error_code"] == E.UNSUPPORTED_VERSION
    described = wire_call(
        off, t.app, describe, 0, {"group_ids": ["g"], "include_authorized_operations": False}
    )
    assert described["groups"][0]["error_code"] == E.UNSUPPORTED_VERSION

    def advertised(services: Any) -> set[int]:
        connection = Connection.__new__(Connection)
        connection.broker = SimpleNamespace(services=services)
        return {k["api_key"] for k in connection._api_versions(2)["api_keys"]}

    assert not advertised(off) & CONSUMER_PROTOCOL_APIS
    assert advertised(t.services) >= CONSUMER_PROTOCOL_APIS


def test_group_protocols_setting():
    assert group_protocols(["consumer"]) == {"classic", "consumer"}
    assert group_protocols([" Classic "]) == {"classic"}
    with pytest.raises(ValueError, match="unknown group protocol"):
        group_protocols(["classic", "share"])
