"""Topic admin: CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import logging

from data_plane.acl import (
    Operation,
)
from data_plane.broker.handlers.context import (
    E,
    Handler,
    RequestContext,
    T,
    blocking,
)
from data_plane.broker.ports import AdminError
from data_plane.protocol import bodies
from data_plane.protocol.messages import create_partitions as create_partitions_api
from data_plane.protocol.messages import create_topics as create_topics_api
from data_plane.protocol.messages import delete_topics as delete_topics_api
from data_plane.protocol.types import ZERO_UUID

logger = logging.getLogger("millrace.broker")

# CreateTopics/CreatePartitions with replica assignments, from a tenant: the service places
# replicas (racks apart, evenly); operators place them with their own principal
# (internal_auth.operator_username) or move them with the REST reassignment API.
MANAGED_PLACEMENT = (
    "replica placement is managed by Millrace: omit the replica assignments (only an "
    "operator places replicas by hand, or moves them with POST /api/v1/cluster/reassignments/)"
)


def _assignment_refusal(
    ctx: RequestContext, topic: bodies.CreateTopicsRequestTopics
) -> tuple[int, str] | None:
    """Why a CreateTopics entry's replica assignments cannot be served, or None.

    Only an operator places replicas; as in Kafka, the assignments replace the partition
    count and replication factor (giving both is an invalid request) and must name
    partitions 0, 1, 2, ... once each."""
    if not ctx.principal.operator:
        return E.POLICY_VIOLATION, MANAGED_PLACEMENT
    if topic["num_partitions"] != -1 or topic["replication_factor"] != -1:
        return E.INVALID_REQUEST, (
            "give either replica assignments or num_partitions and replication_factor "
            "(-1 when assignments are given), not both"
        )
    indexes = sorted(a["partition_index"] for a in topic["assignments"])
    if indexes != list(range(len(indexes))):
        return E.INVALID_REPLICA_ASSIGNMENT, (
            f"assigned partitions must be 0 to {len(indexes) - 1}, each once; got {indexes}"
        )
    return None


async def handle_create_topics(
    ctx: RequestContext, req: bodies.CreateTopicsRequest
) -> bodies.CreateTopicsResponse:
    svc = ctx.services
    results: list[bodies.CreateTopicsResponseTopics] = []
    for t in req["topics"]:
        name = t["name"]
        entry: bodies.CreateTopicsResponseTopics = {
            "name": name,
            "error_code": E.NONE,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        results.append(entry)
        if not (ctx.may_cluster(Operation.CREATE) or ctx.may(Operation.CREATE, T, name)):
            entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
            continue
        assignment = None
        if t["assignments"]:
            refusal = _assignment_refusal(ctx, t)
            if refusal is not None:
                entry["error_code"], entry["error_message"] = refusal
                continue
            ordered = sorted(t["assignments"], key=lambda a: a["partition_index"])
            assignment = [a["broker_ids"] for a in ordered]
        partitions = (
            t["num_partitions"]
            if t["num_partitions"] > 0
            else svc.tenants.default_partitions(ctx.principal.tenant_id)
        )
        rf = t["replication_factor"] if t["replication_factor"] > 0 else None
        if assignment is not None:
            partitions, rf = len(assignment), len(assignment[0])
        configs = {c["name"]: c["value"] for c in t["configs"]}
        try:
            await blocking(
                svc.admin.create_topic,
                ctx.principal,
                name,
                partitions,
                rf,
                configs,
                req.get("validate_only", False),  # v0 has no validate_only
                assignment,
            )
            entry["num_partitions"] = partitions
            entry["replication_factor"] = rf or 1
        except AdminError as exc:
            entry["error_code"], entry["error_message"] = exc.error_code, exc.message
    await svc.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "topics": results}


async def handle_delete_topics(
    ctx: RequestContext, req: bodies.DeleteTopicsRequest
) -> bodies.DeleteTopicsResponse:
    svc = ctx.services
    names = list(req.get("topic_names") or [])
    results: list[bodies.DeleteTopicsResponseResponses] = []
    for t in req.get("topics") or []:
        if t["name"]:
            names.append(t["name"])
            continue
        # v6 by id, as Kafka answers: an id outside the tenant (or of a deleted topic) is
        # UNKNOWN_TOPIC_ID with no name; neither name nor id is an invalid request.
        found = ctx.topic_by_id(t["topic_id"])
        if found is not None:
            names.append(found.name)
            continue
        none_given = t["topic_id"] == ZERO_UUID
        results.append(
            {
                "name": None,
                "topic_id": t["topic_id"],
                "error_code": E.INVALID_REQUEST if none_given else E.UNKNOWN_TOPIC_ID,
                "error_message": "neither topic name nor id given" if none_given else None,
            }
        )
    for name in names:
        topic = ctx.topic(name)
        entry: bodies.DeleteTopicsResponseResponses = {
            "name": name,
            # Not None: topic_id is not nullable (the encoder writes None as this zero id anyway).
            "topic_id": topic.topic_id if topic else ZERO_UUID,
            "error_code": E.NONE,
            "error_message": None,
        }
        results.append(entry)
        if topic is None:
            entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
        elif not ctx.may(Operation.DELETE, T, name):
            entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
        else:
            try:
                await blocking(svc.admin.delete_topic, ctx.principal, name)
            except AdminError as exc:
                entry["error_code"], entry["error_message"] = exc.error_code, exc.message
    await svc.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "responses": results}


async def handle_create_partitions(
    ctx: RequestContext, req: bodies.CreatePartitionsRequest
) -> bodies.CreatePartitionsResponse:
    svc = ctx.services
    if any(ctx.topic(t["name"]) is None for t in req["topics"]):
        # Every broker answers Metadata as the controller, so a client may create a topic
        # through one broker and add partitions through another that has not heard of it
        # yet: read the metadata before calling the topic unknown.
        await svc.metadata.refresh_metadata()
    results: list[bodies.CreatePartitionsResponseResults] = []
    for t in req["topics"]:
        name = t["name"]
        entry: bodies.CreatePartitionsResponseResults = {
            "name": name,
            "error_code": E.NONE,
            "error_message": None,
        }
        results.append(entry)
        if ctx.topic(name) is None:
            entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
        elif not ctx.may(Operation.ALTER, T, name):
            entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
        elif t["assignments"] and not ctx.principal.operator:
            entry["error_code"], entry["error_message"] = E.POLICY_VIOLATION, MANAGED_PLACEMENT
        else:
            assignment = [a["broker_ids"] for a in t["assignments"]] if t["assignments"] else None
            try:
                await blocking(
                    svc.admin.create_partitions,
                    ctx.principal,
                    name,
                    t["count"],
                    req["validate_only"],
                    assignment,
                )
            except AdminError as exc:
                entry["error_code"], entry["error_message"] = exc.error_code, exc.message
    await svc.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "results": results}


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    create_topics_api.KEY: handle_create_topics,
    delete_topics_api.KEY: handle_delete_topics,
    create_partitions_api.KEY: handle_create_partitions,
}
