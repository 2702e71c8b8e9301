"""One ``handle_<api>`` per Kafka API. Each takes the request context and the decoded
request body and returns the response body (or None for a produce with acks=0).

Authorization splits every request's resources into authorized / unauthorized / unknown
before doing any work, as Kafka's handlers do. Names are always resolved inside the
principal's tenant, so another tenant's topic is indistinguishable from a missing one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from data_plane import internal_auth
from data_plane.acl import (
    CLUSTER_RESOURCE_NAME,
    VALID_OPERATIONS,
    AclBinding,
    InvalidAclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
)
from data_plane.broker.model import Principal, TopicInfo
from data_plane.broker.ports import AdminError
from data_plane.log.manager import TopicPartition
from data_plane.log.partition import LogIOError, OffsetOutOfRange, PartitionLog
from data_plane.log.producer_state import OutOfOrderSequence, ProducerFenced
from data_plane.log.segment import FileSlice
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import describe_log_dirs, produce
from data_plane.protocol.messages.metadata import AUTHORIZED_OPERATIONS_OMITTED
from data_plane.records.batch import InvalidRecordBatch
from data_plane.topic_config import (
    TOPIC_CONFIGS,
    InvalidTopicName,
    effective_configs,
    validate_topic_name,
)

if TYPE_CHECKING:
    from data_plane.broker.replication import LeaderState
    from data_plane.broker.server import Broker

logger = logging.getLogger("millrace.broker")

E = ErrorCode
T = ResourceType.TOPIC


@dataclass
class Context:
    broker: Broker
    principal: Principal
    host: str
    version: int
    client_id: str = ""
    tls: bool = False  # arrived on the TLS listener: answer with its addresses

    def may(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        if self.principal.internal:  # never widened by a tenant's ACLs
            grants = self.principal.grants
            return (op, rtype) in (internal_auth.ALLOWED if grants is None else grants)
        return (
            authorize(
                self.broker.snapshot.tenant_acls(self.principal.tenant_id),
                principal=self.principal.name,
                host=self.host,
                operation=op,
                resource_type=rtype,
                resource_name=name,
            ).allowed
            or self.principal.is_anonymous
        )

    def may_cluster(self, op: Operation) -> bool:
        return self.may(op, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)

    def topic(self, name: str | None) -> TopicInfo | None:
        if name is None:
            return None
        if self.principal.broker:
            try:
                return self.broker.snapshot.topic_by_id(uuid.UUID(name))
            except ValueError:
                return None
        return self.broker.snapshot.topic(self.principal.tenant_id, name)


def partition_log(
    ctx: Context, topic: TopicInfo | None, allowed: bool, index: int
) -> tuple[PartitionLog | None, int]:
    """The log for one requested partition, or the error to answer with.

    Kafka's order: an unknown topic first (so nothing is revealed to the unauthorized),
    then authorization, then whether this broker leads the partition.
    """
    if topic is None:
        return None, E.UNKNOWN_TOPIC_OR_PARTITION
    if not allowed:
        return None, E.TOPIC_AUTHORIZATION_FAILED
    return ctx.broker.leader_log(topic, index)


# --- authorized operations (KIP-430) -------------------------------------------------------


def authorized_operations(ctx: Context, rtype: ResourceType, name: str, wanted: bool) -> int:
    """KIP-430's bit field of what the caller may do with a resource (bit n: AclOperation
    n), or Kafka's "not asked" value when the request did not ask for it."""
    if not wanted:
        return AUTHORIZED_OPERATIONS_OMITTED
    bits = 0
    # The operations an ACL may name for this resource type (ALL is not reported).
    for op in VALID_OPERATIONS[rtype] - {Operation.ALL}:
        if ctx.may(op, rtype, name):
            bits |= 1 << op.kafka_code
    return bits


# --- Metadata ---------------------------------------------------------------------------


async def handle_metadata(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    requested = req.get("topics")
    tenant_topics = b.snapshot.tenant_topics(ctx.principal.tenant_id)
    if requested is None:
        names = sorted(n for n in tenant_topics if ctx.may(Operation.DESCRIBE, T, n))
        explicit = False
    else:
        names = [t["name"] for t in requested if t.get("name") is not None]
        explicit = True
    created = False
    topics = []
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
            topics.append(_topic_metadata(b, topic))
            topics[-1]["topic_authorized_operations"] = authorized_operations(
                ctx, T, name, bool(req.get("include_topic_authorized_operations"))
            )
    if created:
        await b.refresh_metadata()
    return {
        "throttle_time_ms": 0,
        "brokers": b.cluster_metadata(ctx.tls),
        "cluster_id": b.snapshot.cluster_id,
        "controller_id": b.config.broker_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            ctx,
            ResourceType.CLUSTER,
            CLUSTER_RESOURCE_NAME,
            bool(req.get("include_cluster_authorized_operations")),
        ),
    }


async def _auto_create(ctx: Context, name: str) -> int:
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
        await ctx.broker.call_store(
            ctx.broker.store.create_topic,
            ctx.principal,
            name,
            ctx.broker.default_partitions(ctx.principal.tenant_id),
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


def _topic_error(name: str, code: int) -> dict[str, Any]:
    return {"error_code": code, "name": name, "partitions": [], "is_internal": False}


def _topic_metadata(b: Broker, topic: TopicInfo) -> dict[str, Any]:
    partitions = []
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


# --- Produce ------------------------------------------------------------------------------


# CreateTopics/CreatePartitions with replica assignments, from a tenant: the service places
# replicas (racks apart, evenly); operators place them with their own principal
# (internal_auth.operator_username) or move them with the REST reassignment API.
MANAGED_PLACEMENT = (
    "replica placement is managed by Millrace: omit the replica assignments (only an "
    "operator places replicas by hand, or moves them with POST /api/v1/cluster/reassignments/)"
)

# Refused batches whose cause has an error code of its own (the rest: CORRUPT_MESSAGE).
_REFUSED_BATCH = {
    "too_large": E.MESSAGE_TOO_LARGE,
    "no_key": E.INVALID_RECORD,
    "bad_timestamp": E.INVALID_TIMESTAMP,
}


def min_insync(topic: TopicInfo) -> int:
    return int(effective_configs(topic.configs)["min.insync.replicas"])


class CloseConnection(Exception):
    """A handler's answer is to close the connection (logged by the server with the reason)."""


_unserved_logged: set[tuple[str, str, int]] = set()  # (host, client id, version), bounded


def _unserved_produce(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    """Produce v0-2: advertised as Kafka 4 does, answered UNSUPPORTED_VERSION everywhere."""
    seen = (ctx.host, ctx.client_id, ctx.version)
    if seen not in _unserved_logged:
        if len(_unserved_logged) >= 1024:
            _unserved_logged.clear()
        _unserved_logged.add(seen)
        logger.info(
            "client %r at %s sent Produce v%s (message format v0/v1); Produce v%s-%s is "
            "served: answered UNSUPPORTED_VERSION",
            ctx.client_id,
            ctx.host,
            ctx.version,
            produce.SERVED_FROM,
            produce.VALID[1],
        )
    if req["acks"] == 0:
        # No response exists for acks=0; closing is how Kafka tells such a producer.
        raise CloseConnection(f"Produce v{ctx.version} with acks=0 is not served")
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [
                    {
                        "index": p["index"],
                        "error_code": E.UNSUPPORTED_VERSION,
                        "base_offset": -1,
                        "log_append_time_ms": -1,
                    }
                    for p in t["partition_data"]
                ],
            }
            for t in req["topic_data"]
        ],
        "throttle_time_ms": 0,
    }


async def handle_produce(ctx: Context, req: dict[str, Any]) -> dict[str, Any] | None:
    if ctx.version < produce.SERVED_FROM:
        return _unserved_produce(ctx, req)
    b = ctx.broker
    acks = req["acks"]
    results = []
    total_bytes = 0
    # acks=all: (response entry, last offset, leader state, min ISR) to wait for.
    waiting: list[tuple[dict[str, Any], int, LeaderState, int]] = []
    for t in req["topic_data"]:
        partitions = []
        topic = ctx.topic(t["name"])
        allowed = topic is not None and ctx.may(Operation.WRITE, T, t["name"])
        for p in t["partition_data"]:
            records = p["records"]
            total_bytes += len(records) if records is not None else 0
            code: int = E.NONE
            message, info, log = None, None, None
            record_errors: list[dict[str, Any]] = []
            if acks not in (-1, 0, 1):
                code = E.INVALID_REQUIRED_ACKS
            elif topic is None:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            elif not allowed:
                code = E.TOPIC_AUTHORIZATION_FAILED
            elif records is None:
                code = E.CORRUPT_MESSAGE
            elif b.tenant_over_storage(ctx.principal.tenant_id):
                code, message = E.POLICY_VIOLATION, "tenant storage limit reached"
            else:
                log, code = b.leader_log(topic, p["index"])
            state = None
            if log is not None and code == E.NONE and topic is not None:
                state = b.replicas.leader_state(topic, p["index"])
                if acks == -1 and state is not None and len(state.isr) < min_insync(topic):
                    code = E.NOT_ENOUGH_REPLICAS
                    message = (
                        f"the ISR has {len(state.isr)} replicas; min.insync.replicas is "
                        f"{min_insync(topic)}"
                    )
            if log is not None and code == E.NONE and topic is not None:
                try:
                    epoch = topic.partitions[p["index"]].leader_epoch
                    info = log.append(records, leader_epoch=epoch)
                    tp = TopicPartition(topic.topic_id, p["index"])
                    b.after_append(ctx.principal.tenant_id, tp, log, len(records), state)
                    if not info.duplicate:
                        b.metrics.produced(
                            ctx.principal.tenant_slug, topic.name, len(records), info.records
                        )
                except InvalidRecordBatch as exc:
                    code = _REFUSED_BATCH.get(exc.reason, E.CORRUPT_MESSAGE)
                    message = str(exc)
                    if exc.record_index is not None:
                        record_errors = [
                            {"batch_index": exc.record_index, "batch_index_error_message": message}
                        ]
                except ProducerFenced as exc:
                    code, message = E.INVALID_PRODUCER_EPOCH, str(exc)
                except OutOfOrderSequence as exc:
                    code, message = E.OUT_OF_ORDER_SEQUENCE_NUMBER, str(exc)
                except LogIOError as exc:
                    code, message = E.KAFKA_STORAGE_ERROR, str(exc)
            entry = {
                "index": p["index"],
                "error_code": code,
                "base_offset": info.first_offset if info else -1,
                "log_append_time_ms": info.log_append_time if info else -1,
                "log_start_offset": log.log_start_offset if log is not None else -1,
                "record_errors": record_errors,
                "error_message": message,
            }
            partitions.append(entry)
            if acks == -1 and state is not None and info is not None and topic is not None:
                waiting.append((entry, info.last_offset, state, min_insync(topic)))
        results.append({"name": t["name"], "partition_responses": partitions})
    if waiting:
        await _wait_for_replicas(b, waiting, req["timeout_ms"])
    throttle = b.quotas.record(
        ctx.principal.tenant_id,
        "produce",
        total_bytes,
        b.tenant_rate(ctx.principal.tenant_id, "produce"),
    )
    if throttle:
        b.metrics.throttled(ctx.principal.tenant_slug, "produce", throttle)
    if acks == 0:
        if throttle:
            await asyncio.sleep(throttle / 1000)
        return None
    return {"responses": results, "throttle_time_ms": throttle}


async def _wait_for_replicas(
    b: Broker, waiting: list[tuple[dict[str, Any], int, LeaderState, int]], timeout_ms: int
) -> None:
    """acks=all: answer once the ISR holds each batch (the high watermark passed it)."""
    deadline = time.monotonic() + max(0, timeout_ms) / 1000
    for entry, last_offset, state, min_isr in waiting:
        code = await b.replicas.wait_for_high_watermark(state, last_offset, deadline)
        if code == E.REQUEST_TIMED_OUT:
            entry["error_code"] = code
            entry["error_message"] = "the in-sync replicas did not confirm the write in time"
        elif code != E.NONE:
            entry["error_code"] = code
            entry["error_message"] = "this broker stopped leading the partition meanwhile"
        elif len(state.isr) < min_isr:
            entry["error_code"] = E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            entry["error_message"] = (
                f"written, but the ISR shrank to {len(state.isr)} (min.insync.replicas {min_isr})"
            )


async def handle_init_producer_id(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    """An id and epoch for an idempotent producer (transactions are not supported yet)."""
    if req.get("transactional_id") is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    tenant_topics = ctx.broker.snapshot.tenant_topics(ctx.principal.tenant_id)
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
    new_id = await ctx.broker.next_producer_id()
    return {"throttle_time_ms": 0, "error_code": E.NONE, "producer_id": new_id, "producer_epoch": 0}


# --- Fetch ----------------------------------------------------------------------------------


def epoch_error(topic: TopicInfo, index: int, current_leader_epoch: int) -> int:
    """KIP-320 fencing: a request that names a leader epoch must name the current one."""
    if current_leader_epoch < 0 or not 0 <= index < topic.partition_count:
        return E.NONE
    epoch = topic.partitions[index].leader_epoch
    if current_leader_epoch < epoch:
        return E.FENCED_LEADER_EPOCH
    if current_leader_epoch > epoch:
        return E.UNKNOWN_LEADER_EPOCH
    return E.NONE


async def handle_fetch(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    replica = req.get("replica_id", -1)
    if replica >= 0 and not ctx.principal.broker:
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "session_id": 0,
            "responses": [],
        }
    deadline = time.monotonic() + max(0, req["max_wait_ms"]) / 1000
    # A follower waits for appends (it reads to the log end); a consumer for the high
    # watermark. Only the partitions asked for wake the request.
    waiters = b.appended if replica >= 0 else b.hw_moved
    keys: list[TopicPartition] = []
    first = True
    while True:
        responses, total = _read_fetch(ctx, req, replica if first else -1, keys if first else None)
        first = False
        if total >= req["min_bytes"] or not keys:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await waiters.wait(keys, remaining)
    throttle = 0
    if replica < 0:  # replication is not a tenant's consumption
        _count_consumed(ctx, responses)
        throttle = b.quotas.record(
            ctx.principal.tenant_id,
            "fetch",
            total,
            b.tenant_rate(ctx.principal.tenant_id, "fetch"),
        )
        if throttle:
            b.metrics.throttled(ctx.principal.tenant_slug, "fetch", throttle)
    elif total:
        b.metrics.replication_bytes_out.inc(total)
    return {
        "throttle_time_ms": throttle,
        "error_code": E.NONE,
        "session_id": 0,
        "responses": responses,
    }


def _count_consumed(ctx: Context, responses: list[dict[str, Any]]) -> None:
    metrics = ctx.broker.metrics
    for t in responses:
        for p in t["partitions"]:
            found = p["records"]
            if isinstance(found, FileSlice) and found.length:
                records = max(0, found.next_offset - found.first_offset)
                metrics.consumed(ctx.principal.tenant_slug, t["topic"], found.length, records)


def _read_fetch(
    ctx: Context,
    req: dict[str, Any],
    record_replica: int = -1,
    keys: list[TopicPartition] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """One pass over the requested partitions. Consumers read up to the high watermark; a
    follower (``replica_id``) reads up to the log end, and ``record_replica`` tells the
    leader where that follower is (once per request). ``keys`` collects the partitions
    that were read, to wait on."""
    replica = req.get("replica_id", -1)
    budget = req.get("max_bytes", 0x7FFFFFFF)
    total = 0
    responses = []
    for t in req["topics"]:
        topic = ctx.topic(t["topic"])
        allowed = topic is not None and ctx.may(Operation.READ, T, t["topic"])
        partitions = []
        for p in t["partitions"]:
            entry: dict[str, Any] = {
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
            log, code = partition_log(ctx, topic, allowed, p["partition"])
            if log is not None and topic is not None:
                code = epoch_error(topic, p["partition"], p.get("current_leader_epoch", -1))
            if log is None or code != E.NONE or topic is None:
                entry["error_code"] = code
                continue
            if keys is not None:
                keys.append(TopicPartition(topic.topic_id, p["partition"]))
            upto: int | None = log.high_watermark
            if replica >= 0:
                state = ctx.broker.replicas.leader_state(topic, p["partition"])
                if state is None:
                    entry["error_code"] = E.NOT_LEADER_OR_FOLLOWER
                    continue
                if record_replica >= 0:
                    ctx.broker.replicas.follower_fetched(state, replica, p["fetch_offset"])
                upto = None
            entry.update(
                high_watermark=log.high_watermark,
                last_stable_offset=log.high_watermark,
                log_start_offset=log.log_start_offset,
            )
            limit = min(p["partition_max_bytes"], max(0, budget - total))
            try:
                found = log.read(p["fetch_offset"], limit, max_offset=upto, min_one=total == 0)
            except OffsetOutOfRange:
                entry["error_code"] = E.OFFSET_OUT_OF_RANGE
                continue
            if found is not None and found.length:
                entry["records"] = found
                total += found.length
        responses.append({"topic": t["topic"], "partitions": partitions})
    return responses, total


# --- OffsetForLeaderEpoch ---------------------------------------------------------------------


async def handle_offset_for_leader_epoch(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    """Where an epoch ends in the leader's log: (the largest epoch <= it, its end offset)."""
    topics = []
    for t in req["topics"]:
        topic = ctx.topic(t["topic"])
        allowed = topic is not None and ctx.may(Operation.DESCRIBE, T, t["topic"])
        partitions = []
        for p in t["partitions"]:
            entry = {
                "error_code": E.NONE,
                "partition": p["partition"],
                "leader_epoch": -1,
                "end_offset": -1,
            }
            partitions.append(entry)
            log, code = partition_log(ctx, topic, allowed, p["partition"])
            if log is not None and topic is not None:
                code = epoch_error(topic, p["partition"], p["current_leader_epoch"])
            if log is None or code != E.NONE:
                entry["error_code"] = code
                continue
            epoch, end = log.leader_epochs.end_offset_for(p["leader_epoch"], log.log_end_offset)
            entry.update(leader_epoch=epoch, end_offset=end)
        topics.append({"topic": t["topic"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


# --- ListOffsets ------------------------------------------------------------------------------

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


async def handle_list_offsets(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    if req.get("replica_id", -1) >= 0:
        code = E.CLUSTER_AUTHORIZATION_FAILED
    else:
        code = None
    topics = []
    for t in req["topics"]:
        topic = ctx.topic(t["name"])
        allowed = topic is not None and ctx.may(Operation.DESCRIBE, T, t["name"])
        partitions = []
        for p in t["partitions"]:
            entry = {
                "partition_index": p["partition_index"],
                "error_code": E.NONE,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            partitions.append(entry)
            if code is not None:
                entry["error_code"] = code
            else:
                log, err = partition_log(ctx, topic, allowed, p["partition_index"])
                if log is None:
                    entry["error_code"] = err
                    continue
                ts = p["timestamp"]
                if ts == LATEST:
                    entry["offset"] = log.high_watermark
                elif ts == EARLIEST:
                    entry["offset"] = log.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    found = log.offset_for_timestamp(0)
                    entry["offset"] = found.offset if found else -1
                else:
                    found = log.offset_for_timestamp(ts)
                    if found is not None and found.offset < log.high_watermark:
                        entry["offset"], entry["timestamp"] = found.offset, found.timestamp
        topics.append({"name": t["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


# --- topic admin ---------------------------------------------------------------------------------


def _assignment_refusal(ctx: Context, topic: dict[str, Any]) -> tuple[int, str] | None:
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


async def handle_create_topics(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    results = []
    for t in req["topics"]:
        name = t["name"]
        entry: dict[str, Any] = {
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
        if t.get("assignments"):
            refusal = _assignment_refusal(ctx, t)
            if refusal is not None:
                entry["error_code"], entry["error_message"] = refusal
                continue
            ordered = sorted(t["assignments"], key=lambda a: a["partition_index"])
            assignment = [a["broker_ids"] for a in ordered]
        partitions = (
            t["num_partitions"]
            if t["num_partitions"] > 0
            else b.default_partitions(ctx.principal.tenant_id)
        )
        rf = t["replication_factor"] if t["replication_factor"] > 0 else None
        if assignment is not None:
            partitions, rf = len(assignment), len(assignment[0])
        configs = {c["name"]: c["value"] for c in t.get("configs", [])}
        try:
            await b.call_store(
                b.store.create_topic,
                ctx.principal,
                name,
                partitions,
                rf,
                configs,
                req.get("validate_only", False),
                assignment,
            )
            entry["num_partitions"] = partitions
            entry["replication_factor"] = rf or 1
        except AdminError as exc:
            entry["error_code"], entry["error_message"] = exc.error_code, exc.message
    await b.refresh_metadata()
    return {"throttle_time_ms": 0, "topics": results}


async def handle_delete_topics(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    names = list(req.get("topic_names") or [])
    for t in req.get("topics") or []:
        if t.get("name"):
            names.append(t["name"])
        elif t.get("topic_id"):
            found = b.snapshot_topic_by_id(ctx.principal.tenant_id, t["topic_id"])
            names.append(found.name if found else "")
    results = []
    for name in names:
        topic = ctx.topic(name)
        entry: dict[str, Any] = {
            "name": name,
            "topic_id": topic.topic_id if topic else None,
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
                await b.call_store(b.store.delete_topic, ctx.principal, name)
            except AdminError as exc:
                entry["error_code"], entry["error_message"] = exc.error_code, exc.message
    await b.refresh_metadata()
    return {"throttle_time_ms": 0, "responses": results}


async def handle_create_partitions(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    results = []
    for t in req["topics"]:
        name = t["name"]
        entry: dict[str, Any] = {"name": name, "error_code": E.NONE, "error_message": None}
        results.append(entry)
        if ctx.topic(name) is None:
            entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
        elif not ctx.may(Operation.ALTER, T, name):
            entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
        elif t.get("assignments") and not ctx.principal.operator:
            entry["error_code"], entry["error_message"] = E.POLICY_VIOLATION, MANAGED_PLACEMENT
        else:
            assignment = (
                [a["broker_ids"] for a in t["assignments"]] if t.get("assignments") else None
            )
            try:
                await b.call_store(
                    b.store.create_partitions,
                    ctx.principal,
                    name,
                    t["count"],
                    req.get("validate_only", False),
                    assignment,
                )
            except AdminError as exc:
                entry["error_code"], entry["error_message"] = exc.error_code, exc.message
    await b.refresh_metadata()
    return {"throttle_time_ms": 0, "results": results}


async def handle_delete_records(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    topics = []
    for t in req["topics"]:
        topic = ctx.topic(t["name"])
        allowed = topic is not None and ctx.may(Operation.DELETE, T, t["name"])
        partitions = []
        for p in t["partitions"]:
            entry = {
                "partition_index": p["partition_index"],
                "low_watermark": -1,
                "error_code": E.NONE,
            }
            partitions.append(entry)
            log, code = partition_log(ctx, topic, allowed, p["partition_index"])
            if log is None:
                entry["error_code"] = code
                continue
            # Only -1 means "up to the high watermark" (Kafka's HIGH_WATERMARK); any other
            # negative offset is out of range, as in Kafka.
            if p["offset"] < -1:
                entry["error_code"] = E.OFFSET_OUT_OF_RANGE
                continue
            offset = p["offset"] if p["offset"] >= 0 else log.high_watermark
            try:
                entry["low_watermark"] = log.delete_records_before(offset)
            except OffsetOutOfRange:
                entry["error_code"] = E.OFFSET_OUT_OF_RANGE
        topics.append({"name": t["name"], "partitions": partitions})
        deleted = {
            str(p["partition_index"]): p["low_watermark"]
            for p in partitions
            if p["error_code"] == E.NONE
        }
        if deleted:
            await audit(ctx, "records.delete", "topic", t["name"], {"low_watermarks": deleted})
    return {"throttle_time_ms": 0, "topics": topics}


async def audit(
    ctx: Context, action: str, object_type: str, object_repr: str, after: dict[str, Any]
) -> None:
    """Record a data-plane change in the audit log. The change is made already: a failure
    to record it is logged, and the request is still answered."""
    try:
        await ctx.broker.call_store(
            ctx.broker.store.audit, ctx.principal, action, object_type, object_repr, after
        )
    except Exception:
        logger.exception("could not audit %s of %s %s", action, object_type, object_repr)


# --- configs --------------------------------------------------------------------------------

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
CONFIG_TYPES = {bool: 1, str: 2, int: 5}  # BOOLEAN, STRING, LONG
SOURCE_TOPIC, SOURCE_DEFAULT = 1, 5


async def handle_describe_configs(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    results = []
    for r in req["resources"]:
        entry: dict[str, Any] = {
            "error_code": E.NONE,
            "error_message": None,
            "resource_type": r["resource_type"],
            "resource_name": r["resource_name"],
            "configs": [],
        }
        results.append(entry)
        if r["resource_type"] == BROKER_RESOURCE:
            continue
        if r["resource_type"] != TOPIC_RESOURCE:
            entry["error_code"] = E.INVALID_REQUEST
            continue
        topic = ctx.topic(r["resource_name"])
        if topic is None:
            entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
        elif not ctx.may(Operation.DESCRIBE_CONFIGS, T, topic.name):
            entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
        else:
            wanted = r.get("configuration_keys")
            values = effective_configs(topic.configs)
            for name, definition in TOPIC_CONFIGS.items():
                if wanted is not None and name not in wanted:
                    continue
                overridden = name in topic.configs
                entry["configs"].append(
                    {
                        "name": name,
                        "value": definition.to_kafka_string(values[name]),
                        "read_only": False,
                        "config_source": SOURCE_TOPIC if overridden else SOURCE_DEFAULT,
                        "is_sensitive": False,
                        "synonyms": [],
                        "config_type": CONFIG_TYPES.get(definition.kind, 2),
                        "documentation": definition.doc
                        if req.get("include_documentation")
                        else None,
                    }
                )
    return {"throttle_time_ms": 0, "results": results}


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _config_target(ctx: Context, r: dict[str, Any]) -> tuple[dict[str, Any], TopicInfo | None]:
    """The response entry for one alter-configs resource and, if alterable, its topic."""
    entry: dict[str, Any] = {
        "error_code": E.NONE,
        "error_message": None,
        "resource_type": r["resource_type"],
        "resource_name": r["resource_name"],
    }
    if r["resource_type"] != TOPIC_RESOURCE:
        entry["error_code"] = E.INVALID_REQUEST
        entry["error_message"] = "only topic configs can be altered"
        return entry, None
    topic = ctx.topic(r["resource_name"])
    if topic is None:
        entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
    elif not ctx.may(Operation.ALTER_CONFIGS, T, topic.name):
        entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
    return entry, topic if entry["error_code"] == E.NONE else None


async def _apply_config_changes(
    ctx: Context,
    entry: dict[str, Any],
    topic: TopicInfo,
    changes: dict[str, str | None],
    validate_only: bool,
) -> None:
    try:
        await ctx.broker.call_store(
            ctx.broker.store.alter_topic_configs, ctx.principal, topic.name, changes, validate_only
        )
    except AdminError as exc:
        entry["error_code"], entry["error_message"] = exc.error_code, exc.message


async def handle_incremental_alter_configs(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    responses = []
    for r in req["resources"]:
        entry, topic = _config_target(ctx, r)
        responses.append(entry)
        if topic is None:
            continue
        current = effective_configs(topic.configs)
        changes: dict[str, str | None] = {}
        for c in r["configs"]:
            op, name, value = c["config_operation"], c["name"], c["value"]
            if op == SET:
                changes[name] = value
            elif op == DELETE:
                changes[name] = None
            elif op in (APPEND, SUBTRACT) and name == "cleanup.policy":
                parts = set(str(current[name]).split(",")) - {""}
                delta = set((value or "").split(",")) - {""}
                parts = parts | delta if op == APPEND else parts - delta
                changes[name] = ",".join(sorted(parts)) or None
            else:
                entry["error_code"] = E.INVALID_CONFIG
                entry["error_message"] = f"operation {op} does not apply to {name}"
                break
        if entry["error_code"] == E.NONE:
            await _apply_config_changes(ctx, entry, topic, changes, req.get("validate_only", False))
    await ctx.broker.refresh_metadata()
    return {"throttle_time_ms": 0, "responses": responses}


async def handle_alter_configs(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    """Legacy AlterConfigs: the given configs become the topic's whole set of overrides."""
    responses = []
    for r in req["resources"]:
        entry, topic = _config_target(ctx, r)
        responses.append(entry)
        if topic is None:
            continue
        given = {c["name"]: c["value"] for c in r["configs"]}
        changes: dict[str, str | None] = {name: None for name in topic.configs if name not in given}
        changes.update(given)
        await _apply_config_changes(ctx, entry, topic, changes, req.get("validate_only", False))
    await ctx.broker.refresh_metadata()
    return {"throttle_time_ms": 0, "responses": responses}


# --- cluster and ACLs ---------------------------------------------------------------------------


async def handle_describe_cluster(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    code = E.NONE if ctx.may_cluster(Operation.DESCRIBE) else E.CLUSTER_AUTHORIZATION_FAILED
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": None,
        "cluster_id": b.snapshot.cluster_id,
        "controller_id": b.config.broker_id,
        "brokers": [
            {"broker_id": m["node_id"], "host": m["host"], "port": m["port"], "rack": m["rack"]}
            for m in b.cluster_metadata(ctx.tls)
        ]
        if code == E.NONE
        else [],
        "cluster_authorized_operations": authorized_operations(
            ctx,
            ResourceType.CLUSTER,
            CLUSTER_RESOURCE_NAME,
            code == E.NONE and bool(req.get("include_cluster_authorized_operations")),
        ),
    }


async def handle_describe_log_dirs(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    """The sizes of the partition logs this broker holds (as leader or follower).

    Kafka asks for Describe on the cluster; Millrace also keeps to the principal's tenant
    and to the topics it may describe, so an unknown, another tenant's and an undescribable
    topic are all simply absent (as partitions this broker holds no log for are). One
    result: a broker has one data directory.
    """
    if not ctx.may_cluster(Operation.DESCRIBE):
        # v0-2 have no top-level error code: their answer is just the empty result list.
        return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    b = ctx.broker
    requested = req.get("topics")
    wanted: dict[str, set[int] | None]  # topic name -> partitions (None: all of them)
    if requested is None:
        wanted = dict.fromkeys(b.snapshot.tenant_topics(ctx.principal.tenant_id))
    else:
        asked: dict[str, set[int]] = {}
        for t in requested:
            asked.setdefault(t["topic"], set()).update(t["partitions"])
        wanted = {name: indexes for name, indexes in asked.items()}
    topics = []
    for name, indexes in wanted.items():
        topic = ctx.topic(name)
        if topic is None or not ctx.may(Operation.DESCRIBE, T, name):
            continue
        partitions = []
        for p in topic.partitions:
            if indexes is not None and p.index not in indexes:
                continue
            log = b.logs.get(TopicPartition(topic.topic_id, p.index))
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
    tenant = b.snapshot.tenants.get(ctx.principal.tenant_id)
    if tenant is None:
        total = usable = describe_log_dirs.UNKNOWN_BYTES
    else:
        total = tenant.max_storage_bytes
        usable = max(0, total - b.tenant_storage(ctx.principal.tenant_id))
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


_RESOURCE_BY_CODE = {t.kafka_code: t for t in ResourceType}
_PATTERN_BY_CODE = {p.kafka_code: p for p in PatternType}
_OPERATION_BY_CODE = {o.kafka_code: o for o in Operation}
_PERMISSION_BY_CODE = {p.kafka_code: p for p in Permission}
ANY, MATCH = 1, 2


def _filter_matches(f: dict[str, Any], binding: AclBinding) -> bool:
    rtype = int(f.get("resource_type_filter", ANY))
    if rtype != ANY and _RESOURCE_BY_CODE.get(rtype) is not binding.resource_type:
        return False
    name = f.get("resource_name_filter")
    pattern = f.get("pattern_type_filter", PatternType.LITERAL.kafka_code)
    if pattern == MATCH:
        if name is not None and not binding.covers_resource(binding.resource_type, name):
            return False
    else:
        if pattern != ANY and _PATTERN_BY_CODE.get(pattern) is not binding.pattern_type:
            return False
        if name is not None and name != binding.resource_name:
            return False
    principal = f.get("principal_filter")
    if principal is not None and principal != binding.principal:
        return False
    host = f.get("host_filter")
    if host is not None and host != binding.host:
        return False
    op = int(f.get("operation", ANY))
    if op != ANY and _OPERATION_BY_CODE.get(op) is not binding.operation:
        return False
    perm = int(f.get("permission_type", ANY))
    return perm == ANY or _PERMISSION_BY_CODE.get(perm) is binding.permission


def _acl_description(b: AclBinding) -> dict[str, Any]:
    return {
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.kafka_code,
        "permission_type": b.permission.kafka_code,
    }


async def handle_describe_acls(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    if not ctx.may_cluster(Operation.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "resources": [],
        }
    grouped: dict[tuple[Any, ...], list[AclBinding]] = {}
    for binding in ctx.broker.snapshot.tenant_acls(ctx.principal.tenant_id):
        if _filter_matches(req, binding):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            grouped.setdefault(key, []).append(binding)
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "error_message": None,
        "resources": [
            {
                "resource_type": rt.kafka_code,
                "resource_name": name,
                "pattern_type": pt.kafka_code,
                "acls": [_acl_description(b) for b in bindings],
            }
            for (rt, name, pt), bindings in grouped.items()
        ],
    }


async def handle_create_acls(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    results = []
    allowed = ctx.may_cluster(Operation.ALTER)
    for c in req["creations"]:
        entry: dict[str, Any] = {"error_code": E.NONE, "error_message": None}
        results.append(entry)
        if not allowed:
            entry["error_code"] = E.CLUSTER_AUTHORIZATION_FAILED
            continue
        try:
            binding = AclBinding(
                principal=c["principal"],
                resource_type=_RESOURCE_BY_CODE[c["resource_type"]],
                pattern_type=_PATTERN_BY_CODE[c["resource_pattern_type"]],
                resource_name=c["resource_name"],
                operation=_OPERATION_BY_CODE[c["operation"]],
                permission=_PERMISSION_BY_CODE[c["permission_type"]],
                host=c["host"],
            )
            binding.validate()
            await b.call_store(b.store.create_acl, ctx.principal, binding)
        except (KeyError, InvalidAclBinding) as exc:
            entry["error_code"], entry["error_message"] = E.INVALID_REQUEST, str(exc)
        except AdminError as exc:
            entry["error_code"], entry["error_message"] = E.INVALID_REQUEST, exc.message
    await b.refresh_metadata()
    return {"throttle_time_ms": 0, "results": results}


async def handle_delete_acls(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    b = ctx.broker
    allowed = ctx.may_cluster(Operation.ALTER)
    results: list[dict[str, Any]] = []
    for f in req["filters"]:
        if not allowed:
            results.append(
                {
                    "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None,
                    "matching_acls": [],
                }
            )
            continue
        deleted = await b.call_store(
            b.store.delete_acls, ctx.principal, lambda binding, f=f: _filter_matches(f, binding)
        )
        results.append(
            {
                "error_code": E.NONE,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": E.NONE,
                        "error_message": None,
                        "resource_type": d.resource_type.kafka_code,
                        "resource_name": d.resource_name,
                        "pattern_type": d.pattern_type.kafka_code,
                        **_acl_description(d),
                    }
                    for d in deleted
                ],
            }
        )
    await b.refresh_metadata()
    return {"throttle_time_ms": 0, "filter_results": results}
