"""Writing a decided transaction's markers (``data_plane.txn.coordinator.MarkerWriter``).

The coordinator hands over a transaction in PrepareCommit or PrepareAbort; each of its
partitions gets a commit or abort control batch at the transaction's producer id and
epoch, from that partition's leader, replicated with acks=all like any batch (Kafka's
WriteTxnMarkers). Partitions this broker leads are appended here; the others are sent to
their leaders with WriteTxnMarkers, naming topics by topic id (brokers belong to no
tenant), on a connection per leader authenticated as the broker-internal principal.

Markers carry the coordinator epoch of the id (bumped by each coordinator that takes
it over). A leader refuses a marker from an older coordinator epoch than the producer's
last marker there (TRANSACTION_COORDINATOR_FENCED), or at an older producer epoch
(INVALID_PRODUCER_EPOCH): the writer then gives up (:class:`MarkersFenced`), because
another coordinator has finished the transaction and the producer may have begun its next
one, which a late marker would end.

A partition whose topic was deleted counts as done. The others are retried with a
back-off (leaders move, a leader may be down) until every one has its marker or
``MARKER_DEADLINE_S`` passes; then the coordinator retries the whole write (what is
already written is written again: the transaction cannot have ended meanwhile, so a second
marker for it changes nothing a reader sees).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from data_plane.broker.peers import PeerClient
from data_plane.log.transactions import ControlType, control_batch
from data_plane.metadata.model import MetadataSnapshot, TopicInfo
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import write_txn_markers
from data_plane.replication.manager import ReplicaManager
from data_plane.txn.coordinator import MarkersFenced
from data_plane.txn.model import TxnMetadata, TxnPartition

logger = logging.getLogger("millrace.broker.txn")
E = ErrorCode

MARKER_TIMEOUT_MS = 30_000
MARKER_DEADLINE_S = 60.0
WRITE_TXN_MARKERS_VERSION = 1
# A leader's answers to a marker that mean another coordinator has decided.
FENCED = (E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH)


class BrokerMarkerWriter:
    def __init__(
        self,
        broker_id: int,
        snapshot: Callable[[], MetadataSnapshot],
        replicas: ReplicaManager,
        internal_password: str,
        refresh: Callable[[], Any],
    ) -> None:
        self.broker_id = broker_id
        self._snapshot = snapshot
        self._replicas = replicas
        self._peers = PeerClient(broker_id, internal_password, "millrace-txn-markers")
        self._refresh = refresh  # refreshes the metadata (a coroutine function)

    async def write_markers(self, txn: TxnMetadata, commit: bool) -> None:
        pending = set(txn.partitions)
        deadline = time.monotonic() + MARKER_DEADLINE_S
        delay = 0.05
        while True:
            snapshot = self._snapshot()
            local: list[tuple[TxnPartition, TopicInfo]] = []
            remote: dict[int, list[tuple[TxnPartition, TopicInfo]]] = defaultdict(list)
            for p in list(pending):
                topic = _topic(snapshot, p.topic_id)
                if topic is None or p.index >= topic.partition_count:
                    pending.discard(p)  # deleted meanwhile: nothing to mark
                    continue
                leader = topic.partitions[p.index].leader
                if leader is None:
                    continue  # no leader now: next round
                if leader == self.broker_id:
                    local.append((p, topic))
                else:
                    remote[leader].append((p, topic))
            done: set[TxnPartition] = set()
            if local:
                done |= await self._append_here(txn, commit, local)
            sends = [
                asyncio.to_thread(self._send, snapshot, leader, txn, commit, parts)
                for leader, parts in remote.items()
            ]
            for outcome in await asyncio.gather(*sends, return_exceptions=True):
                if isinstance(outcome, MarkersFenced):
                    raise outcome
                if isinstance(outcome, BaseException):
                    logger.info("markers of %r: %s", txn.transactional_id, outcome)
                else:
                    done |= outcome
            pending -= done
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"markers of {txn.transactional_id!r} not written to {len(pending)} "
                    "partitions in time"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
            await self._refresh()

    async def _append_here(
        self, txn: TxnMetadata, commit: bool, parts: list[tuple[TxnPartition, TopicInfo]]
    ) -> set[TxnPartition]:
        batch = marker_batch(txn.producer_id, txn.producer_epoch, commit, txn.coordinator_epoch)
        entries = [(topic, p.index, batch) for p, topic in parts]
        results = await self._replicas.append_records(entries, -1, MARKER_TIMEOUT_MS, markers=True)
        done = set()
        for (p, _), result in zip(parts, results, strict=True):
            if result.error in FENCED:
                raise MarkersFenced(f"{p.topic_id}-{p.index}: {result.message}")
            if result.error in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION):
                done.add(p)
            else:
                logger.info(
                    "marker of %r on %s-%d: %s",
                    txn.transactional_id,
                    p.topic_id,
                    p.index,
                    ErrorCode(result.error).name,
                )
        return done

    def _send(
        self,
        snapshot: MetadataSnapshot,
        leader: int,
        txn: TxnMetadata,
        commit: bool,
        parts: list[tuple[TxnPartition, TopicInfo]],
    ) -> set[TxnPartition]:
        """WriteTxnMarkers to another broker (a worker thread): the partitions it wrote."""
        info = snapshot.brokers.get(leader)
        if info is None:
            return set()
        address = (info.host, info.port)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for p, _ in parts:
            by_topic[p.topic_id].append(p.index)
        body: bodies.WriteTxnMarkersRequest = {
            "markers": [
                {
                    "producer_id": txn.producer_id,
                    "producer_epoch": txn.producer_epoch,
                    "transaction_result": commit,
                    "topics": [
                        {"name": name, "partition_indexes": indexes}
                        for name, indexes in by_topic.items()
                    ],
                    "coordinator_epoch": txn.coordinator_epoch,
                }
            ]
        }
        answer = self._peers.request(
            leader,
            address,
            write_txn_markers.KEY,
            WRITE_TXN_MARKERS_VERSION,
            body,
            bodies.WriteTxnMarkersResponse,
        )
        done = set()
        for marker in answer["markers"]:
            for t in marker["topics"]:
                for result in t["partitions"]:
                    code = result["error_code"]
                    if code in FENCED:
                        name = ErrorCode(code).name
                        raise MarkersFenced(f"{t['name']}-{result['partition_index']}: {name}")
                    if code in (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION):
                        done.add(TxnPartition(t["name"], result["partition_index"]))
        return done

    def close(self) -> None:
        self._peers.close()


def marker_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int) -> bytes:
    """A commit or abort marker, stamped now (here, or for WriteTxnMarkers' sender)."""
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    return control_batch(producer_id, epoch, kind, coordinator_epoch, int(time.time() * 1000))


def _topic(snapshot: MetadataSnapshot, topic_id: str) -> TopicInfo | None:
    try:
        return snapshot.topic_by_id(uuid.UUID(topic_id))
    except ValueError:
        return None
