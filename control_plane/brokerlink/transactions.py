"""The transaction coordinators' state in ``transactions.TransactionState`` rows
(:class:`data_plane.broker.ports.TransactionStore`)."""

from __future__ import annotations

from django.db import close_old_connections

from control_plane.transactions.models import TransactionState
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
    )


class DjangoTransactionStore:
    def load_transaction(self, tenant_id: int, transactional_id: str) -> TxnMetadata | None:
        close_old_connections()
        row = TransactionState.objects.filter(
            tenant_id=tenant_id, transactional_id=transactional_id
        ).first()
        return _value(row) if row is not None else None

    def save_transaction(self, txn: TxnMetadata) -> None:
        close_old_connections()
        TransactionState.objects.update_or_create(
            tenant_id=txn.tenant_id,
            transactional_id=txn.transactional_id,
            defaults={
                "producer_id": txn.producer_id,
                "producer_epoch": txn.producer_epoch,
                "last_producer_epoch": txn.last_producer_epoch,
                "timeout_ms": txn.timeout_ms,
                "state": txn.state.value,
                "partitions": sorted([p.topic_id, p.index] for p in txn.partitions),
                "groups": sorted(txn.groups),
                "start_ms": txn.start_ms,
                "updated_ms": txn.updated_ms,
            },
        )

    def list_transactions(self, tenant_id: int) -> list[TxnMetadata]:
        close_old_connections()
        rows = TransactionState.objects.filter(tenant_id=tenant_id).order_by("transactional_id")
        return [_value(row) for row in rows]
