"""DescribeGroups 5-6, through the wire: each request is encoded and decoded at its version,
handled, and the answer encoded and decoded at that version too."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from data_plane.acl import Operation, ResourceType
from data_plane.broker.handlers import DISPATCH
from data_plane.broker.handlers.context import RequestContext
from data_plane.groups.coordinator import CoordinatorConfig, GroupCoordinator
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import describe_groups, join_group
from tests.broker_unit.test_handlers import principal_of, world  # noqa: F401  (a fixture)
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
