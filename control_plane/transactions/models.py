"""The state of each transactional id, as its coordinator last wrote it.

Kept in Postgres, the metadata store every broker already reads, rather than in a
replicated internal log like Kafka's ``__transaction_state``: a coordinator that takes an
id over (its broker died, or the placement moved) reads the row and resumes, with no log
to replicate, compact or load first, and Postgres makes each write durable before the
coordinator answers. A transaction costs three writes (Ongoing, Prepare, Complete).
"""

from __future__ import annotations

from django.db import models

from control_plane.tenancy.models import Tenant


class TransactionState(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="transactions")
    transactional_id = models.CharField(max_length=255)
    producer_id = models.BigIntegerField()
    producer_epoch = models.IntegerField()
    last_producer_epoch = models.IntegerField()
    timeout_ms = models.IntegerField()
    state = models.CharField(max_length=20)  # data_plane.txn.model.TxnState values
    partitions = models.JSONField(default=list)  # [[topic id, partition], ...]
    groups = models.JSONField(default=list)  # consumer group ids (AddOffsetsToTxn)
    start_ms = models.BigIntegerField(default=-1)
    updated_ms = models.BigIntegerField(default=-1)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "transactional_id"], name="transaction_unique_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.transactional_id} ({self.state}, producer {self.producer_id})"
