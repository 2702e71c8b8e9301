"""The transaction coordinators' state in ``transactions.TransactionState`` rows
(:class:`data_plane.broker.ports.TransactionStore`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import close_old_connections, transaction

from control_plane.groups import services as group_services
from control_plane.transactions.models import PendingTxnOffset, TransactionState
from data_plane.groups.model import OffsetRecord
from data_plane.txn.model import TxnMetadata, TxnPartition, TxnState


def _value(row: TransactionState) -> TxnMetadata:
    return TxnMetadata(
        tenant_id=row.tenant_id,
        transactional_id=row.transactional_id,
        producer_id=row.producer_id,
        producer_epoch=row.producer_epoch,
        last_producer_epoch=row.last_producer_epoch,
        timeout_ms=row.timeout_ms,
        state=TxnState(row.state),
        partitions=frozenset(TxnPartition(str(t), int(i)) for t, i in row.partitions),
        groups=frozenset(row.groups),
        start_ms=row.start_ms,
        updated_ms=row.updated_ms,
        version=row.version,
        coordinator_epoch=row.coordinator_epoch,
        next_producer_id=row.next_producer_id,
        previous_producer_id=row.previous_producer_id,
    )


class DjangoTransactionStore:
    def load_transaction(self, tenant_id: int, transactional_id: str) -> TxnMetadata | None:
        close_old_connections()
        row = TransactionState.objects.filter(
            tenant_id=tenant_id, transactional_id=transactional_id
        ).first()
        return _value(row) if row is not None else None

    def save_transaction(self, txn: TxnMetadata) -> bool:
        close_old_connections()
        values = {
            "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "last_producer_epoch": txn.last_producer_epoch,
            "timeout_ms": txn.timeout_ms,
            "state": txn.state.value,
            "partitions": sorted([p.topic_id, p.index] for p in txn.partitions),
            "groups": sorted(txn.groups),
            "start_ms": txn.start_ms,
            "updated_ms": txn.updated_ms,
            "version": txn.version,
            "coordinator_epoch": txn.coordinator_epoch,
            "next_producer_id": txn.next_producer_id,
            "previous_producer_id": txn.previous_producer_id,
        }
        if txn.version == 0:  # the id's first state: only if no one stored one
            _, created = TransactionState.objects.get_or_create(
                tenant_id=txn.tenant_id, transactional_id=txn.transactional_id, defaults=values
            )
            return created
        updated = TransactionState.objects.filter(
            tenant_id=txn.tenant_id,
            transactional_id=txn.transactional_id,
            version=txn.version - 1,
        ).update(**values)
        return updated == 1

    def list_transactions(self, tenant_id: int) -> list[TxnMetadata]:
        close_old_connections()
        rows = TransactionState.objects.filter(tenant_id=tenant_id).order_by("transactional_id")
        return [_value(row) for row in rows]

    def unfinished_transactions(self) -> list[TxnMetadata]:
        close_old_connections()
        states = [s.value for s in TxnState if s.unfinished]
        rows = TransactionState.objects.filter(state__in=states)
        return [_value(row) for row in rows.order_by("tenant_id", "transactional_id")]

    def stage_txn_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        group_id: str,
        offsets: list[OffsetRecord],
        check: Callable[[TxnMetadata | None], int],
    ) -> int:
        close_old_connections()
        with transaction.atomic():
            # The id's row is locked while the offsets go in: a coordinator deciding the
            # transaction writes that row first, so it either waits for these offsets or
            # has already moved on and they are refused.
            row = (
                TransactionState.objects.select_for_update()
                .filter(tenant_id=tenant_id, transactional_id=transactional_id)
                .first()
            )
            error = check(_value(row) if row is not None else None)
            if error:
                return error
            self._stage(tenant_id, group_id, producer_id, offsets)
            return 0

    @staticmethod
    def _stage(
        tenant_id: int, group_id: str, producer_id: int, offsets: list[OffsetRecord]
    ) -> None:
        now_ms = int(time.time() * 1000)
        rows = [
            PendingTxnOffset(
                tenant_id=tenant_id,
                group_id=group_id,
                producer_id=producer_id,
                topic=o.topic,
                partition=o.partition,
                offset=o.offset,
                leader_epoch=o.leader_epoch,
                metadata=o.metadata,
                commit_ms=o.commit_ms or now_ms,
            )
            for o in offsets
        ]
        PendingTxnOffset.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["tenant", "group_id", "producer_id", "topic", "partition"],
            update_fields=["offset", "leader_epoch", "metadata", "commit_ms"],
        )

    def settle_txn_offsets(
        self, tenant_id: int, group_id: str, producer_id: int, commit: bool
    ) -> None:
        close_old_connections()
        with transaction.atomic():
            staged = PendingTxnOffset.objects.select_for_update().filter(
                tenant_id=tenant_id, group_id=group_id, producer_id=producer_id
            )
            rows = list(staged)
            if commit and rows:
                group_services.store_offsets(
                    tenant_id,
                    group_id,
                    [
                        OffsetRecord(
                            r.topic, r.partition, r.offset, r.leader_epoch, r.metadata, r.commit_ms
                        )
                        for r in rows
                    ],
                )
            staged.delete()

    def pending_txn_partitions(self, tenant_id: int, group_id: str) -> set[tuple[str, int]]:
        close_old_connections()
        rows = PendingTxnOffset.objects.filter(tenant_id=tenant_id, group_id=group_id)
        return set(rows.values_list("topic", "partition"))
