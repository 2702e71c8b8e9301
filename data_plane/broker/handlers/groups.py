"""Kafka's consumer-group APIs: authorization and shapes around the group coordinator.

Group ids are resolved inside the principal's tenant (another tenant's group of the same
name is simply a different group). Kafka's ACL rules: Describe on the group to find its
coordinator, describe it or fetch its offsets; Read on the group to join, sync, heartbeat,
leave and commit (and Read on each committed topic); Delete to delete a group or its
offsets; ListGroups shows the groups the principal may Describe.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import cast

from data_plane.acl import Operation, ResourceType
from data_plane.broker.handlers.context import (
    Handler,
    RequestContext,
    TopicAuthorization,
    audit,
    authorized_operations,
    blocking,
    group_check,
    topic_resolver,
)
from data_plane.broker.ports import AdminError
from data_plane.groups.consumer_group import ConsumerGroup
from data_plane.groups.consumer_protocol import ConsumerProtocolError, decode_subscription
from data_plane.groups.coordinator import GroupError
from data_plane.groups.model import GroupState, OffsetRecord
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import delete_groups as delete_groups_api
from data_plane.protocol.messages import describe_groups as describe_groups_api
from data_plane.protocol.messages import find_coordinator as find_coordinator_api
from data_plane.protocol.messages import heartbeat as heartbeat_api
from data_plane.protocol.messages import join_group as join_group_api
from data_plane.protocol.messages import leave_group as leave_group_api
from data_plane.protocol.messages import list_groups as list_groups_api
from data_plane.protocol.messages import offset_commit as offset_commit_api
from data_plane.protocol.messages import offset_delete as offset_delete_api
from data_plane.protocol.messages import offset_fetch as offset_fetch_api
from data_plane.protocol.messages import sync_group as sync_group_api

E = ErrorCode
G = ResourceType.GROUP
T = ResourceType.TOPIC

COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1
COORDINATOR_KEY_SHARE = 2


# --- FindCoordinator ----------------------------------------------------------------------


async def handle_find_coordinator(
    ctx: RequestContext, req: bodies.FindCoordinatorRequest
) -> bodies.FindCoordinatorResponse:
    key_type = req.get("key_type", COORDINATOR_KEY_GROUP)
    keys = req["coordinator_keys"] if ctx.version >= 4 else [req.get("key") or ""]
    found = [_find(ctx, key, key_type) for key in keys]
    if ctx.version >= 4:
        return {"throttle_time_ms": 0, "coordinators": found}
    one = found[0]
    return {
        "throttle_time_ms": 0,
        "error_code": one["error_code"],
        "error_message": one["error_message"],
        "node_id": one["node_id"],
        "host": one["host"],
        "port": one["port"],
    }


def _find(
    ctx: RequestContext, key: str, key_type: int
) -> bodies.FindCoordinatorResponseCoordinators:
    out: bodies.FindCoordinatorResponseCoordinators = {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": E.NONE,
        "error_message": None,
    }
    if key_type == COORDINATOR_KEY_SHARE:
        # Share-group state coordinators (KIP-932; brokers ask, with v6+). There are no
        # share groups here: Kafka without a share coordinator answers INVALID_REQUEST
        # (as it does below v6, where the key type is not allowed), once it has checked
        # ClusterAction, which only brokers hold (a tenant: CLUSTER_AUTHORIZATION_FAILED).
        if ctx.version >= 6 and not ctx.principal.broker:
            out["error_code"] = E.CLUSTER_AUTHORIZATION_FAILED
        else:
            out["error_code"] = E.INVALID_REQUEST
            out["error_message"] = "share groups are not supported by this Millrace version"
        return out
    if key_type not in (COORDINATOR_KEY_GROUP, COORDINATOR_KEY_TRANSACTION):
        # An unknown key type: Kafka refuses the request as invalid.
        out["error_code"] = E.INVALID_REQUEST
        out["error_message"] = f"unknown coordinator key type {key_type}"
        return out
    cluster = ctx.services.cluster
    if key_type == COORDINATOR_KEY_TRANSACTION:
        if not ctx.may(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            out["error_code"] = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return out
        owner = cluster.transaction_coordinator_for(ctx.principal.tenant_id, key)
    else:
        if not ctx.may(Operation.DESCRIBE, G, key):
            out["error_code"] = E.GROUP_AUTHORIZATION_FAILED
            return out
        owner = cluster.coordinator_for(ctx.principal.tenant_id, key)
    if owner is None:
        out["error_code"] = E.COORDINATOR_NOT_AVAILABLE
        return out
    if owner.id == ctx.services.cluster.broker_id:
        meta = ctx.services.cluster.broker_metadata(ctx.tls)
        out["node_id"], out["host"], out["port"] = meta["node_id"], meta["host"], meta["port"]
        return out
    host, port = owner.endpoint(ctx.tls)
    if port is None:  # the coordinator has no TLS listener: unreachable from this one
        out["error_code"] = E.COORDINATOR_NOT_AVAILABLE
        return out
    out["node_id"], out["host"], out["port"] = owner.id, host, port
    return out


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------


async def handle_join_group(
    ctx: RequestContext, req: bodies.JoinGroupRequest
) -> bodies.JoinGroupResponse:
    base: bodies.JoinGroupResponse = {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None if ctx.version >= 7 else "",
        "leader": "",
        "skip_assignment": False,
        "member_id": req["member_id"],
        "members": [],
    }
    group_id = req["group_id"]
    error = group_check(ctx, group_id)
    if error is not None:
        return base | {"error_code": error}
    try:
        answer = await ctx.services.groups.join(
            ctx.principal.tenant_id,
            group_id,
            member_id=req["member_id"],
            instance_id=req.get("group_instance_id"),
            client_id=ctx.client_id,
            host=ctx.host,
            session_timeout_ms=req["session_timeout_ms"],
            rebalance_timeout_ms=req.get("rebalance_timeout_ms", -1),
            protocol_type=req["protocol_type"],
            protocols=[(p["name"], bytes(p["metadata"])) for p in req["protocols"]],
            # KIP-394: v4+ clients expect MEMBER_ID_REQUIRED on their first join.
            require_known_member_id=ctx.version >= 4,
            resolve=topic_resolver(ctx),
        )
    except GroupError as exc:
        return base | {"error_code": exc.code}
    except TopicAuthorization:
        return base | {"error_code": E.TOPIC_AUTHORIZATION_FAILED}
    # The coordinator's answer is an untyped dict of JoinGroup response fields
    # (GroupCoordinator.join): the one cast in the handlers, until data_plane.groups types it.
    out = cast(bodies.JoinGroupResponse, base | answer)
    if ctx.version < 7 and out["protocol_name"] is None:
        out["protocol_name"] = ""
    return out


async def handle_sync_group(
    ctx: RequestContext, req: bodies.SyncGroupRequest
) -> bodies.SyncGroupResponse:
    base: bodies.SyncGroupResponse = {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
    }
    error = group_check(ctx, req["group_id"])
    if error is not None:
        return base | {"error_code": error}
    try:
        assignment, ptype, pname = await ctx.services.groups.sync(
            ctx.principal.tenant_id,
            req["group_id"],
            member_id=req["member_id"],
            instance_id=req.get("group_instance_id"),
            generation=req["generation_id"],
            protocol_type=req.get("protocol_type"),
            protocol_name=req.get("protocol_name"),
            assignments=[(a["member_id"], bytes(a["assignment"])) for a in req["assignments"]],
        )
    except GroupError as exc:
        return base | {"error_code": exc.code}
    return base | {"assignment": assignment, "protocol_type": ptype, "protocol_name": pname}


async def handle_heartbeat(
    ctx: RequestContext, req: bodies.HeartbeatRequest
) -> bodies.HeartbeatResponse:
    error = group_check(ctx, req["group_id"])
    if error is None:
        try:
            await ctx.services.groups.heartbeat(
                ctx.principal.tenant_id,
                req["group_id"],
                member_id=req["member_id"],
                instance_id=req.get("group_instance_id"),
                generation=req["generation_id"],
            )
        except GroupError as exc:
            error = exc.code
    return {"throttle_time_ms": 0, "error_code": error or E.NONE}


async def handle_leave_group(
    ctx: RequestContext, req: bodies.LeaveGroupRequest
) -> bodies.LeaveGroupResponse:
    leaving: list[tuple[str, str | None]]
    if ctx.version >= 3:
        leaving = [(m["member_id"], m["group_instance_id"]) for m in req["members"]]
    else:
        leaving = [(req["member_id"], None)]
    error = group_check(ctx, req["group_id"])
    if error is not None:
        return {"throttle_time_ms": 0, "error_code": error, "members": []}
    codes = await ctx.services.groups.leave(ctx.principal.tenant_id, req["group_id"], leaving)
    members: list[bodies.LeaveGroupResponseMembers] = [
        {"member_id": mid, "group_instance_id": iid, "error_code": code}
        for (mid, iid), code in zip(leaving, codes, strict=True)
    ]
    top = E.NONE
    if ctx.version < 3 and codes:
        top = codes[0]
    return {"throttle_time_ms": 0, "error_code": top, "members": members}


# --- OffsetCommit / OffsetFetch / OffsetDelete --------------------------------------------


def _partition_error(ctx: RequestContext, name: str, index: int, op: Operation) -> ErrorCode | None:
    topic = ctx.topic(name)
    if topic is None or not 0 <= index < topic.partition_count:
        return E.UNKNOWN_TOPIC_OR_PARTITION
    if not ctx.may(op, T, name):
        return E.TOPIC_AUTHORIZATION_FAILED
    return None


async def handle_offset_commit(
    ctx: RequestContext, req: bodies.OffsetCommitRequest
) -> bodies.OffsetCommitResponse:
    group_id = req["group_id"]
    limit = ctx.services.groups.config.offset_metadata_max_bytes
    results: dict[tuple[str, int], ErrorCode] = {}
    offsets: list[OffsetRecord] = []
    now = int(time.time() * 1000)
    group_error = group_check(ctx, group_id)
    for t in req["topics"]:
        for p in t["partitions"]:
            key = (t["name"], p["partition_index"])
            error = group_error or _partition_error(ctx, key[0], key[1], Operation.READ)
            metadata = p["committed_metadata"]
            if error is None and metadata is not None and len(metadata.encode()) > limit:
                error = E.OFFSET_METADATA_TOO_LARGE
            if error is None:
                offsets.append(
                    OffsetRecord(
                        key[0],
                        key[1],
                        p["committed_offset"],
                        p.get("committed_leader_epoch", -1),
                        metadata,
                        now,
                    )
                )
            results[key] = error or E.NONE
    # v0 has no member or generation: a commit from outside the group (Kafka kept those in
    # ZooKeeper; here they are the group's offsets like any other), as v1+ with -1 and "".
    member_id = req.get("member_id", "")
    generation = req.get("generation_id_or_member_epoch", -1)
    if group_error is None:
        try:
            found = await ctx.services.groups.load(ctx.principal.tenant_id, group_id)
            if isinstance(found, ConsumerGroup):
                # A KIP-848 group: the member epoch is checked (v9+), not a generation.
                await ctx.services.consumer_groups.commit(
                    found,
                    member_id=member_id,
                    member_epoch=generation,
                    api_version=ctx.version,
                    offsets=offsets,
                )
            else:
                await ctx.services.groups.commit(
                    ctx.principal.tenant_id,
                    group_id,
                    member_id=member_id,
                    instance_id=req.get("group_instance_id"),
                    generation=generation,
                    offsets=offsets,
                )
        except GroupError as exc:
            # The group's answer applies to the partitions that passed their own checks.
            results = {k: exc.code if v == E.NONE else v for k, v in results.items()}
    topics: dict[str, list[bodies.OffsetCommitResponsePartitions]] = {}
    for (name, index), code in results.items():
        topics.setdefault(name, []).append({"partition_index": index, "error_code": code})
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()],
    }


async def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    requested: Sequence[bodies.OffsetFetchRequestTopics] | None,
    member: tuple[str | None, int] = (None, -1),
    require_stable: bool = False,
) -> tuple[ErrorCode, list[bodies.OffsetFetchResponseTopics]]:
    """One group's committed offsets. (The v8+ per-group request and response structs
    have the same fields as v1-7's top-level ones.) ``member``: v9's member id and epoch,
    checked against a consumer-protocol group. ``require_stable`` (v7+, read_committed
    consumers): a partition with offsets of a transaction not yet decided is answered
    UNSTABLE_OFFSET_COMMIT, and the consumer asks again."""
    error = group_check(ctx, group_id, Operation.DESCRIBE)
    if error is not None:
        return error, []
    member_id, member_epoch = member
    if member_id is not None or member_epoch >= 0:
        found = await ctx.services.groups.load(ctx.principal.tenant_id, group_id)
        try:
            if isinstance(found, ConsumerGroup):
                ctx.services.consumer_groups.check_fetch(found, member_id, member_epoch)
            else:
                ctx.services.groups.check_fetch(found, member_id or "", member_epoch)
        except GroupError as exc:
            return exc.code, []
    stored = {
        (o.topic, o.partition): o
        for o in await ctx.services.groups.fetch_offsets(ctx.principal.tenant_id, group_id)
    }
    unstable: set[tuple[str, int]] = set()
    if require_stable:
        unstable = await ctx.services.transactions.pending_partitions(
            ctx.principal.tenant_id, group_id
        )
    wanted: list[tuple[str, list[int]]]
    if requested is None:  # every committed partition the principal may describe
        by_topic: dict[str, list[int]] = {}
        for name, index in sorted(stored):
            if ctx.may(Operation.DESCRIBE, T, name):
                by_topic.setdefault(name, []).append(index)
        wanted = list(by_topic.items())
    else:
        wanted = [(t["name"], list(t["partition_indexes"])) for t in requested]
    topics: list[bodies.OffsetFetchResponseTopics] = []
    for name, indexes in wanted:
        parts: list[bodies.OffsetFetchResponseTopicsPartitions] = []
        allowed = ctx.may(Operation.DESCRIBE, T, name)
        for index in indexes:
            o = stored.get((name, index)) if allowed else None
            code = E.NONE if allowed else E.TOPIC_AUTHORIZATION_FAILED
            if allowed and (name, index) in unstable:
                o, code = None, E.UNSTABLE_OFFSET_COMMIT
            parts.append(
                {
                    "partition_index": index,
                    "committed_offset": o.offset if o else -1,
                    "committed_leader_epoch": o.leader_epoch if o else -1,
                    "metadata": (o.metadata if o else "") or "",
                    "error_code": code,
                }
            )
        topics.append({"name": name, "partitions": parts})
    return E.NONE, topics


async def handle_offset_fetch(
    ctx: RequestContext, req: bodies.OffsetFetchRequest
) -> bodies.OffsetFetchResponse:
    if ctx.version >= 8:
        groups: list[bodies.OffsetFetchResponseGroups] = []
        for g in req["groups"]:
            member = (g.get("member_id"), g.get("member_epoch", -1))
            error, topics = await _fetch_group(
                ctx, g["group_id"], g["topics"], member, req["require_stable"]
            )
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    error, topics = await _fetch_group(
        ctx, req["group_id"], req.get("topics"), require_stable=req.get("require_stable", False)
    )
    if ctx.version < 2 and error != E.NONE:
        # v0-1 have no top-level error: it goes on every requested partition.
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": i,
                        "committed_offset": -1,
                        "metadata": "",
                        "error_code": error,
                    }
                    for i in t["partition_indexes"]
                ],
            }
            for t in req.get("topics") or []
        ]
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}


async def handle_offset_delete(
    ctx: RequestContext, req: bodies.OffsetDeleteRequest
) -> bodies.OffsetDeleteResponse:
    group_id = req["group_id"]
    error = group_check(ctx, group_id, Operation.DELETE)
    if error is not None:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    group = await ctx.services.groups.describe(ctx.principal.tenant_id, group_id)
    stored = await ctx.services.groups.fetch_offsets(ctx.principal.tenant_id, group_id)
    modern_exists = isinstance(
        await ctx.services.groups.load(ctx.principal.tenant_id, group_id), ConsumerGroup
    )
    if group is None and not stored and not modern_exists:
        return {"error_code": E.GROUP_ID_NOT_FOUND, "throttle_time_ms": 0, "topics": []}
    subscribed: set[str] = set()
    modern = await ctx.services.consumer_groups.describe(ctx.principal.tenant_id, group_id)
    if modern is not None:
        for cm in modern.members.values():
            subscribed.update(cm.topics)
    if group is not None and group.protocol_type == "consumer":
        for m in group.members.values():
            try:
                subscribed.update(decode_subscription(m.metadata(group.protocol_name)).topics)
            except ConsumerProtocolError:
                continue
    doomed: list[tuple[str, int]] = []
    topics: list[bodies.OffsetDeleteResponseTopics] = []
    for t in req["topics"]:
        parts: list[bodies.OffsetDeleteResponsePartitions] = []
        for p in t["partitions"]:
            index = p["partition_index"]
            code = _partition_error(ctx, t["name"], index, Operation.READ)
            if code is None and t["name"] in subscribed:
                code = E.GROUP_SUBSCRIBED_TO_TOPIC
            if code is None:
                doomed.append((t["name"], index))
            parts.append({"partition_index": index, "error_code": code or E.NONE})
        topics.append({"name": t["name"], "partitions": parts})
    if doomed:
        await ctx.services.groups.delete_offsets(ctx.principal.tenant_id, group_id, doomed)
        await audit(
            ctx,
            "group.delete_offsets",
            "group",
            group_id,
            {"partitions": [f"{name}-{index}" for name, index in doomed]},
        )
    return {"error_code": E.NONE, "throttle_time_ms": 0, "topics": topics}


# --- DescribeGroups / ListGroups / DeleteGroups -------------------------------------------


# The error messages DescribeGroups v6+ carries with a group's error (Kafka's defaults).
_DESCRIBE_ERROR_MESSAGES: dict[ErrorCode, str] = {
    E.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    E.NOT_COORDINATOR: "This is not the correct coordinator.",
    E.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
}


async def handle_describe_groups(
    ctx: RequestContext, req: bodies.DescribeGroupsRequest
) -> bodies.DescribeGroupsResponse:
    out: list[bodies.DescribeGroupsResponseGroups] = []
    for group_id in req["groups"]:
        entry: bodies.DescribeGroupsResponseGroups = {
            "error_code": E.NONE,
            "group_id": group_id,
            "group_state": str(GroupState.DEAD),
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
        out.append(entry)
        error = group_check(ctx, group_id, Operation.DESCRIBE)
        if error is not None:
            entry["error_code"] = error
            entry["error_message"] = _DESCRIBE_ERROR_MESSAGES.get(error)
            continue
        group = await ctx.services.groups.describe(ctx.principal.tenant_id, group_id)
        if group is None:
            # Before v6 Kafka describes an unknown group as Dead with no members and no
            # error; from v6 (KIP-1043) it answers GROUP_ID_NOT_FOUND, still Dead.
            if ctx.version >= 6:
                entry["error_code"] = E.GROUP_ID_NOT_FOUND
                entry["error_message"] = f"Group {group_id} not found."
            continue
        stable = group.state == GroupState.STABLE
        entry["group_state"] = str(group.state)
        entry["protocol_type"] = group.protocol_type or ""
        entry["protocol_data"] = (group.protocol_name or "") if stable else ""
        entry["members"] = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.host,
                "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in group.members.values()
        ]
    for entry in out:
        if entry["error_code"] == E.NONE:
            entry["authorized_operations"] = authorized_operations(
                ctx,
                ResourceType.GROUP,
                entry["group_id"],
                bool(req.get("include_authorized_operations")),
            )
    return {"throttle_time_ms": 0, "groups": out}


async def handle_list_groups(
    ctx: RequestContext, req: bodies.ListGroupsRequest
) -> bodies.ListGroupsResponse:
    states = {s.lower() for s in req.get("states_filter") or []}
    types = {t.lower() for t in req.get("types_filter") or []}
    groups: list[bodies.ListGroupsResponseGroups] = []
    for group_id, protocol_type, state, group_type in await ctx.services.groups.list_groups(
        ctx.principal.tenant_id
    ):
        if not ctx.may(Operation.DESCRIBE, G, group_id):
            continue
        if states and state.lower() not in states:
            continue
        if types and group_type not in types:
            continue
        groups.append(
            {
                "group_id": group_id,
                "protocol_type": protocol_type,
                "group_state": state,
                "group_type": group_type,
            }
        )
    return {"throttle_time_ms": 0, "error_code": E.NONE, "groups": groups}


async def handle_delete_groups(
    ctx: RequestContext, req: bodies.DeleteGroupsRequest
) -> bodies.DeleteGroupsResponse:
    results: list[bodies.DeleteGroupsResponseResults] = []
    for group_id in req["groups_names"]:
        error = group_check(ctx, group_id, Operation.DELETE)
        if error is None:
            error = await _delete_group(ctx, group_id)
        results.append({"group_id": group_id, "error_code": error})
    return {"throttle_time_ms": 0, "results": results}


async def _delete_group(ctx: RequestContext, group_id: str) -> ErrorCode:
    groups = ctx.services.groups
    try:
        group = await groups.begin_delete(ctx.principal.tenant_id, group_id)
    except GroupError as exc:
        return exc.code
    deleted = False
    try:
        deleted = await blocking(ctx.services.admin.delete_group, ctx.principal, group_id)
    except AdminError as exc:
        return ErrorCode(exc.error_code)
    finally:
        if group is not None:
            groups.finish_delete(group, deleted)
    return E.NONE if deleted else E.GROUP_ID_NOT_FOUND


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    find_coordinator_api.KEY: handle_find_coordinator,
    join_group_api.KEY: handle_join_group,
    sync_group_api.KEY: handle_sync_group,
    heartbeat_api.KEY: handle_heartbeat,
    leave_group_api.KEY: handle_leave_group,
    offset_commit_api.KEY: handle_offset_commit,
    offset_fetch_api.KEY: handle_offset_fetch,
    offset_delete_api.KEY: handle_offset_delete,
    describe_groups_api.KEY: handle_describe_groups,
    list_groups_api.KEY: handle_list_groups,
    delete_groups_api.KEY: handle_delete_groups,
}
