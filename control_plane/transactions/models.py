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
    version = models.BigIntegerField(default=0)  # compare-and-set by coordinators
    coordinator_epoch = models.IntegerField(default=0)  # bumped by each takeover
    # Transactions V2: the producer id to move to once the transaction is complete (its
    # epoch ran out), and afterwards the one it moved from.
    next_producer_id = models.BigIntegerField(default=-1)
    previous_producer_id = models.BigIntegerField(default=-1)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "transactional_id"], name="transaction_unique_id"
            )
        ]
        indexes = [models.Index(fields=["state"], name="transaction_state")]

    def __str__(self) -> str:
        return f"{self.transactional_id} ({self.state}, producer {self.producer_id})"


class PendingTxnOffset(models.Model):
    """An offset committed inside a transaction (TxnOffsetCommit), invisible to the group
    until the transaction commits (then it becomes a ``CommittedOffset``) and dropped if
    it aborts. One row per group, producer and partition: a later commit in the same
    transaction replaces it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="pending_offsets")
    group_id = models.CharField(max_length=255)
    producer_id = models.BigIntegerField()
    topic = models.CharField(max_length=255)  # by name, as the group's offsets are kept
    partition = models.IntegerField()
    offset = models.BigIntegerField()
    leader_epoch = models.IntegerField(default=-1)
    metadata = models.TextField(null=True, blank=True)  # noqa: DJ001 (Kafka's null metadata)
    commit_ms = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "group_id", "producer_id", "topic", "partition"],
                name="pending_txn_offset_unique",
            )
        ]
        indexes = [models.Index(fields=["tenant", "group_id"], name="pending_txn_offset_group")]

    def __str__(self) -> str:
        where = f"{self.topic}-{self.partition}@{self.offset}"
        return f"{self.group_id} {where} (producer {self.producer_id})"
