"""Transactions V2's implicit adds (KIP-890 part 2): a partition leader taking a producer's
first batch of a transaction (Produce v12), or a group coordinator taking its offsets
(TxnOffsetCommit v5), adds the partition or the group to the transaction itself; the
client sends no AddPartitionsToTxn or AddOffsetsToTxn.

The add goes to the transactional id's coordinator: this broker's own, or another broker
over AddPartitionsToTxn v5 (``verify_only`` false) or AddOffsetsToTxn v3, as the
broker-internal principal. Brokers belong to no tenant, so between brokers a
transactional id travels as ``<tenant id>/<transactional id>`` and partitions by topic
id (:func:`internal_id`, :func:`parse_internal_id`). A coordinator answering
CONCURRENT_TRANSACTIONS (the previous transaction's markers are being written) is asked
again every ``RETRY_S`` for up to ``RETRY_FOR_S``, as Kafka's leaders do, before the
answer goes to the client.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from data_plane.broker.peers import PeerClient
from data_plane.client.connection import KafkaClientError
from data_plane.metadata.model import BrokerInfo
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import add_offsets_to_txn, add_partitions_to_txn
from data_plane.txn.coordinator import NotCoordinator, TransactionCoordinator
from data_plane.txn.model import TxnPartition

E = ErrorCode
R = TypeVar("R")
RETRY_S = 0.02  # Kafka's add.partitions.to.txn.retry.backoff.ms
RETRY_FOR_S = 0.1  # ... and add.partitions.to.txn.retry.backoff.max.ms
ADD_PARTITIONS_VERSION = 5
ADD_OFFSETS_VERSION = 3


def internal_id(tenant_id: int, transactional_id: str) -> str:
    return f"{tenant_id}/{transactional_id}"


def parse_internal_id(value: str) -> tuple[int, str] | None:
    """(tenant id, transactional id) of an id a broker sent, None if it is not one."""
    tenant, sep, transactional_id = value.partition("/")
    if not sep or not tenant.isdigit() or not transactional_id:
        return None
    return int(tenant), transactional_id


class TransactionRouter:
    def __init__(
        self,
        broker_id: int,
        owner: Callable[[int, str], BrokerInfo | None],
        local: TransactionCoordinator,
        password: str,
    ) -> None:
        self.broker_id = broker_id
        self._owner = owner  # the broker coordinating a (tenant, transactional id)
        self._local = local
        self._peers = PeerClient(broker_id, password, "millrace-txn-router", timeout=10.0)

    async def add(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        *,
        partitions: Iterable[TxnPartition] = (),
        group: str | None = None,
    ) -> int:
        """Add ``partitions`` or ``group`` to the id's transaction at (``producer_id``,
        ``epoch``), starting one if none is in progress; the coordinator's answer."""
        wanted = list(partitions)
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            code = await self._add_once(
                tenant_id, transactional_id, producer_id, epoch, wanted, group
            )
            if code != E.CONCURRENT_TRANSACTIONS or time.monotonic() >= deadline:
                return code
            await asyncio.sleep(RETRY_S)

    async def _add_once(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TxnPartition],
        group: str | None,
    ) -> int:
        owner = self._owner(tenant_id, transactional_id)
        if owner is None:
            return E.COORDINATOR_NOT_AVAILABLE
        if owner.id == self.broker_id:
            try:
                if group is not None:
                    return await self._local.add_offsets(
                        tenant_id, transactional_id, producer_id, epoch, group
                    )
                return await self._local.add_partitions(
                    tenant_id, transactional_id, producer_id, epoch, partitions
                )
            except NotCoordinator:
                return E.NOT_COORDINATOR
        args = (owner, internal_id(tenant_id, transactional_id), producer_id, epoch)
        try:
            if group is not None:
                return await asyncio.to_thread(self._add_offsets_remote, *args, group)
            return await asyncio.to_thread(self._add_partitions_remote, *args, partitions)
        except (KafkaClientError, OSError):
            return E.COORDINATOR_NOT_AVAILABLE

    def _add_partitions_remote(
        self,
        owner: BrokerInfo,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TxnPartition],
    ) -> int:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for p in partitions:
            by_topic[p.topic_id].append(p.index)
        body: bodies.AddPartitionsToTxnRequest = {
            "transactions": [
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "verify_only": False,
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                }
            ],
            "v3_and_below_transactional_id": "",
            "v3_and_below_producer_id": 0,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [],
        }
        answer = self._ask(
            owner,
            add_partitions_to_txn.KEY,
            ADD_PARTITIONS_VERSION,
            body,
            bodies.AddPartitionsToTxnResponse,
        )
        if answer["error_code"] != E.NONE:
            return int(answer["error_code"])
        codes = [
            r["partition_error_code"]
            for txn in answer["results_by_transaction"]
            for t in txn["topic_results"]
            for r in t["results_by_partition"]
        ]
        return next((int(c) for c in codes if c != E.NONE), E.NONE)

    def _add_offsets_remote(
        self, owner: BrokerInfo, transactional_id: str, producer_id: int, epoch: int, group: str
    ) -> int:
        body: bodies.AddOffsetsToTxnRequest = {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "group_id": group,
        }
        found = self._ask(
            owner, add_offsets_to_txn.KEY, ADD_OFFSETS_VERSION, body, bodies.AddOffsetsToTxnResponse
        )
        return int(found["error_code"])

    def _ask(self, owner: BrokerInfo, key: int, version: int, body: Any, answer: type[R]) -> R:
        return self._peers.request(owner.id, (owner.host, owner.port), key, version, body, answer)

    def close(self) -> None:
        self._peers.close()
