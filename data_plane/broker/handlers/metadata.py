"""Metadata (and the topic auto-creation it may ask for)."""

from __future__ import annotations

import logging
import uuid

from data_plane.acl import (
    CLUSTER_RESOURCE_NAME,
    Operation,
    ResourceType,
)
from data_plane.broker.handlers.context import (
    E,
    Handler,
    RequestContext,
    T,
    authorized_operations,
    blocking,
)
from data_plane.broker.ports import AdminError
from data_plane.metadata.model import PartitionInfo, TopicInfo
from data_plane.protocol import bodies
from data_plane.protocol.messages import describe_topic_partitions as dtp_api
from data_plane.protocol.messages import metadata as metadata_api
from data_plane.protocol.messages.metadata import AUTHORIZED_OPERATIONS_OMITTED
from data_plane.topic_config import (
    InvalidTopicName,
    validate_topic_name,
)

logger = logging.getLogger("millrace.broker")


async def handle_metadata(
    ctx: RequestContext, req: bodies.MetadataRequest
) -> bodies.MetadataResponse:
    svc = ctx.services
    requested = req["topics"]
    tenant_topics = ctx.snapshot.tenant_topics(ctx.principal.tenant_id)
    # v0 has no null array: there an empty list asks for every topic (v1+: null = all,
    # empty = none), as in Kafka.
    if requested is None or (ctx.version == 0 and not requested):
        names = sorted(n for n in tenant_topics if ctx.may(Operation.DESCRIBE, T, n))
        explicit = False
    else:
        names = [t["name"] for t in requested if t["name"] is not None]
        explicit = True
    created = False
    topics: list[bodies.MetadataResponseTopics] = []
    for entry in requested or []:
        # v10+: a topic asked for by id alone (KIP-516; KIP-848 consumers learn their
        # assignments as topic ids and look them up this way).
        topic_id = entry.get("topic_id")
        if entry["name"] is None and topic_id is not None and topic_id.int != 0:
            topics.append(_topic_by_id(ctx, topic_id, req))
    for name in names:
        topic = ctx.topic(name)
        if (
            topic is None
            and explicit
            and req.get("allow_auto_topic_creation", True)
            and (ctx.may_cluster(Operation.CREATE) or ctx.may(Operation.CREATE, T, name))
        ):
            code = await _auto_create(ctx, name)
            created = created or code == E.LEADER_NOT_AVAILABLE
            topics.append(_topic_error(name, code))
            continue
        if topic is None:
            topics.append(_topic_error(name, E.UNKNOWN_TOPIC_OR_PARTITION))
        elif not ctx.may(Operation.DESCRIBE, T, name):
            topics.append(_topic_error(name, E.TOPIC_AUTHORIZATION_FAILED))
        else:
            topics.append(_topic_metadata(topic))
            topics[-1]["topic_authorized_operations"] = authorized_operations(
                ctx, T, name, bool(req.get("include_topic_authorized_operations"))
            )
    if created:
        await svc.metadata.refresh_metadata()
    return {
        "throttle_time_ms": 0,
        # The Cluster port's entries are untyped dicts (the server's); these are their fields.
        "brokers": [
            {"node_id": m["node_id"], "host": m["host"], "port": m["port"], "rack": m["rack"]}
            for m in svc.cluster.cluster_metadata(ctx.tls)
        ],
        "cluster_id": ctx.snapshot.cluster_id,
        "controller_id": svc.cluster.broker_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            ctx,
            ResourceType.CLUSTER,
            CLUSTER_RESOURCE_NAME,
            bool(req.get("include_cluster_authorized_operations")),
        ),
        # v13 (KIP-1102): REBOOTSTRAP_REQUIRED is for a client that must bootstrap again
        # (its cluster changed); nothing here calls for it.
        "error_code": E.NONE,
    }


async def _auto_create(ctx: RequestContext, name: str) -> int:
    """Create ``name`` for a Metadata request; the error code to answer for it.

    LEADER_NOT_AVAILABLE (retriable) once created or when another request just created it;
    INVALID_TOPIC_EXCEPTION for a name Kafka would refuse, as Kafka answers (a retriable
    code would make producers retry until they time out); otherwise the refusal's code."""
    try:
        validate_topic_name(name)
    except InvalidTopicName as exc:
        logger.info("not auto-creating topic %r for %s: %s", name[:300], ctx.host, exc)
        return E.INVALID_TOPIC_EXCEPTION
    try:
        await blocking(
            ctx.services.admin.create_topic,
            ctx.principal,
            name,
            ctx.services.tenants.default_partitions(ctx.principal.tenant_id),
            None,
            {},
            False,
        )
    except AdminError as exc:
        if exc.error_code == E.TOPIC_ALREADY_EXISTS:
            return E.LEADER_NOT_AVAILABLE
        logger.info("auto-creating topic %r for %s refused: %s", name, ctx.host, exc.message)
        return exc.error_code
    return E.LEADER_NOT_AVAILABLE


def _topic_by_id(
    ctx: RequestContext, topic_id: uuid.UUID, req: bodies.MetadataRequest
) -> bodies.MetadataResponseTopics:
    """One topic asked for by id: UNKNOWN_TOPIC_ID for an id of no topic of the caller's
    tenant, and no name for one it may not describe."""
    topic = ctx.topic_by_id(topic_id)
    nameless = None if ctx.version >= 12 else ""  # the response's name is nullable from v12
    if topic is None:
        return _topic_error(nameless, E.UNKNOWN_TOPIC_ID) | {"topic_id": topic_id}
    if not ctx.may(Operation.DESCRIBE, T, topic.name):
        return _topic_error(nameless, E.TOPIC_AUTHORIZATION_FAILED) | {"topic_id": topic_id}
    out = _topic_metadata(topic)
    out["topic_authorized_operations"] = authorized_operations(
        ctx, T, topic.name, bool(req.get("include_topic_authorized_operations"))
    )
    return out


def _topic_error(name: str | None, code: int) -> bodies.MetadataResponseTopics:
    return {"error_code": code, "name": name, "partitions": [], "is_internal": False}


def _topic_metadata(topic: TopicInfo) -> bodies.MetadataResponseTopics:
    partitions: list[bodies.MetadataResponsePartitions] = []
    for p in topic.partitions:
        if p.leader is None:
            partitions.append(
                {
                    "error_code": E.LEADER_NOT_AVAILABLE,
                    "partition_index": p.index,
                    "leader_id": -1,
                    "leader_epoch": -1,
                    "replica_nodes": [],
                    "isr_nodes": [],
                    "offline_replicas": [],
                }
            )
            continue
        partitions.append(
            {
                "error_code": E.NONE,
                "partition_index": p.index,
                "leader_id": p.leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [],
            }
        )
    return {
        "error_code": E.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


# --- DescribeTopicPartitions (KIP-966) ---------------------------------------------------

# Kafka's max.request.partition.size.limit: the most partitions one answer holds.
MAX_PARTITIONS_PER_ANSWER = 2000


async def handle_describe_topic_partitions(
    ctx: RequestContext, req: bodies.DescribeTopicPartitionsRequest
) -> bodies.DescribeTopicPartitionsResponse:
    """As Kafka's DescribeTopicPartitionsRequestHandler: the named topics (none: every
    topic of the tenant the caller may describe) from the cursor on, sorted by name, at
    most ``response_partition_limit`` partitions; ``next_cursor`` where the next page
    starts. Named topics the caller may not describe answer TOPIC_AUTHORIZATION_FAILED
    (after the page, whether or not they exist); unknown ones UNKNOWN_TOPIC_OR_PARTITION."""
    cursor = req.get("cursor")
    start_topic = cursor["topic_name"] if cursor is not None else ""
    requested = [t["name"] for t in req["topics"]]
    every = not requested
    if every:
        candidates = set(ctx.snapshot.tenant_topics(ctx.principal.tenant_id))
    else:
        candidates = set(requested)
    names = sorted(n for n in candidates if n >= start_topic)
    if cursor is not None and (
        (not every and cursor["topic_name"] not in names) or cursor["partition_index"] < 0
    ):
        # Kafka refuses the request (a cursor outside the named topics, or a negative
        # partition): every named topic answers INVALID_REQUEST.
        return {
            "throttle_time_ms": 0,
            "topics": [_dtp_topic_error(n, E.INVALID_REQUEST) for n in requested],
            "next_cursor": None,
        }
    allowed = [n for n in names if ctx.may(Operation.DESCRIBE, T, n)]
    refused = [] if every else [n for n in names if n not in set(allowed)]
    limit = max(min(MAX_PARTITIONS_PER_ANSWER, req["response_partition_limit"]), 1)
    topics: list[bodies.DescribeTopicPartitionsResponseTopics] = []
    next_cursor: bodies.DescribeTopicPartitionsResponseNextCursor | None = None
    remaining = limit
    for name in allowed:
        if remaining <= 0:
            # The page is full: the next one starts at this topic.
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = ctx.topic(name)
        if topic is None:
            if not every:
                # Kafka fills in the operations of every topic it looked up, unknown ones too.
                topics.append(_dtp_unknown(name))
                topics[-1]["topic_authorized_operations"] = authorized_operations(
                    ctx, T, name, True
                )
            continue
        first = cursor["partition_index"] if cursor is not None and name == start_topic else 0
        wanted = [p for p in topic.partitions if p.index >= first]
        page = wanted[:remaining]
        topics.append(
            {
                "error_code": E.NONE,
                "name": name,
                "topic_id": topic.topic_id,
                "is_internal": False,
                "partitions": [_dtp_partition(p) for p in page],
                "topic_authorized_operations": authorized_operations(ctx, T, name, True),
            }
        )
        if len(page) < len(wanted):
            next_cursor = {"topic_name": name, "partition_index": wanted[len(page)].index}
            break
        remaining -= len(page)
    topics.extend(_dtp_topic_error(n, E.TOPIC_AUTHORIZATION_FAILED) for n in refused)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _dtp_partition(p: PartitionInfo) -> bodies.DescribeTopicPartitionsResponsePartitions:
    return {
        "error_code": E.NONE if p.leader is not None else E.LEADER_NOT_AVAILABLE,
        "partition_index": p.index,
        "leader_id": p.leader if p.leader is not None else -1,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        # No eligible leader replicas (KIP-966's ELR is not kept): null, the default.
        "eligible_leader_replicas": None,
        "last_known_elr": None,
        "offline_replicas": [],
    }


def _dtp_unknown(name: str) -> bodies.DescribeTopicPartitionsResponseTopics:
    try:
        validate_topic_name(name)
    except InvalidTopicName:
        return _dtp_topic_error(name, E.INVALID_TOPIC_EXCEPTION)
    return _dtp_topic_error(name, E.UNKNOWN_TOPIC_OR_PARTITION)


def _dtp_topic_error(name: str, code: int) -> bodies.DescribeTopicPartitionsResponseTopics:
    return {
        "error_code": code,
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
    }


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    metadata_api.KEY: handle_metadata,
    dtp_api.KEY: handle_describe_topic_partitions,
}
