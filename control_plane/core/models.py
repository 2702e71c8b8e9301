"""The metadata change log: one row per committed change to what brokers see.

Its ``version`` is the cluster's metadata version. Brokers holding metadata at version
``v`` read only the rows after ``v`` and re-read just the scopes they name (a topic with its
partitions, a tenant's ACLs, a tenant's keys, a tenant's settings, the broker list), instead
of every tenant (``control_plane.brokerlink``; ``data_plane.broker.metadata_cache``).

Rows are written by ``notify.notify_metadata_changed`` inside the transaction that makes
the change, so they commit or roll back with it. Versions must grow in commit order (a
reader that saw version 11 must never later find a 10): on Postgres a deferred constraint
trigger (migration 0001) stamps ``version`` at commit time under an advisory lock, so
stamping is the last thing a transaction does and a transaction that never commits never
takes the lock; on SQLite writers are serialized already. Either way a version is the
newest one plus one: versions have no gaps, so a reader at a version older than the oldest
row left knows that rows were pruned and reads a full snapshot.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class MetadataScope(models.TextChoices):
    TOPIC = "topic", "A topic and its partitions"
    ACLS = "acls", "A tenant's ACLs"
    KEYS = "keys", "A tenant's API keys"
    TENANT = "tenant", "A tenant's settings"
    BROKERS = "brokers", "The broker list"
    ALL = "all", "Anything (brokers re-read everything)"


class MetadataChange(models.Model):
    # NULL until stamped at commit (Postgres); a reader never sees an unstamped row.
    version = models.BigIntegerField(null=True, blank=True, unique=True)
    kind = models.CharField(max_length=64)  # what notify_metadata_changed was told
    scope = models.CharField(max_length=16, choices=MetadataScope.choices)
    # Ids rather than foreign keys: the row outlives a deleted topic or tenant.
    tenant_id = models.BigIntegerField(null=True, blank=True)
    topic_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["version"]

    def __str__(self) -> str:
        return f"v{self.version} {self.kind} ({self.scope})"
