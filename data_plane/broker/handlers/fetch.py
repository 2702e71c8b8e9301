"""Fetch: consumers and follower replicas read partitions through the replica manager.

From v13 topics are named by id (an id outside the principal's tenant is unknown:
UNKNOWN_TOPIC_ID); from v15 a follower's id comes in ``replica_state``; from v16 a
partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries the current
leader, and that leader's address for the client's listener is in ``node_endpoints``
(KIP-951). v17's ``replica_directory_id`` is for KRaft voters and is ignored. There are no
fetch sessions: every answer has session id 0, so clients keep sending full fetches.
"""

from __future__ import annotations

from data_plane.acl import Operation
from data_plane.broker.handlers.context import (
    E,
    Handler,
    RequestContext,
    T,
    current_leader,
    leader_endpoints,
    record_bytes,
)
from data_plane.log.segment import FileSlice
from data_plane.metadata.model import TopicInfo
from data_plane.protocol import bodies
from data_plane.protocol.messages import fetch as fetch_api
from data_plane.records.legacy import down_convert
from data_plane.replication.manager import FetchPartition


async def handle_fetch(ctx: RequestContext, req: bodies.FetchRequest) -> bodies.FetchResponse:
    svc = ctx.services
    version = ctx.version
    by_id = version >= 13
    replica = req["replica_state"]["replica_id"] if version >= 15 else req["replica_id"]
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
    topic: TopicInfo | None
    for t in req["topics"]:
        if by_id:
            topic_id = t["topic_id"]
            topic = ctx.topic_by_id(topic_id)
            name = "" if topic is None else topic.name
            unknown = E.UNKNOWN_TOPIC_ID
            # "topic" is not on the wire from v13; it names the topic for the metrics.
            response: bodies.FetchResponseResponses = {"topic": name, "topic_id": topic_id}
        else:
            name = t["topic"]
            topic = ctx.topic(name)
            unknown = E.UNKNOWN_TOPIC_OR_PARTITION
            response = {"topic": name}
        allowed = topic is not None and ctx.may(Operation.READ, T, name)
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
                entry["error_code"] = unknown
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
        response["partitions"] = partitions
        responses.append(response)
    total = 0
    leaders: set[int] = set()
    if wanted:
        results, total = await svc.replicas.fetch_records(
            replica,
            wanted,
            req.get("max_bytes", 0x7FFFFFFF),  # from v3
            req["min_bytes"],
            req["max_wait_ms"],
            req.get("isolation_level", 0),  # from v4
        )
        for entry, result in zip(entries, results, strict=True):
            entry["error_code"] = result.error
            if result.error == E.NONE or result.high_watermark >= 0:
                entry["high_watermark"] = result.high_watermark
                entry["last_stable_offset"] = result.last_stable_offset
                entry["log_start_offset"] = result.log_start_offset
            if result.aborted is not None:  # read_committed: what the consumer drops
                entry["aborted_transactions"] = [
                    {"producer_id": t.producer_id, "first_offset": t.first_offset}
                    for t in result.aborted
                ]
            if result.records is not None:
                entry["records"] = result.records
        if version >= 16:  # KIP-951: where a moved partition's leader is now
            for entry, result, want in zip(entries, results, wanted, strict=True):
                leader = current_leader(want.topic, want.index, result.error, leaders)
                if leader is not None:
                    entry["current_leader"] = leader
    throttle = 0
    if replica < 0:  # replication is not a tenant's consumption
        _count_consumed(ctx, entries, wanted)
        throttle = record_bytes(ctx, "fetch", total)
    elif total:
        svc.metrics.replication_bytes_out.inc(total)
    if version < 4:
        _down_convert(ctx, entries, wanted)
    answer: bodies.FetchResponse = {
        "throttle_time_ms": throttle,
        "error_code": E.NONE,
        "session_id": 0,
        "responses": responses,
    }
    if leaders:
        answer["node_endpoints"] = leader_endpoints(ctx, leaders)
    return answer


def _down_convert(
    ctx: RequestContext,
    entries: list[bodies.FetchResponsePartitions],
    wanted: list[FetchPartition],
) -> None:
    """Fetch v0-3: the records in message format v0 (v0-1) or v1 (v2-3), written from the
    batches read (at most what the fetch asked for), from the offset asked for."""
    magic = 0 if ctx.version < 2 else 1
    for entry, want in zip(entries, wanted, strict=True):
        found = entry.get("records")
        if isinstance(found, FileSlice) and found.length:
            entry["records"] = down_convert(found.read(), magic, want.fetch_offset)
            ctx.services.metrics.format_conversions.labels("down").inc()


def _count_consumed(
    ctx: RequestContext,
    entries: list[bodies.FetchResponsePartitions],
    wanted: list[FetchPartition],
) -> None:
    """The records sent, in the broker's metrics and in the tenant's metered usage."""
    svc, principal = ctx.services, ctx.principal
    for entry, want in zip(entries, wanted, strict=True):
        found = entry["records"]
        if isinstance(found, FileSlice) and found.length:
            records = max(0, found.next_offset - found.first_offset)
            topic = want.topic
            svc.metrics.consumed(principal.tenant_slug, topic.name, found.length, records)
            svc.usage.fetched(
                principal.tenant_id,
                topic.topic_id,
                topic.name,
                principal.name,
                found.length,
                records,
            )


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    fetch_api.KEY: handle_fetch,
}
