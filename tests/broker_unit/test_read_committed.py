"""Fetch and ListOffsets at read_committed over a log holding transactions (Step 13): a
read stops at the last stable offset and names the aborted transactions in what it
returns; read_uncommitted reads to the high watermark and names none. librdkafka asks
for read_committed by default, so this is every confluent-kafka consumer's path."""

from __future__ import annotations

import asyncio
import dataclasses

from data_plane.acl import Operation, ResourceType
from data_plane.log.transactions import ControlType
from data_plane.protocol.errors import ErrorCode as E
from data_plane.protocol.messages import fetch, list_offsets
from data_plane.records import RecordBatch
from data_plane.records.batch import iter_batches
from tests.broker_unit.test_handlers import call, principal_of, world  # noqa: F401 (fixture)
from tests.log.helpers import batch
from tests.log.test_transactions import marker, txn


def _log(env):
    store, node, services, acme, _ = env
    store.add_topic(acme, "payments", partitions=1)
    asyncio.run(node.refresh_metadata())
    topic = node.snapshot.tenant_topics(acme)["payments"]
    partition, error = services.replicas.leader_partition(topic, 0)
    assert error == E.NONE and partition is not None
    return partition.log


def _fetch(services, app, isolation: int, offset: int = 0) -> dict:
    got = call(
        services,
        app,
        fetch.KEY,
        12,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "payments",
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    (entry,) = got["responses"][0]["partitions"]
    return entry


def _last_offset(entry: dict) -> int:
    data = entry["records"].read()
    return [h.last_offset for h in iter_batches(data)][-1]


def _latest(services, app, isolation: int) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": isolation,
        "topics": [
            {
                "name": "payments",
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
            }
        ],
    }
    got = call(services, app, list_offsets.KEY, 5, body)
    return got["topics"][0]["partitions"][0]["offset"]


def test_read_committed_stops_at_the_last_stable_offset_and_names_aborts(world):  # noqa: F811
    store, _, services, acme, _ = world
    log = _log(world)
    app = principal_of(
        store, acme, (Operation.READ, ResourceType.TOPIC), (Operation.DESCRIBE, ResourceType.TOPIC)
    )
    asyncio.run(world[1].refresh_metadata())
    log.append(txn(7, 0))  # 0-1, aborted below
    log.append(batch(1))  # 2
    log.append(txn(8, 0))  # 3-4, committed below
    log.append(marker(7, ControlType.ABORT), markers=True)  # 5
    log.append(marker(8, ControlType.COMMIT), markers=True)  # 6
    log.append(txn(9, 0))  # 7-8, still open
    log.update_high_watermark(log.log_end_offset)

    committed = _fetch(services, app, 1)
    assert committed["error_code"] == E.NONE
    assert (committed["high_watermark"], committed["last_stable_offset"]) == (9, 7)
    assert _last_offset(committed) < 7  # producer 9's open transaction is not returned
    assert committed["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]
    # From past the aborted transaction's marker, nothing of it is named.
    assert _fetch(services, app, 1, offset=6)["aborted_transactions"] == []

    uncommitted = _fetch(services, app, 0)
    assert (uncommitted["high_watermark"], uncommitted["last_stable_offset"]) == (9, 7)
    assert _last_offset(uncommitted) == 8
    assert uncommitted["aborted_transactions"] is None

    assert (_latest(services, app, 1), _latest(services, app, 0)) == (7, 9)
    log.append(marker(9, ControlType.COMMIT), markers=True)  # 9
    log.update_high_watermark(log.log_end_offset)
    assert _latest(services, app, 1) == 10 == _fetch(services, app, 1)["last_stable_offset"]


def test_without_transactions_read_committed_reads_to_the_high_watermark(world):  # noqa: F811
    store, _, services, acme, _ = world
    log = _log(world)
    app = principal_of(store, acme, (Operation.READ, ResourceType.TOPIC))
    asyncio.run(world[1].refresh_metadata())
    log.append(batch(3))
    log.update_high_watermark(log.log_end_offset)
    entry = _fetch(services, app, 1)
    assert (entry["high_watermark"], entry["last_stable_offset"]) == (3, 3)
    assert _last_offset(entry) == 2 and entry["aborted_transactions"] == []


def _produce(services, app, records: bytes, transactional_id: str | None = None) -> dict:
    from data_plane.protocol.messages import produce

    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "payments", "partition_data": [{"index": 0, "records": records}]}],
    }
    got = call(services, app, produce.KEY, 9, body)
    return got["responses"][0]["partition_responses"][0]


def test_producers_can_neither_write_markers_nor_open_transactions(world):  # noqa: F811
    """A control batch from a client would end another producer's transaction, and a
    transactional batch nobody will end would hold every read_committed reader at its
    offset: both are refused, nothing is stored, and the next good batch goes in."""
    store, _, services, acme, _ = world
    log = _log(world)
    app = principal_of(store, acme, (Operation.WRITE, ResourceType.TOPIC))
    asyncio.run(world[1].refresh_metadata())
    for data in (marker(7, ControlType.ABORT), txn(7, 0)):  # both transactional
        refused = _produce(services, app, data)
        assert refused["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    bare = dataclasses.replace(
        RecordBatch.decode(marker(7, ControlType.ABORT)), is_transactional=False
    )
    refused = _produce(services, app, bare.encode())  # a control batch all the same
    assert refused["error_code"] == E.INVALID_RECORD
    assert log.log_end_offset == 0
    ok = _produce(services, app, batch(2))
    assert (ok["error_code"], ok["base_offset"]) == (E.NONE, 0)
    assert log.last_stable_offset == log.high_watermark == 2
