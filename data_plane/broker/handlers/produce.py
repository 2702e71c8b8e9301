"""Produce (InitProducerId is in ``transactions.py``).

The produce handler authorizes and splits the request by partition, hands the batches to
the replica manager (``append_records``: the partition leader appends, and with acks=all
waits for the ISR) and turns the results into the response. From v10 a partition refused
because this broker does not lead it names its leader and that leader's address (KIP-951,
as Fetch v16 does).
"""

from __future__ import annotations

import asyncio
import logging

from data_plane.acl import Operation, ResourceType
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
from data_plane.protocol.messages import produce
from data_plane.protocol.messages import produce as produce_api
from data_plane.protocol.types import Buffer
from data_plane.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    read_header,
)
from data_plane.records.legacy import up_convert
from data_plane.txn.model import TxnPartition

logger = logging.getLogger("millrace.broker")

# A compressed legacy message may expand to at most this much (the batch it becomes must
# still fit the topic's max.message.bytes when it is appended).
LEGACY_EXPANSION_LIMIT = 64 << 20
ABORTABLE_FROM = 11  # Produce versions whose clients understand TRANSACTION_ABORTABLE
IMPLICIT_ADD_FROM = 12  # ... and whose transactional batches add their partition (V2)


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
            elif not legacy and (
                refused := await _refused_transactional(ctx, req, topic, p["index"], records)
            ):
                code, message = refused
            elif suspended := svc.tenants.tenant_suspended(tenant_id):
                code, message = E.POLICY_VIOLATION, suspended
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
                    svc.usage.produced(
                        tenant_id,
                        topic.topic_id,
                        topic.name,
                        ctx.principal.name,
                        len(records),
                        info.records,
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


def _transactional_batch(records: Buffer) -> BatchHeader | None:
    """The first transactional batch's header in ``records``, if any (headers only: the
    log validates the batches, so a malformed set is left to it)."""
    view = memoryview(records).cast("B")
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(view):
        try:
            header = read_header(view, pos)
        except InvalidRecordBatch:
            return None
        if header.is_transactional:
            return header
        if header.size <= 0:
            return None
        pos += header.size
    return None


async def _refused_transactional(
    ctx: RequestContext,
    req: bodies.ProduceRequest,
    topic: TopicInfo,
    index: int,
    records: Buffer,
) -> tuple[int, str | None] | None:
    """Why a partition's transactional batches are refused (None: they are not, or there
    are none). They need the request's transactional id, with Write on it, and (KIP-890
    part 1) a transaction in progress that holds this partition: checked with the
    coordinator's stored state before the producer's first batch here in each
    transaction; later batches find the transaction open in the log."""
    header = _transactional_batch(records)
    if header is None:
        return None
    transactional_id = req.get("transactional_id")
    if not transactional_id or not ctx.may(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        return E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
    partition, _ = ctx.services.replicas.leader_partition(topic, index)
    if partition is None:
        return None  # the append answers NOT_LEADER_OR_FOLLOWER
    if partition.log.producers.in_transaction(header.producer_id, header.producer_epoch):
        return None
    if ctx.version >= IMPLICIT_ADD_FROM:
        return await _add_implicitly(ctx, transactional_id, header, topic, index)
    try:
        code = await ctx.services.transactions.verify(
            ctx.principal.tenant_id,
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            TxnPartition(str(topic.topic_id), index),
        )
    except Exception:  # the coordinator's state could not be read: retriable
        logger.warning("verifying %r failed", transactional_id, exc_info=True)
        return E.NOT_ENOUGH_REPLICAS, "the transaction could not be verified; retry"
    if code == E.NONE:
        return None
    if code == E.TRANSACTION_ABORTABLE:
        # Kafka's answer to clients that know it (v11+); older ones get INVALID_TXN_STATE.
        version = ctx.version
        return (
            E.TRANSACTION_ABORTABLE if version >= ABORTABLE_FROM else E.INVALID_TXN_STATE,
            "the partition is not in a transaction in progress of this producer",
        )
    if code == E.CONCURRENT_TRANSACTIONS:
        # Being decided (markers being written): retriable, as Kafka answers before v12.
        return E.NOT_ENOUGH_REPLICAS, "the producer's transaction is being completed; retry"
    return code, None


async def _add_implicitly(
    ctx: RequestContext, transactional_id: str, header: BatchHeader, topic: TopicInfo, index: int
) -> tuple[int, str | None] | None:
    """Produce v12, transactions V2 (KIP-890 part 2): the producer sent no
    AddPartitionsToTxn; this leader adds the partition to its transaction (starting it
    if none is in progress) at the batch's producer id and epoch, with the coordinator
    wherever it is, and answers as Kafka's leaders do."""
    router = ctx.services.txn_router
    if router is None:
        return E.NOT_ENOUGH_REPLICAS, "transactions V2 are not available on this broker"
    try:
        code = await router.add(
            ctx.principal.tenant_id,
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            partitions=[TxnPartition(str(topic.topic_id), index)],
        )
    except Exception:  # the coordinator could not be asked: retriable
        logger.warning("adding a partition to %r failed", transactional_id, exc_info=True)
        code = E.COORDINATOR_NOT_AVAILABLE
    if code == E.NONE:
        return None
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH, None
    if code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS):
        return E.NOT_ENOUGH_REPLICAS, "the transaction coordinator is not available; retry"
    return code, None


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    produce_api.KEY: handle_produce,
}
