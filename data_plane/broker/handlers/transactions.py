"""Kafka's transaction APIs (KIP-98, Step 13), and InitProducerId for idempotent producers
too: authorization and shapes around the transaction coordinator (``data_plane.txn``).

Transactional ids are resolved inside the principal's tenant, like group ids. Kafka's ACL
rules: Write on the TransactionalId to initialise a producer with it, add partitions or
offsets, commit offsets in a transaction and end it (plus Write on each topic added, Read
on the group whose offsets are added); Describe on it to find its coordinator and to
describe or list it. WriteTxnMarkers is for brokers only (Kafka's ClusterAction).

Each id has one coordinator, placed over the live brokers as groups are
(:meth:`Cluster.transaction_coordinator_for`); a request on an id this broker does not
coordinate is answered NOT_COORDINATOR and the client looks again (FindCoordinator with
key type 1, answered in ``groups.py``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import defaultdict

from data_plane.acl import Operation, ResourceType
from data_plane.broker.handlers.context import (
    E,
    Handler,
    RequestContext,
    T,
    group_check,
    owner_error,
)
from data_plane.broker.txn_markers import MARKER_TIMEOUT_MS, marker_batch
from data_plane.broker.txn_router import parse_internal_id
from data_plane.groups.consumer_group import ConsumerGroup
from data_plane.groups.model import OffsetRecord
from data_plane.metadata.model import TopicInfo
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import add_offsets_to_txn as add_offsets_api
from data_plane.protocol.messages import add_partitions_to_txn as add_partitions_api
from data_plane.protocol.messages import describe_transactions as describe_api
from data_plane.protocol.messages import end_txn as end_txn_api
from data_plane.protocol.messages import init_producer_id as init_producer_id_api
from data_plane.protocol.messages import list_transactions as list_api
from data_plane.protocol.messages import txn_offset_commit as txn_offset_commit_api
from data_plane.protocol.messages import write_txn_markers as write_txn_markers_api
from data_plane.txn.coordinator import NotCoordinator, TransactionCoordinator
from data_plane.txn.model import TxnPartition, TxnState

logger = logging.getLogger("millrace.broker")
TXN = ResourceType.TRANSACTIONAL_ID


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return ctx.services.transactions


def txn_check(
    ctx: RequestContext, transactional_id: str, op: Operation = Operation.WRITE
) -> ErrorCode | None:
    """The checks of every request on a transactional id: the ACL (Write unless told),
    then whether this broker coordinates the id."""
    if not transactional_id:
        return E.INVALID_REQUEST
    if not ctx.may(op, TXN, transactional_id):
        return E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    tenant_id = ctx.principal.tenant_id
    return owner_error(
        ctx, ctx.services.cluster.transaction_coordinator_for(tenant_id, transactional_id)
    )


# --- InitProducerId ----------------------------------------------------------------------


async def handle_init_producer_id(
    ctx: RequestContext, req: bodies.InitProducerIdRequest
) -> bodies.InitProducerIdResponse:
    """An id and epoch for an idempotent producer, or a transactional one's from its
    id's coordinator."""
    if req["transactional_id"] is not None:
        return await _init_transactional_producer(ctx, req)
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


async def _init_transactional_producer(
    ctx: RequestContext, req: bodies.InitProducerIdRequest
) -> bodies.InitProducerIdResponse:
    transactional_id = req["transactional_id"] or ""
    out: bodies.InitProducerIdResponse = {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    error = txn_check(ctx, transactional_id)
    if error is not None:
        return out | {"error_code": error}
    try:
        code, producer_id, epoch = await _coordinator(ctx).init_producer_id(
            ctx.principal.tenant_id,
            transactional_id,
            req["transaction_timeout_ms"],
            expected_producer_id=req.get("producer_id", -1),
            expected_epoch=req.get("producer_epoch", -1),
        )
    except NotCoordinator:
        return out | {"error_code": E.NOT_COORDINATOR}
    if code == E.PRODUCER_FENCED and ctx.version < 4:
        code = E.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is v4+ (KIP-588)
    return out | {"error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


def _fenced(ctx: RequestContext, api_key: int, code: int) -> int:
    """PRODUCER_FENCED arrived with KIP-588; older versions say INVALID_PRODUCER_EPOCH."""
    if code == E.PRODUCER_FENCED and ctx.version < _FENCED_FROM[api_key]:
        return E.INVALID_PRODUCER_EPOCH
    return code


# The first version of each API that may answer PRODUCER_FENCED (Kafka's rule: the
# versions after KIP-588; older clients only know INVALID_PRODUCER_EPOCH).
_FENCED_FROM = {
    add_partitions_api.KEY: 2,
    add_offsets_api.KEY: 2,
    end_txn_api.KEY: 2,
    txn_offset_commit_api.KEY: 3,
}


# --- AddPartitionsToTxn -----------------------------------------------------------------


async def handle_add_partitions_to_txn(
    ctx: RequestContext, req: bodies.AddPartitionsToTxnRequest
) -> bodies.AddPartitionsToTxnResponse:
    if ctx.version >= 4:
        return await _add_partitions_for_brokers(ctx, req)
    transactional_id = req["v3_and_below_transactional_id"]
    topics = req["v3_and_below_topics"]
    results: dict[tuple[str, int], int] = {}
    wanted: list[TxnPartition] = []
    error = txn_check(ctx, transactional_id)
    for t in topics:
        topic = ctx.topic(t["name"])
        allowed = topic is not None and ctx.may(Operation.WRITE, T, t["name"])
        for index in t["partitions"]:
            code: int = E.NONE
            if error is not None:
                code = error
            elif topic is None or not 0 <= index < topic.partition_count:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            elif not allowed:
                code = E.TOPIC_AUTHORIZATION_FAILED
            else:
                wanted.append(TxnPartition(str(topic.topic_id), index))
            results[(t["name"], index)] = code
    if any(code != E.NONE for code in results.values()):
        # Kafka adds none when one fails: the others were not attempted.
        results = {k: (E.OPERATION_NOT_ATTEMPTED if v == E.NONE else v) for k, v in results.items()}
    elif wanted:
        try:
            code = await _coordinator(ctx).add_partitions(
                ctx.principal.tenant_id,
                transactional_id,
                req["v3_and_below_producer_id"],
                req["v3_and_below_producer_epoch"],
                wanted,
            )
        except NotCoordinator:
            code = E.NOT_COORDINATOR
        code = _fenced(ctx, add_partitions_api.KEY, code)
        results = {k: code for k in results}
    by_topic: dict[
        str, list[bodies.AddPartitionsToTxnResponseResultsByTopicV3AndBelowResultsByPartition]
    ] = defaultdict(list)
    for (name, index), code in results.items():
        by_topic[name].append({"partition_index": index, "partition_error_code": code})
    return {
        "throttle_time_ms": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
        ],
    }


async def _add_partitions_for_brokers(
    ctx: RequestContext, req: bodies.AddPartitionsToTxnRequest
) -> bodies.AddPartitionsToTxnResponse:
    """AddPartitionsToTxn v4+: brokers only (Kafka: ClusterAction). A partition leader of
    transactions V2 adds a producer's partition to its transaction (``verify_only``
    false), or asks whether it is in it. Ids are ``<tenant>/<id>``, topics topic ids
    (``data_plane.broker.txn_router``)."""
    if not ctx.principal.broker:
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "results_by_transaction": [],
        }
    results: list[bodies.AddPartitionsToTxnResponseResultsByTransaction] = []
    for txn in req["transactions"]:
        named, code = _named_here(ctx, txn["transactional_id"])
        partitions = [
            TxnPartition(t["name"], index) for t in txn["topics"] for index in t["partitions"]
        ]
        if named is not None:
            coordinator = _coordinator(ctx)
            args = (*named, txn["producer_id"], txn["producer_epoch"])
            if txn["verify_only"]:
                codes = [await coordinator.verify(*args, p) for p in partitions]
                code = next((c for c in codes if c != E.NONE), E.NONE)
            else:
                try:
                    code = await coordinator.add_partitions(*args, partitions)
                except NotCoordinator:
                    code = E.NOT_COORDINATOR
        by_topic: dict[
            str,
            list[
                bodies.AddPartitionsToTxnResponseResultsByTransactionTopicResultsResultsByPartition
            ],
        ] = defaultdict(list)
        for p in partitions:
            by_topic[p.topic_id].append({"partition_index": p.index, "partition_error_code": code})
        results.append(
            {
                "transactional_id": txn["transactional_id"],
                "topic_results": [
                    {"name": name, "results_by_partition": parts}
                    for name, parts in by_topic.items()
                ],
            }
        )
    return {"throttle_time_ms": 0, "error_code": E.NONE, "results_by_transaction": results}


# --- AddOffsetsToTxn / TxnOffsetCommit --------------------------------------------------


async def handle_add_offsets_to_txn(
    ctx: RequestContext, req: bodies.AddOffsetsToTxnRequest
) -> bodies.AddOffsetsToTxnResponse:
    if ctx.principal.broker:
        return await _add_offsets_for_brokers(ctx, req)
    transactional_id, group_id = req["transactional_id"], req["group_id"]
    error: int | None = txn_check(ctx, transactional_id)
    if error is None and not ctx.may(Operation.READ, ResourceType.GROUP, group_id):
        error = E.GROUP_AUTHORIZATION_FAILED
    if error is None:
        try:
            error = await _coordinator(ctx).add_offsets(
                ctx.principal.tenant_id,
                transactional_id,
                req["producer_id"],
                req["producer_epoch"],
                group_id,
            )
        except NotCoordinator:
            error = E.NOT_COORDINATOR
    return {
        "throttle_time_ms": 0,
        "error_code": _fenced(ctx, add_offsets_api.KEY, error or E.NONE),
    }


async def _add_offsets_for_brokers(
    ctx: RequestContext, req: bodies.AddOffsetsToTxnRequest
) -> bodies.AddOffsetsToTxnResponse:
    """A group coordinator of transactions V2 adds the group to a producer's transaction
    (TxnOffsetCommit v5); the client's rights on the group were checked there."""
    named, error = _named_here(ctx, req["transactional_id"])
    if named is not None:
        try:
            error = await _coordinator(ctx).add_offsets(
                *named, req["producer_id"], req["producer_epoch"], req["group_id"]
            )
        except NotCoordinator:
            error = E.NOT_COORDINATOR
    return {"throttle_time_ms": 0, "error_code": error}


def _named_here(ctx: RequestContext, value: str) -> tuple[tuple[int, str] | None, int]:
    """(tenant id, transactional id) of an id another broker sent, if this broker
    coordinates it; else None and why (INVALID_REQUEST, NOT_COORDINATOR)."""
    named = parse_internal_id(value)
    if named is None:
        return None, E.INVALID_REQUEST
    owner = ctx.services.cluster.transaction_coordinator_for(*named)
    if owner is None or owner.id != ctx.services.cluster.broker_id:
        return None, E.NOT_COORDINATOR
    return named, E.NONE


async def handle_txn_offset_commit(
    ctx: RequestContext, req: bodies.TxnOffsetCommitRequest
) -> bodies.TxnOffsetCommitResponse:
    """Offsets committed in a transaction, sent to the group's coordinator: kept apart
    until the transaction ends (the transaction coordinator settles them with its
    markers). KIP-447: a member id and generation, when given, must be the group's."""
    group_id = req["group_id"]
    tenant_id = ctx.principal.tenant_id
    limit = ctx.services.groups.config.offset_metadata_max_bytes
    now = int(time.time() * 1000)
    error: int | None = group_check(ctx, group_id)
    if error is None and not ctx.may(Operation.WRITE, TXN, req["transactional_id"]):
        error = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if error is None:
        error = await _check_member(ctx, req)
    if error is None and ctx.version >= TRANSACTIONS_V2_FROM[txn_offset_commit_api.KEY]:
        error = await _add_group_implicitly(ctx, req)
    results: dict[tuple[str, int], int] = {}
    offsets: list[OffsetRecord] = []
    for t in req["topics"]:
        topic = ctx.topic(t["name"])
        readable = topic is not None and ctx.may(Operation.READ, T, t["name"])
        for p in t["partitions"]:
            index = p["partition_index"]
            code: int = E.NONE
            metadata = p["committed_metadata"]
            if error is not None:
                code = error
            elif topic is None or not 0 <= index < topic.partition_count:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            elif not readable:
                code = E.TOPIC_AUTHORIZATION_FAILED
            elif metadata is not None and len(metadata.encode()) > limit:
                code = E.OFFSET_METADATA_TOO_LARGE
            else:
                offsets.append(
                    OffsetRecord(
                        t["name"],
                        index,
                        p["committed_offset"],
                        p.get("committed_leader_epoch", -1),
                        metadata,
                        now,
                    )
                )
            results[(t["name"], index)] = code
    if offsets:
        staged = await _coordinator(ctx).stage_offsets(
            tenant_id,
            req["transactional_id"],
            req["producer_id"],
            req["producer_epoch"],
            group_id,
            offsets,
        )
        if staged != E.NONE:
            results = {k: (staged if v == E.NONE else v) for k, v in results.items()}
    by_topic: dict[str, list[bodies.TxnOffsetCommitResponsePartitions]] = defaultdict(list)
    for (name, index), code in results.items():
        code = _fenced(ctx, txn_offset_commit_api.KEY, code)
        by_topic[name].append({"partition_index": index, "error_code": code})
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


async def _add_group_implicitly(
    ctx: RequestContext, req: bodies.TxnOffsetCommitRequest
) -> int | None:
    """TxnOffsetCommit v5, transactions V2: the producer sent no AddOffsetsToTxn; this
    group coordinator adds the group to its transaction, with the id's coordinator
    wherever it is (None: added)."""
    router = ctx.services.txn_router
    if router is None:
        return E.COORDINATOR_NOT_AVAILABLE
    try:
        code = await router.add(
            ctx.principal.tenant_id,
            req["transactional_id"],
            req["producer_id"],
            req["producer_epoch"],
            group=req["group_id"],
        )
    except Exception:  # the coordinator could not be asked: retriable
        logger.warning("adding a group to %r failed", req["transactional_id"], exc_info=True)
        code = E.COORDINATOR_NOT_AVAILABLE
    if code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS):
        code = E.COORDINATOR_NOT_AVAILABLE
    return None if code == E.NONE else code


async def _check_member(ctx: RequestContext, req: bodies.TxnOffsetCommitRequest) -> int | None:
    """KIP-447 group-metadata fencing, as Kafka checks it: a member id, when given, must
    be one of the group's; a generation (a consumer-protocol member's epoch), when given,
    must be the current one."""
    member_id = req.get("member_id", "")
    generation = req.get("generation_id", -1)
    if not member_id and generation < 0:
        return None  # a producer outside the group protocol: nothing to check
    found = await ctx.services.groups.load(ctx.principal.tenant_id, req["group_id"])
    if found is None:
        return E.ILLEGAL_GENERATION if generation >= 0 else None
    if isinstance(found, ConsumerGroup):
        member = found.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation != member.member_epoch:
            return E.ILLEGAL_GENERATION
        return None
    if member_id and member_id not in found.members:
        return E.UNKNOWN_MEMBER_ID
    if generation >= 0 and generation != found.generation:
        return E.ILLEGAL_GENERATION
    return None


# --- EndTxn ---------------------------------------------------------------------------


async def handle_end_txn(ctx: RequestContext, req: bodies.EndTxnRequest) -> bodies.EndTxnResponse:
    """EndTxn; v5 is transactions V2 (KIP-890 part 2): the epoch is bumped with every
    decision and the answer names the producer id and epoch of the next transaction. As
    in Kafka the request's version decides, not the advertised transaction.version."""
    transactional_id = req["transactional_id"]
    error: int | None = txn_check(ctx, transactional_id)
    producer_id, epoch = -1, -1
    if error is None:
        args = (
            ctx.principal.tenant_id,
            transactional_id,
            req["producer_id"],
            req["producer_epoch"],
            req["committed"],
        )
        try:
            if ctx.version >= TRANSACTIONS_V2_FROM[end_txn_api.KEY]:
                error, producer_id, epoch = await _coordinator(ctx).end_txn_v2(*args)
            else:
                error = await _coordinator(ctx).end_txn(*args)
        except NotCoordinator:
            error, producer_id, epoch = E.NOT_COORDINATOR, -1, -1
    return {
        "throttle_time_ms": 0,
        "error_code": _fenced(ctx, end_txn_api.KEY, error or E.NONE),
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


# The first version of each API that is transactions V2 (KIP-890 part 2).
TRANSACTIONS_V2_FROM = {end_txn_api.KEY: 5, txn_offset_commit_api.KEY: 5}


# --- WriteTxnMarkers (between brokers) -----------------------------------------------------


async def handle_write_txn_markers(
    ctx: RequestContext, req: bodies.WriteTxnMarkersRequest
) -> bodies.WriteTxnMarkersResponse:
    """A coordinator on another broker has this broker, the leader, append commit or
    abort markers. Topics are named by topic id (brokers belong to no tenant)."""
    markers: list[bodies.WriteTxnMarkersResponseMarkers] = []
    for m in req["markers"]:
        entries: list[tuple[TopicInfo, int, bytes]] = []
        slots: list[tuple[str, int]] = []
        codes: dict[tuple[str, int], int] = {}
        for t in m["topics"]:
            topic = ctx.topic(t["name"]) if ctx.principal.broker else None
            for index in t["partition_indexes"]:
                key = (t["name"], index)
                if not ctx.principal.broker:
                    codes[key] = E.CLUSTER_AUTHORIZATION_FAILED
                elif topic is None or not 0 <= index < topic.partition_count:
                    codes[key] = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    batch = marker_batch(
                        m["producer_id"],
                        m["producer_epoch"],
                        m["transaction_result"],
                        m["coordinator_epoch"],
                    )
                    entries.append((topic, index, batch))
                    slots.append(key)
        if entries:
            appended = await ctx.services.replicas.append_records(
                entries, -1, MARKER_TIMEOUT_MS, markers=True
            )
            for key, result in zip(slots, appended, strict=True):
                codes[key] = result.error
        by_topic: dict[str, list[bodies.WriteTxnMarkersResponsePartitions]] = defaultdict(list)
        for (name, index), code in codes.items():
            by_topic[name].append({"partition_index": index, "error_code": code})
        markers.append(
            {
                "producer_id": m["producer_id"],
                "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()],
            }
        )
    return {"markers": markers}


# --- DescribeTransactions / ListTransactions --------------------------------------------


async def handle_describe_transactions(
    ctx: RequestContext, req: bodies.DescribeTransactionsRequest
) -> bodies.DescribeTransactionsResponse:
    states: list[bodies.DescribeTransactionsResponseTransactionStates] = []
    for transactional_id in req["transactional_ids"]:
        entry: bodies.DescribeTransactionsResponseTransactionStates = {
            "error_code": E.NONE,
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        states.append(entry)
        error = txn_check(ctx, transactional_id, Operation.DESCRIBE)
        if error is not None:
            entry["error_code"] = error
            continue
        try:
            txn = await _coordinator(ctx).load(ctx.principal.tenant_id, transactional_id)
        except NotCoordinator:
            entry["error_code"] = E.NOT_COORDINATOR
            continue
        if txn is None or txn.state is TxnState.DEAD:
            entry["error_code"] = E.TRANSACTIONAL_ID_NOT_FOUND
            continue
        by_topic: dict[str, list[int]] = defaultdict(list)
        for p in sorted(txn.partitions, key=lambda p: (p.topic_id, p.index)):
            topic = ctx.snapshot.topic_by_id(_uuid(p.topic_id))
            if topic is not None and ctx.may(Operation.DESCRIBE, T, topic.name):
                by_topic[topic.name].append(p.index)
        entry.update(
            {
                "transaction_state": txn.state.value,
                "transaction_timeout_ms": txn.timeout_ms,
                "transaction_start_time_ms": txn.start_ms,
                "producer_id": txn.producer_id,
                "producer_epoch": txn.producer_epoch,
                "topics": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()],
            }
        )
    return {"throttle_time_ms": 0, "transaction_states": states}


async def handle_list_transactions(
    ctx: RequestContext, req: bodies.ListTransactionsRequest
) -> bodies.ListTransactionsResponse:
    """The transactions this broker coordinates (as Kafka's brokers answer: an admin
    client asks every broker), those the principal may Describe, filtered as asked."""
    known = {s.value for s in TxnState}
    wanted_states = set(req["state_filters"])
    unknown = sorted(wanted_states - known)
    pids = set(req["producer_id_filters"])
    duration = req.get("duration_filter", -1)
    pattern = req.get("transactional_id_pattern")
    now = int(time.time() * 1000)
    out: list[bodies.ListTransactionsResponseTransactionStates] = []
    cluster = ctx.services.cluster
    tenant_id = ctx.principal.tenant_id
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error:
        return {
            "throttle_time_ms": 0,
            "error_code": E.INVALID_REGULAR_EXPRESSION,
            "unknown_state_filters": unknown,
            "transaction_states": [],
        }
    stored = await _coordinator(ctx).list_stored(tenant_id)
    for txn in stored:
        owner = cluster.transaction_coordinator_for(tenant_id, txn.transactional_id)
        if owner is None or owner.id != cluster.broker_id:
            continue
        if wanted_states and txn.state.value not in wanted_states:
            continue
        if pids and txn.producer_id not in pids:
            continue
        if duration >= 0 and (txn.start_ms < 0 or now - txn.start_ms < duration):
            continue
        if regex is not None and not regex.fullmatch(txn.transactional_id):
            continue
        if not ctx.may(Operation.DESCRIBE, TXN, txn.transactional_id):
            continue
        out.append(
            {
                "transactional_id": txn.transactional_id,
                "producer_id": txn.producer_id,
                "transaction_state": txn.state.value,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "unknown_state_filters": unknown,
        "transaction_states": out,
    }


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        return uuid.UUID(int=0)


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    init_producer_id_api.KEY: handle_init_producer_id,
    add_partitions_api.KEY: handle_add_partitions_to_txn,
    add_offsets_api.KEY: handle_add_offsets_to_txn,
    end_txn_api.KEY: handle_end_txn,
    write_txn_markers_api.KEY: handle_write_txn_markers,
    txn_offset_commit_api.KEY: handle_txn_offset_commit,
    describe_api.KEY: handle_describe_transactions,
    list_api.KEY: handle_list_transactions,
}
