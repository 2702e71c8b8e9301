"""The group protocol's errors over real sockets: nothing a member sends corrupts a group."""

from __future__ import annotations

import uuid

import pytest

from data_plane.groups.consumer_protocol import encode_assignment, encode_subscription
from data_plane.protocol.errors import ErrorCode as E
from tests.broker.test_clients import confluent_create
from tests.broker.test_wire import RawClient

pytestmark = pytest.mark.django_db

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN, HEARTBEAT, SYNC, DESCRIBE = 11, 12, 14, 15


def client(kafka, key):
    c = RawClient(kafka)
    c.login(key)
    return c


def join(c, group, member_id="", protocols=None, protocol_type="consumer", instance=None):
    return c.request(
        JOIN,
        5,
        {
            "group_id": group,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": protocol_type,
            "protocols": protocols
            or [{"name": "range", "metadata": encode_subscription(["orders"])}],
        },
    )


def join_and_sync(c, group, instance=None):
    first = join(c, group, instance=instance)
    if first["error_code"] == E.MEMBER_ID_REQUIRED:
        first = join(c, group, first["member_id"], instance=instance)
    assert first["error_code"] == E.NONE, first
    assignment = encode_assignment({"orders": [0, 1]})
    synced = c.request(
        SYNC,
        3,
        {
            "group_id": group,
            "generation_id": first["generation_id"],
            "member_id": first["member_id"],
            "group_instance_id": instance,
            "assignments": [{"member_id": first["member_id"], "assignment": assignment}],
        },
    )
    assert synced["error_code"] == E.NONE and bytes(synced["assignment"]) == assignment
    return first


def heartbeat(c, group, generation, member_id, instance=None):
    body = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": instance,
    }
    return c.request(HEARTBEAT, 3, body)["error_code"]


def test_member_id_required_then_stable_then_stale_requests_are_refused(kafka):
    group = f"raw-{uuid.uuid4().hex[:8]}"
    c = client(kafka, kafka.admin_a)
    first = join(c, group)
    assert first["error_code"] == E.MEMBER_ID_REQUIRED and first["member_id"]
    joined = join_and_sync(c, group)
    gen, me = joined["generation_id"], joined["member_id"]
    assert joined["leader"] == me and [m["member_id"] for m in joined["members"]] == [me]
    assert heartbeat(c, group, gen, me) == E.NONE
    assert heartbeat(c, group, gen - 1, me) == E.ILLEGAL_GENERATION
    assert heartbeat(c, group, gen, "someone-else") == E.UNKNOWN_MEMBER_ID
    # A member of another protocol type, or with no protocol in common, cannot join.
    assert join(c, group, protocol_type="connect")["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    other = [{"name": "roundrobin", "metadata": b""}]
    assert join(c, group, protocols=other)["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    # A commit from a stale generation is refused and stores nothing.
    topic = f"t-{group}"
    confluent_create(kafka, kafka.admin_a, topic, partitions=1)
    commit = {
        "group_id": group,
        "generation_id_or_member_epoch": gen - 1,
        "member_id": me,
        "group_instance_id": None,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": None}
                ],
            }
            for name in (topic, "nope-topic")
        ],
    }
    answer = c.request(OFFSET_COMMIT, 7, commit)["topics"]
    codes = {t["name"]: t["partitions"][0]["error_code"] for t in answer}
    assert codes == {topic: E.ILLEGAL_GENERATION, "nope-topic": E.UNKNOWN_TOPIC_OR_PARTITION}
    fetched = c.request(
        OFFSET_FETCH, 7, {"group_id": group, "topics": None, "require_stable": False}
    )
    assert fetched["error_code"] == E.NONE and fetched["topics"] == []
    # After all that, the group is as it was.
    assert heartbeat(c, group, gen, me) == E.NONE
    described = c.request(DESCRIBE, 4, {"groups": [group], "include_authorized_operations": False})
    g = described["groups"][0]
    assert (g["group_state"], g["protocol_data"]) == ("Stable", "range")
    assert [m["client_id"] for m in g["members"]] == ["raw-test"]
    c.close()


def test_oversized_member_metadata_is_refused(kafka):
    c = client(kafka, kafka.admin_a)
    big = [{"name": "range", "metadata": b"x" * (2 * 2**20)}]
    answer = join(c, f"big-{uuid.uuid4().hex[:8]}", member_id="", protocols=big)
    assert answer["error_code"] == E.INVALID_REQUEST
    c.close()


def test_static_member_restart_and_fencing(kafka):
    group = f"static-{uuid.uuid4().hex[:8]}"
    c = client(kafka, kafka.admin_a)
    first = join_and_sync(c, group, instance="instance-1")
    # The same instance restarts (empty member id): it takes over without a new generation.
    again = join(c, group, instance="instance-1")
    assert again["error_code"] == E.NONE
    assert again["generation_id"] == first["generation_id"]
    assert again["member_id"] != first["member_id"]
    # The old incarnation is fenced.
    old = heartbeat(c, group, first["generation_id"], first["member_id"], "instance-1")
    assert old == E.FENCED_INSTANCE_ID
    new = heartbeat(c, group, again["generation_id"], again["member_id"], "instance-1")
    assert new == E.NONE
    c.close()


def test_groups_are_per_tenant_and_acl_checked(kafka):
    group = f"shared-name-{uuid.uuid4().hex[:8]}"
    a = client(kafka, kafka.admin_a)
    b = client(kafka, kafka.admin_b)
    ja = join_and_sync(a, group)
    # Tenant B's group of the same name is a different group: its own generation 1.
    jb = join_and_sync(b, group)
    assert jb["generation_id"] == 1 and jb["member_id"] != ja["member_id"]
    assert heartbeat(b, group, ja["generation_id"], ja["member_id"]) == E.UNKNOWN_MEMBER_ID
    # The reader key has no ACL on any group.
    r = client(kafka, kafka.reader_a)
    assert join(r, group)["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    found = r.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    assert found["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    fetched = r.request(OFFSET_FETCH, 7, {"group_id": group, "topics": None})
    assert fetched["error_code"] == E.GROUP_AUTHORIZATION_FAILED
    for c in (a, b, r):
        c.close()


def test_a_stable_group_survives_a_broker_restart(kafka):
    from tests.broker.conftest import start_broker, stop_broker

    group = f"restart-{uuid.uuid4().hex[:8]}"
    c = client(kafka, kafka.admin_a)
    joined = join_and_sync(c, group)
    c.close()
    stop_broker(kafka)
    start_broker(kafka)
    c = client(kafka, kafka.admin_a)
    # The new broker rebuilt the group from the store: same generation, same member.
    assert heartbeat(c, group, joined["generation_id"], joined["member_id"]) == E.NONE
    synced = c.request(
        SYNC,
        3,
        {
            "group_id": group,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "group_instance_id": None,
            "assignments": [],
        },
    )
    assert bytes(synced["assignment"]) == encode_assignment({"orders": [0, 1]})
    c.close()
