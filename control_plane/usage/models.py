"""Metered usage: what brokers report (``UsageRaw``) and its hourly sums (``UsageHour``).

A raw row holds one broker process's totals for one hour, tenant, topic and principal,
replaced by each newer report (``seq``); the hourly rows are the sums over brokers and
their restarts, recomputed whenever a raw row of that hour changed (``services``).
"""

from __future__ import annotations

from django.db import models

from data_plane.broker.usage import FIELDS

COUNTERS = FIELDS  # the broker's counters are the tables' columns, in the same order


class Counters(models.Model):
    produce_bytes = models.BigIntegerField(default=0)
    produce_records = models.BigIntegerField(default=0)
    fetch_bytes = models.BigIntegerField(default=0)
    fetch_records = models.BigIntegerField(default=0)
    requests = models.BigIntegerField(default=0)
    # Led partitions' log bytes times seconds, and led partitions times seconds.
    storage_byte_seconds = models.BigIntegerField(default=0)
    partition_seconds = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class UsageRaw(Counters):
    broker_id = models.PositiveIntegerField()
    incarnation = models.CharField(max_length=32)  # the broker process (a restart: another)
    hour = models.DateTimeField()
    # Ids, not foreign keys: a broker may report a tenant or topic deleted a moment ago.
    tenant_id = models.BigIntegerField()
    topic_id = models.UUIDField()  # all zeros: a principal's requests
    topic_name = models.CharField(max_length=249, blank=True, default="")
    principal = models.CharField(max_length=255, blank=True, default="")
    seq = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["broker_id", "incarnation", "hour", "tenant_id", "topic_id", "principal"],
                name="usage_raw_unique_row",
            )
        ]
        indexes = [
            models.Index(fields=["updated_at"], name="usage_raw_updated"),
            models.Index(fields=["hour"], name="usage_raw_hour"),
            models.Index(fields=["tenant_id"], name="usage_raw_tenant"),
        ]

    def __str__(self) -> str:
        return f"broker {self.broker_id} {self.hour:%Y-%m-%dT%H} {self.topic_name or '-'}"


class UsageHour(Counters):
    hour = models.DateTimeField()
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    topic_id = models.UUIDField()
    topic_name = models.CharField(max_length=249, blank=True, default="")
    principal = models.CharField(max_length=255, blank=True, default="")
    aggregated_at = models.DateTimeField()

    class Meta:
        ordering = ["hour", "topic_name", "principal"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "tenant", "topic_id", "principal"], name="usage_hour_unique_row"
            )
        ]
        indexes = [models.Index(fields=["tenant", "hour"], name="usage_hour_tenant")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%dT%H} {self.topic_name or '-'} {self.principal or '-'}"


class AggregationState(models.Model):
    """One row: raw rows changed since ``watermark`` have hours to aggregate again."""

    watermark = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_run_seconds = models.FloatField(default=0)
    last_run_hours = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"usage aggregated up to {self.watermark}"
