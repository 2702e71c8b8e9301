"""Fetch: consumers and follower replicas read partitions through the replica manager."""

from __future__ import annotations

from data_plane.acl import Operation
from data_plane.broker.handlers.context import E, Handler, RequestContext, T
from data_plane.log.segment import FileSlice
from data_plane.protocol import bodies
from data_plane.protocol.messages import fetch as fetch_api
from data_plane.replication.manager import FetchPartition


async def handle_fetch(ctx: RequestContext, req: bodies.FetchRequest) -> bodies.FetchResponse:
    svc = ctx.services
    replica = req["replica_id"]
    if replica >= 0 and not ctx.principal.broker:
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "session_id": 0,
            "responses": [],
        }
    responses: list[bodies.FetchResponseResponses] = []
    wanted: list[FetchPartition] = []
    entries: list[bodies.FetchResponsePartitions] = []
    for t in req["topics"]:
        topic = ctx.topic(t["topic"])
        allowed = topic is not None and ctx.may(Operation.READ, T, t["topic"])
        partitions: list[bodies.FetchResponsePartitions] = []
        for p in t["partitions"]:
            entry: bodies.FetchResponsePartitions = {
                "partition_index": p["partition"],
                "error_code": E.NONE,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            partitions.append(entry)
            # Kafka's order: an unknown topic first (nothing revealed to the unauthorized).
            if topic is None:
                entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif not allowed:
                entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
            else:
                wanted.append(
                    FetchPartition(
                        topic,
                        p["partition"],
                        p["fetch_offset"],
                        p["partition_max_bytes"],
                        p.get("current_leader_epoch", -1),
                    )
                )
                entries.append(entry)
        responses.append({"topic": t["topic"], "partitions": partitions})
    total = 0
    if wanted:
        results, total = await svc.replicas.fetch_records(
            replica,
            wanted,
            req["max_bytes"],
            req["min_bytes"],
            req["max_wait_ms"],
        )
        for entry, result in zip(entries, results, strict=True):
            entry["error_code"] = result.error
            if result.error == E.NONE or result.high_watermark >= 0:
                entry["high_watermark"] = result.high_watermark
                entry["last_stable_offset"] = result.high_watermark
                entry["log_start_offset"] = result.log_start_offset
            if result.records is not None:
                entry["records"] = result.records
    throttle = 0
    tenant_id = ctx.principal.tenant_id
    if replica < 0:  # replication is not a tenant's consumption
        _count_consumed(ctx, responses)
        throttle = svc.quotas.record(
            tenant_id, "fetch", total, svc.tenants.tenant_rate(tenant_id, "fetch")
        )
        if throttle:
            svc.metrics.throttled(ctx.principal.tenant_slug, "fetch", throttle)
    elif total:
        svc.metrics.replication_bytes_out.inc(total)
    return {
        "throttle_time_ms": throttle,
        "error_code": E.NONE,
        "session_id": 0,
        "responses": responses,
    }


def _count_consumed(ctx: RequestContext, responses: list[bodies.FetchResponseResponses]) -> None:
    metrics = ctx.services.metrics
    for t in responses:
        for p in t["partitions"]:
            found = p["records"]
            if isinstance(found, FileSlice) and found.length:
                records = max(0, found.next_offset - found.first_offset)
                metrics.consumed(ctx.principal.tenant_slug, t["topic"], found.length, records)


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    fetch_api.KEY: handle_fetch,
}
