"""KIP-848's consumer group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Authorization as Kafka's: Read on the group to heartbeat, Describe on the group to describe
it; a subscription names topics inside the principal's tenant, and only those it may
Describe (a regular expression is matched against those alone, so it never reveals
another tenant's topics or ones the principal may not see; a topic named outright that it
may not describe is refused with TOPIC_AUTHORIZATION_FAILED). Both APIs are served only
when the broker runs the consumer protocol (``MILLRACE_GROUP_PROTOCOLS`` includes
``consumer``); otherwise they are not advertised and answer UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import uuid

from data_plane.acl import Operation, ResourceType
from data_plane.broker.handlers.context import (
    Handler,
    RequestContext,
    TopicAuthorization,
    authorized_operations,
    group_check,
    topic_resolver,
)
from data_plane.groups.consumer_group import ConsumerGroup, Parts
from data_plane.groups.coordinator import GroupError
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import consumer_group_describe as describe_api
from data_plane.protocol.messages import consumer_group_heartbeat as heartbeat_api

E = ErrorCode
G = ResourceType.GROUP
T = ResourceType.TOPIC


def _parts(
    topic_partitions: list[bodies.ConsumerGroupHeartbeatRequestTopicPartitions] | None,
) -> Parts | None:
    if topic_partitions is None:
        return None
    out: dict[str, frozenset[int]] = {}
    for tp in topic_partitions:
        key = str(tp["topic_id"])
        out[key] = out.get(key, frozenset()) | frozenset(tp["partitions"])
    return {t: ps for t, ps in out.items() if ps}


def _wire(parts: Parts) -> list[bodies.ConsumerGroupHeartbeatResponseTopicPartitions]:
    return [
        {"topic_id": uuid.UUID(topic_id), "partitions": sorted(ps)}
        for topic_id, ps in sorted(parts.items())
    ]


async def handle_consumer_group_heartbeat(
    ctx: RequestContext, req: bodies.ConsumerGroupHeartbeatRequest
) -> bodies.ConsumerGroupHeartbeatResponse:
    out: bodies.ConsumerGroupHeartbeatResponse = {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "error_message": None,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }
    consumer = ctx.services.consumer_groups
    if not ctx.services.consumer_protocol:
        return out | {
            "error_code": E.UNSUPPORTED_VERSION,
            "error_message": "the consumer group protocol is not enabled on this broker",
        }
    group_id = req["group_id"]
    error = group_check(ctx, group_id)
    if error is not None:
        return out | {"error_code": error}
    try:
        answer = await consumer.heartbeat(
            ctx.principal.tenant_id,
            group_id,
            member_id=req["member_id"],
            member_epoch=req["member_epoch"],
            instance_id=req["instance_id"],
            rack_id=req["rack_id"],
            rebalance_timeout_ms=req["rebalance_timeout_ms"],
            subscribed_topic_names=req["subscribed_topic_names"],
            subscribed_topic_regex=req.get("subscribed_topic_regex"),
            server_assignor=req["server_assignor"],
            owned=_parts(req["topic_partitions"]),
            client_id=ctx.client_id,
            host=ctx.host,
            resolve=topic_resolver(ctx),
            client_member_id=ctx.version >= 1,
        )
    except GroupError as exc:
        return out | {"error_code": exc.code, "error_message": str(exc)}
    except TopicAuthorization as exc:
        return out | {
            "error_code": E.TOPIC_AUTHORIZATION_FAILED,
            "error_message": f"not authorized to describe subscribed topics: {exc}",
        }
    return out | {
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval_ms": answer.heartbeat_interval_ms,
        "assignment": None
        if answer.assignment is None
        else {"topic_partitions": _wire(answer.assignment)},
    }


def _described(ctx: RequestContext, parts: Parts) -> bodies.ConsumerGroupDescribeResponseAssignment:
    out: list[bodies.ConsumerGroupDescribeResponseGroupsMembersAssignmentTopicPartitions] = []
    for topic_id, ps in sorted(parts.items()):
        topic = ctx.topic_by_id(uuid.UUID(topic_id))
        out.append(
            {
                "topic_id": uuid.UUID(topic_id),
                "topic_name": topic.name if topic is not None else "",
                "partitions": sorted(ps),
            }
        )
    return {"topic_partitions": out}


def _describe_group(
    ctx: RequestContext, group: ConsumerGroup
) -> list[bodies.ConsumerGroupDescribeResponseMembers]:
    return [
        {
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "rack_id": m.rack_id,
            "member_epoch": m.member_epoch,
            "client_id": m.client_id,
            "client_host": m.host,
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": _described(ctx, m.assigned),
            "target_assignment": _described(ctx, group.target.get(m.member_id, {})),
            "member_type": 0 if m.classic else 1,  # classic or consumer-protocol member
        }
        for m in group.members.values()
    ]


async def handle_consumer_group_describe(
    ctx: RequestContext, req: bodies.ConsumerGroupDescribeRequest
) -> bodies.ConsumerGroupDescribeResponse:
    groups: list[bodies.ConsumerGroupDescribeResponseGroups] = []
    consumer = ctx.services.consumer_groups
    for group_id in req["group_ids"]:
        entry: bodies.ConsumerGroupDescribeResponseGroups = {
            "error_code": E.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": [],
        }
        groups.append(entry)
        if not ctx.services.consumer_protocol:
            entry["error_code"] = E.UNSUPPORTED_VERSION
            continue
        if not group_id:
            entry["error_code"] = E.INVALID_GROUP_ID
            continue
        error = group_check(ctx, group_id, Operation.DESCRIBE)
        if error is not None:
            entry["error_code"] = error
            continue
        group = await consumer.describe(ctx.principal.tenant_id, group_id)
        if group is None:
            entry["error_code"] = E.GROUP_ID_NOT_FOUND
            entry["error_message"] = f"Group {group_id} is not a consumer group."
            continue
        entry.update(
            {
                "group_state": str(group.state),
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": group.assignor,
                "members": _describe_group(ctx, group),
                "authorized_operations": authorized_operations(
                    ctx, G, group_id, bool(req["include_authorized_operations"])
                ),
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    heartbeat_api.KEY: handle_consumer_group_heartbeat,
    describe_api.KEY: handle_consumer_group_describe,
}
