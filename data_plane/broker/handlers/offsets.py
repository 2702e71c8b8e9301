"""Partition offsets and state: OffsetForLeaderEpoch, ListOffsets, DeleteRecords,
DescribeProducers."""

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
    audit,
    leader_partition,
)
from data_plane.log.partition import OffsetOutOfRange, PartitionLog
from data_plane.protocol import bodies
from data_plane.protocol.messages import delete_records as delete_records_api
from data_plane.protocol.messages import describe_producers as describe_producers_api
from data_plane.protocol.messages import list_offsets as list_offsets_api
from data_plane.protocol.messages import offset_for_leader_epoch as offset_for_leader_epoch_api
from data_plane.replication.manager import epoch_error
from data_plane.topic_config import InvalidTopicName, validate_topic_name

logger = logging.getLogger("millrace.broker")


async def handle_offset_for_leader_epoch(
    ctx: RequestContext, req: bodies.OffsetForLeaderEpochRequest
) -> bodies.OffsetForLeaderEpochResponse:
    """Where an epoch ends in the leader's log: (the largest epoch <= it, its end offset)."""
    topics: list[bodies.OffsetForLeaderEpochResponseTopics] = []
    for t in req["topics"]:
        topic = ctx.topic(t["topic"])
        allowed = topic is not None and ctx.may(Operation.DESCRIBE, T, t["topic"])
        partitions: list[bodies.OffsetForLeaderEpochResponsePartitions] = []
        for p in t["partitions"]:
            entry: bodies.OffsetForLeaderEpochResponsePartitions = {
                "error_code": E.NONE,
                "partition": p["partition"],
                "leader_epoch": -1,
                "end_offset": -1,
            }
            partitions.append(entry)
            partition, code = leader_partition(ctx, topic, allowed, p["partition"])
            if partition is not None and topic is not None:
                code = epoch_error(topic, p["partition"], p.get("current_leader_epoch", -1))
            if partition is None or code != E.NONE:
                entry["error_code"] = code
                continue
            log = partition.log
            epoch, end = log.leader_epochs.end_offset_for(p["leader_epoch"], log.log_end_offset)
            entry["leader_epoch"], entry["end_offset"] = epoch, end
        topics.append({"topic": t["topic"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


# --- ListOffsets ------------------------------------------------------------------------------

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
# The first version allowed each special (negative) timestamp, as Kafka's ReplicaManager
# has it; any other negative timestamp, or one below its version, is UNSUPPORTED_VERSION.
SPECIAL_TIMESTAMP_SINCE = {
    LATEST: 0,
    EARLIEST: 0,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL: 8,
    LATEST_TIERED: 9,
}


async def handle_list_offsets(
    ctx: RequestContext, req: bodies.ListOffsetsRequest
) -> bodies.ListOffsetsResponse:
    # v10's timeout_ms (KIP-1075) bounds waiting for remote (tiered) reads; there is no
    # tiered storage and no waiting here, so it is accepted and has nothing to bound.
    if req["replica_id"] >= 0:
        code = E.CLUSTER_AUTHORIZATION_FAILED
    else:
        code = None
    committed = req.get("isolation_level", 0) == 1
    topics: list[bodies.ListOffsetsResponseTopics] = []
    for t in req["topics"]:
        topic = ctx.topic(t["name"])
        allowed = topic is not None and ctx.may(Operation.DESCRIBE, T, t["name"])
        partitions: list[bodies.ListOffsetsResponsePartitions] = []
        for p in t["partitions"]:
            entry: bodies.ListOffsetsResponsePartitions = {
                "partition_index": p["partition_index"],
                "error_code": E.NONE,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            partitions.append(entry)
            ts = p["timestamp"]
            if code is not None:
                entry["error_code"] = code
            elif ts < 0 and SPECIAL_TIMESTAMP_SINCE.get(ts, 99) > ctx.version:
                entry["error_code"] = E.UNSUPPORTED_VERSION
            else:
                partition, err = leader_partition(ctx, topic, allowed, p["partition_index"])
                if partition is None:
                    entry["error_code"] = err
                    continue
                log = partition.log
                if ctx.version == 0:
                    entry["old_style_offsets"] = _old_style_offsets(
                        log, ts, p.get("max_num_offsets", 1)
                    )
                    continue
                # The leader epoch answered (v4+, KIP-320) is Kafka's: the leader's current
                # epoch for LATEST, the epoch of the log's first entry for EARLIEST, and the
                # epoch of the batch found for MAX_TIMESTAMP and timestamps.
                lagging = partition.high_watermark_lagging
                # read_committed (v2+) sees up to the last stable offset, as in Kafka.
                fetchable = log.last_stable_offset if committed else log.high_watermark
                if ts == LATEST:
                    if lagging:
                        entry["error_code"] = E.OFFSET_NOT_AVAILABLE
                        continue
                    entry["offset"] = fetchable
                    entry["leader_epoch"] = partition.leader_epoch
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    # Without tiered storage the local log is the whole log: its start is
                    # the earliest local offset too (KIP-405).
                    entry["offset"] = log.log_start_offset
                    epochs = log.leader_epochs.entries
                    if epochs and epochs[0][1] <= log.log_start_offset:
                        entry["leader_epoch"] = epochs[0][0]
                elif ts == LATEST_TIERED:
                    # Kafka's answer for a topic without remote storage (KIP-1005): nothing
                    # is tiered, offset -1 (and leader epoch -1).
                    entry["offset"] = -1
                else:
                    found = (
                        log.max_timestamp_lookup()
                        if ts == MAX_TIMESTAMP
                        else log.offset_for_timestamp(ts)
                    )
                    if found is not None and found.offset < fetchable:
                        entry["offset"], entry["timestamp"] = found.offset, found.timestamp
                        entry["leader_epoch"] = max(-1, found.leader_epoch)
                    elif lagging:  # nothing below a high watermark that may be stale
                        entry["error_code"] = E.OFFSET_NOT_AVAILABLE
        topics.append({"name": t["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def _old_style_offsets(log: PartitionLog, timestamp: int, max_num: int) -> list[int]:
    """ListOffsets v0 for a consumer, as Kafka 3.9 answered it: the offsets the log offers
    before ``timestamp`` (:meth:`PartitionLog.legacy_offsets_before`), with any beyond
    the high watermark replaced by the high watermark."""
    offsets = log.legacy_offsets_before(timestamp, max_num)
    hw = log.high_watermark
    if any(o > hw for o in offsets):
        offsets = [hw, *(o for o in offsets if o <= hw)]
    return offsets


async def handle_delete_records(
    ctx: RequestContext, req: bodies.DeleteRecordsRequest
) -> bodies.DeleteRecordsResponse:
    topics: list[bodies.DeleteRecordsResponseTopics] = []
    for t in req["topics"]:
        topic = ctx.topic(t["name"])
        allowed = topic is not None and ctx.may(Operation.DELETE, T, t["name"])
        partitions: list[bodies.DeleteRecordsResponsePartitions] = []
        for p in t["partitions"]:
            entry: bodies.DeleteRecordsResponsePartitions = {
                "partition_index": p["partition_index"],
                "low_watermark": -1,
                "error_code": E.NONE,
            }
            partitions.append(entry)
            partition, code = leader_partition(ctx, topic, allowed, p["partition_index"])
            if partition is None:
                entry["error_code"] = code
                continue
            log = partition.log
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


# --- DescribeProducers (KIP-664) ---------------------------------------------------------

# Kafka's messages for errors answered for a whole topic (ApiError's defaults).
_TOPIC_ERROR_MESSAGES = {
    E.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    E.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
}


async def handle_describe_producers(
    ctx: RequestContext, req: bodies.DescribeProducersRequest
) -> bodies.DescribeProducersResponse:
    """As Kafka's handler: per topic an invalid name, then Read, then whether the tenant
    has it; per partition this broker must lead it (its log keeps the producer state)."""
    topics: list[bodies.DescribeProducersResponseTopics] = []
    for t in req["topics"]:
        name = t["name"]
        topic = ctx.topic(name)
        code, message = E.NONE, None
        try:
            validate_topic_name(name)
        except InvalidTopicName as exc:
            code, message = E.INVALID_TOPIC_EXCEPTION, str(exc)
        else:
            if not ctx.may(Operation.READ, T, name):
                code = E.TOPIC_AUTHORIZATION_FAILED
            elif topic is None:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            message = _TOPIC_ERROR_MESSAGES.get(code)
        partitions: list[bodies.DescribeProducersResponsePartitions] = []
        for index in t["partition_indexes"]:
            entry: bodies.DescribeProducersResponsePartitions = {
                "partition_index": index,
                "error_code": code,
                "error_message": message,
                "active_producers": [],
            }
            partitions.append(entry)
            if code != E.NONE or topic is None:
                continue
            partition, err = ctx.services.replicas.leader_partition(topic, index)
            if partition is None:
                # Not hosted as leader here (or no leader at all): Kafka's
                # NOT_LEADER_OR_FOLLOWER; an index the topic lacks is unknown.
                entry["error_code"] = (
                    err if err == E.UNKNOWN_TOPIC_OR_PARTITION else E.NOT_LEADER_OR_FOLLOWER
                )
                continue
            entry["active_producers"] = [
                {
                    "producer_id": p.producer_id,
                    "producer_epoch": p.epoch,
                    "last_sequence": p.last_sequence,
                    "last_timestamp": p.last_timestamp,
                    # Idempotent producers only: no transaction coordinator, no open
                    # transaction.
                    "coordinator_epoch": -1,
                    "current_txn_start_offset": -1,
                }
                for p in partition.log.active_producers()
            ]
        topics.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    describe_producers_api.KEY: handle_describe_producers,
    offset_for_leader_epoch_api.KEY: handle_offset_for_leader_epoch,
    list_offsets_api.KEY: handle_list_offsets,
    delete_records_api.KEY: handle_delete_records,
}
