"""The cluster: DescribeCluster, DescribeLogDirs, and the operators' ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments."""

from __future__ import annotations

import logging

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
from data_plane.log.manager import TopicPartition
from data_plane.protocol import bodies
from data_plane.protocol.messages import (
    alter_partition_reassignments as alter_reassignments_api,
)
from data_plane.protocol.messages import describe_cluster as describe_cluster_api
from data_plane.protocol.messages import describe_log_dirs
from data_plane.protocol.messages import describe_log_dirs as describe_log_dirs_api
from data_plane.protocol.messages import elect_leaders as elect_leaders_api
from data_plane.protocol.messages import (
    list_partition_reassignments as list_reassignments_api,
)

logger = logging.getLogger("millrace.broker")


async def handle_describe_cluster(
    ctx: RequestContext, req: bodies.DescribeClusterRequest
) -> bodies.DescribeClusterResponse:
    svc = ctx.services
    code = E.NONE if ctx.may_cluster(Operation.DESCRIBE) else E.CLUSTER_AUTHORIZATION_FAILED
    brokers: list[bodies.DescribeClusterResponseBrokers] = []
    if code == E.NONE:
        brokers = [
            {
                "broker_id": m["node_id"],
                "host": m["host"],
                "port": m["port"],
                "rack": m["rack"],
                "is_fenced": False,
            }
            for m in svc.cluster.cluster_metadata(ctx.tls)
        ]
        # v2 (KIP-1073): registered brokers that are not live are listed too when asked,
        # marked fenced (with the client's listener, as the live ones).
        if ctx.version >= 2 and req.get("include_fenced_brokers"):
            listed = {b["broker_id"] for b in brokers}
            fenced = await blocking(svc.admin.fenced_brokers)
            for broker_id, info in sorted(fenced.items()):
                host, port = info.endpoint(ctx.tls)
                if broker_id in listed or port is None:
                    continue
                brokers.append(
                    {
                        "broker_id": broker_id,
                        "host": host,
                        "port": port,
                        "rack": info.rack,
                        "is_fenced": True,
                    }
                )
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": None,
        "cluster_id": ctx.snapshot.cluster_id,
        "controller_id": svc.cluster.broker_id,
        "brokers": brokers,
        "cluster_authorized_operations": authorized_operations(
            ctx,
            ResourceType.CLUSTER,
            CLUSTER_RESOURCE_NAME,
            code == E.NONE and req["include_cluster_authorized_operations"],
        ),
    }


async def handle_describe_log_dirs(
    ctx: RequestContext, req: bodies.DescribeLogDirsRequest
) -> bodies.DescribeLogDirsResponse:
    """The sizes of the partition logs this broker holds (as leader or follower).

    Kafka asks for Describe on the cluster; Millrace also keeps to the principal's tenant
    and to the topics it may describe, so an unknown, another tenant's and an undescribable
    topic are all simply absent (as partitions this broker holds no log for are). One
    result: a broker has one data directory.
    """
    if not ctx.may_cluster(Operation.DESCRIBE):
        # v0-2 have no top-level error code: their answer is just the empty result list.
        return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    svc = ctx.services
    requested = req["topics"]
    wanted: dict[str, set[int] | None]  # topic name -> partitions (None: all of them)
    if requested is None:
        wanted = dict.fromkeys(ctx.snapshot.tenant_topics(ctx.principal.tenant_id))
    else:
        asked: dict[str, set[int]] = {}
        for t in requested:
            asked.setdefault(t["topic"], set()).update(t["partitions"])
        wanted = {name: indexes for name, indexes in asked.items()}
    topics: list[bodies.DescribeLogDirsResponseTopics] = []
    for name, indexes in wanted.items():
        topic = ctx.topic(name)
        if topic is None or not ctx.may(Operation.DESCRIBE, T, name):
            continue
        partitions: list[bodies.DescribeLogDirsResponsePartitions] = []
        for p in topic.partitions:
            if indexes is not None and p.index not in indexes:
                continue
            log = svc.replicas.logs.get(TopicPartition(topic.topic_id, p.index))
            if log is None or log.closed:
                continue  # no replica here: another broker answers for it
            partitions.append(
                {
                    "partition_index": p.index,
                    "partition_size": log.size_bytes,
                    # Kafka's lag of a current log: its end behind its high watermark. 0
                    # here as in Kafka (a follower caps its high watermark at its log end);
                    # how far a follower trails the leader only the leader knows.
                    "offset_lag": max(log.high_watermark - log.log_end_offset, 0),
                    "is_future_key": False,
                }
            )
        if partitions:
            topics.append({"name": name, "partitions": partitions})
    # Tenant-relative, never the host's: a logical directory name (not the broker's path)
    # and the tenant's storage limit and what is left of it on this broker (not the disk's
    # totals, which would tell a tenant about the machine and the other tenants).
    tenant = ctx.snapshot.tenants.get(ctx.principal.tenant_id)
    if tenant is None:
        total = usable = describe_log_dirs.UNKNOWN_BYTES
    else:
        total = tenant.max_storage_bytes
        usable = max(0, total - svc.tenants.tenant_storage(ctx.principal.tenant_id))
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "results": [
            {
                "error_code": E.NONE,
                "log_dir": f"/millrace/{ctx.principal.tenant_slug}",
                "topics": topics,
                "total_bytes": total,
                "usable_bytes": usable,
            }
        ],
    }


OPERATORS_ONLY = "only an operator principal (manage.py operator_credentials) may do this"


async def handle_elect_leaders(
    ctx: RequestContext, req: bodies.ElectLeadersRequest
) -> bodies.ElectLeadersResponse:
    """Elect the preferred replica (or, v1+ ``election_type`` 1, any live one where a
    partition has no leader) of the operator's tenant's partitions; all of them when
    ``topic_partitions`` is null, answering then only for those that needed an election
    (as Kafka). Kafka asks for Alter on the cluster: here only an operator principal holds
    it, and a tenant's key gets CLUSTER_AUTHORIZATION_FAILED (v0 has only per-partition
    codes)."""
    requested = req["topic_partitions"]
    election_type = req["election_type"] if ctx.version >= 1 else elect_leaders_api.PREFERRED
    code, message = E.NONE, None
    if not ctx.principal.operator:
        code, message = E.CLUSTER_AUTHORIZATION_FAILED, OPERATORS_ONLY
    elif election_type not in (elect_leaders_api.PREFERRED, elect_leaders_api.UNCLEAN):
        code, message = E.INVALID_REQUEST, f"unknown election type {election_type}"
    if code != E.NONE:
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "replica_election_results": [
                {
                    "topic": t["topic"],
                    "partition_result": [
                        {"partition_id": i, "error_code": code, "error_message": message}
                        for i in t["partitions"]
                    ],
                }
                for t in requested or []
            ],
        }
    wanted: dict[str, list[int]] | None = None
    if requested is not None:
        wanted = {}
        for t in requested:
            wanted.setdefault(t["topic"], []).extend(t["partitions"])
    results = await blocking(
        ctx.services.admin.elect_leaders,
        ctx.principal,
        election_type == elect_leaders_api.UNCLEAN,
        wanted,
    )
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "replica_election_results": [
            {
                "topic": name,
                "partition_result": [
                    {"partition_id": index, "error_code": err, "error_message": text}
                    for index, (err, text) in sorted(by_index.items())
                    # Asked for everything: only the partitions that needed an election.
                    if requested is not None or err != E.ELECTION_NOT_NEEDED
                ],
            }
            for name, by_index in results.items()
        ],
    }


async def handle_alter_partition_reassignments(
    ctx: RequestContext, req: bodies.AlterPartitionReassignmentsRequest
) -> bodies.AlterPartitionReassignmentsResponse:
    """Start (target replicas) or cancel (null) moving the operator's tenant's partitions
    (KIP-455, the controller's reassignment). Kafka asks for Alter on the cluster: only an
    operator principal holds it; a tenant's key gets CLUSTER_AUTHORIZATION_FAILED."""
    if not ctx.principal.operator:
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": OPERATORS_ONLY,
            "responses": [],
        }
    wanted: dict[str, dict[int, list[int] | None]] = {}
    for t in req["topics"]:
        by_index = wanted.setdefault(t["name"], {})
        for p in t["partitions"]:
            by_index[p["partition_index"]] = p["replicas"]
    results = await blocking(ctx.services.admin.alter_reassignments, ctx.principal, wanted)
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "error_message": None,
        "responses": [
            {
                "name": name,
                "partitions": [
                    {"partition_index": index, "error_code": err, "error_message": text}
                    for index, (err, text) in by_index.items()
                ],
            }
            for name, by_index in results.items()
        ],
    }


async def handle_list_partition_reassignments(
    ctx: RequestContext, req: bodies.ListPartitionReassignmentsRequest
) -> bodies.ListPartitionReassignmentsResponse:
    """The reassignments in progress among the operator's tenant's partitions (all when
    ``topics`` is null); as Kafka, partitions not being moved and unknown ones are left
    out. Operators only: a tenant's key gets CLUSTER_AUTHORIZATION_FAILED."""
    if not ctx.principal.operator:
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": OPERATORS_ONLY,
            "topics": [],
        }
    asked: dict[str, list[int]] | None = None
    if req["topics"] is not None:
        asked = {}
        for t in req["topics"]:
            asked.setdefault(t["name"], []).extend(t["partition_indexes"])
    found = await blocking(ctx.services.admin.list_reassignments, ctx.principal, asked)
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "error_message": None,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": index,
                        "replicas": list(replicas),
                        "adding_replicas": list(adding),
                        "removing_replicas": list(removing),
                    }
                    for index, (replicas, adding, removing) in sorted(by_index.items())
                ],
            }
            for name, by_index in sorted(found.items())
        ],
    }


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    describe_cluster_api.KEY: handle_describe_cluster,
    describe_log_dirs_api.KEY: handle_describe_log_dirs,
    elect_leaders_api.KEY: handle_elect_leaders,
    alter_reassignments_api.KEY: handle_alter_partition_reassignments,
    list_reassignments_api.KEY: handle_list_partition_reassignments,
}
