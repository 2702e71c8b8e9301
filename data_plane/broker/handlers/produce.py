"""Produce and InitProducerId.

The produce handler authorizes and splits the request by partition, hands the batches to
the replica manager (``append_records``: the partition leader appends, and with acks=all
waits for the ISR) and turns the results into the response. From v10 a partition refused
because this broker does not lead it names its leader and that leader's address (KIP-951,
as Fetch v16 does).
"""

from __future__ import annotations

import asyncio
import logging

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
from data_plane.metadata.model import TopicInfo
from data_plane.protocol import bodies
from data_plane.protocol.messages import init_producer_id as init_producer_id_api
from data_plane.protocol.messages import produce
from data_plane.protocol.messages import produce as produce_api
from data_plane.protocol.types import Buffer
from data_plane.records.batch import BATCH_HEADER_SIZE, InvalidRecordBatch, read_header
from data_plane.records.legacy import up_convert

logger = logging.getLogger("millrace.broker")

# A compressed legacy message may expand to at most this much (the batch it becomes must
# still fit the topic's max.message.bytes when it is appended).
LEGACY_EXPANSION_LIMIT = 64 << 20


async def handle_produce(
    ctx: RequestContext, req: bodies.ProduceRequest
) -> bodies.ProduceResponse | None:
    svc = ctx.services
    # v0-2 carry message formats v0/v1: each partition's set becomes one RecordBatch v2.
    legacy = ctx.version < produce.RECORD_BATCH_FROM
    tenant_id = ctx.principal.tenant_id
    acks = req["acks"]
    results: list[bodies.ProduceResponseResponses] = []
    total_bytes = 0
    # The partitions that passed the checks, each with its response entry.
    appends: list[tuple[TopicInfo, int, Buffer]] = []
    entries: list[bodies.ProduceResponsePartitionResponses] = []
    for t in req["topic_data"]:
        partitions: list[bodies.ProduceResponsePartitionResponses] = []
        topic = ctx.topic(t["name"])
        allowed = topic is not None and ctx.may(Operation.WRITE, T, t["name"])
        for p in t["partition_data"]:
            records = p["records"]
            total_bytes += len(records) if records is not None else 0
            code: int = E.NONE
            message = None
            if acks not in (-1, 0, 1):
                code = E.INVALID_REQUIRED_ACKS
            elif topic is None:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            elif not allowed:
                code = E.TOPIC_AUTHORIZATION_FAILED
            elif records is None:
                code = E.CORRUPT_MESSAGE
            elif not legacy and _has_transactional_batch(records):
                # Kafka's answer to transactional batches without an authorized
                # transactional id; transactions are not served yet (Step 13), so none is.
                code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                message = "transactions are not supported by this Millrace version"
            elif svc.tenants.tenant_over_storage(tenant_id):
                code, message = E.POLICY_VIOLATION, "tenant storage limit reached"
            elif legacy:
                try:
                    records = up_convert(records, max_size=LEGACY_EXPANSION_LIMIT)
                    svc.metrics.format_conversions.labels("up").inc()
                except InvalidRecordBatch as exc:
                    code, message = E.CORRUPT_MESSAGE, str(exc)
            entry: bodies.ProduceResponsePartitionResponses = {
                "index": p["index"],
                "error_code": code,
                "base_offset": -1,
                "log_append_time_ms": -1,
                "log_start_offset": -1,
                "record_errors": [],
                "error_message": message,
            }
            partitions.append(entry)
            if code == E.NONE and topic is not None and records is not None:
                appends.append((topic, p["index"], records))
                entries.append(entry)
        results.append({"name": t["name"], "partition_responses": partitions})
    leaders: set[int] = set()
    if appends:
        appended = await svc.replicas.append_records(appends, acks, req["timeout_ms"])
        for entry, (topic, partition, records), result in zip(
            entries, appends, appended, strict=True
        ):
            info = result.info
            entry["error_code"] = result.error
            entry["error_message"] = result.message
            entry["log_start_offset"] = result.log_start_offset
            entry["record_errors"] = [
                {"batch_index": index, "batch_index_error_message": message}
                for index, message in result.record_errors
            ]
            if ctx.version >= 10:  # KIP-951: where a moved partition's leader is now
                leader = current_leader(topic, partition, result.error, leaders)
                if leader is not None:
                    entry["current_leader"] = leader
            if info is not None:
                entry["base_offset"] = info.first_offset
                entry["log_append_time_ms"] = info.log_append_time
                svc.tenants.add_storage(tenant_id, len(records))
                if not info.duplicate:
                    svc.metrics.produced(
                        ctx.principal.tenant_slug, topic.name, len(records), info.records
                    )
    throttle = record_bytes(ctx, "produce", total_bytes)
    if acks == 0:
        if throttle:
            await asyncio.sleep(throttle / 1000)
        return None
    answer: bodies.ProduceResponse = {"responses": results, "throttle_time_ms": throttle}
    if leaders:
        answer["node_endpoints"] = leader_endpoints(ctx, leaders)
    return answer


def _has_transactional_batch(records: Buffer) -> bool:
    """Whether a batch in ``records`` has the transactional bit (headers only: the log
    validates the batches, so a malformed set is left to it)."""
    view = memoryview(records).cast("B")
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(view):
        try:
            header = read_header(view, pos)
        except InvalidRecordBatch:
            return False
        if header.is_transactional:
            return True
        if header.size <= 0:
            return False
        pos += header.size
    return False


async def handle_init_producer_id(
    ctx: RequestContext, req: bodies.InitProducerIdRequest
) -> bodies.InitProducerIdResponse:
    """An id and epoch for an idempotent producer (transactions are not supported yet)."""
    if req["transactional_id"] is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    tenant_topics = ctx.snapshot.tenant_topics(ctx.principal.tenant_id)
    # KIP-679: IdempotentWrite on the cluster, or Write on any topic, allows it.
    allowed = (
        ctx.may_cluster(Operation.IDEMPOTENT_WRITE)
        or any(ctx.may(Operation.WRITE, T, name) for name in tenant_topics)
        or ctx.may(Operation.WRITE, T, "*")
    )
    if not allowed:
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    # Without a transactional id, Kafka ignores the producer id and epoch a client sends
    # (KIP-360's bump is for transactional producers) and hands out a new id: an id is
    # never bumped for someone who may not own it, and the client starts afresh with it.
    new_id = await ctx.services.producer_ids.next_producer_id()
    return {"throttle_time_ms": 0, "error_code": E.NONE, "producer_id": new_id, "producer_epoch": 0}


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    produce_api.KEY: handle_produce,
    init_producer_id_api.KEY: handle_init_producer_id,
}
