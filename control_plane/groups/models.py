"""Consumer groups as the coordinator last stored them, their committed offsets, and lag.

The broker's group coordinator (``data_plane.groups``) owns live membership and writes the
group row after every state change, so the control plane reads state, members and
assignments from here. Committed offsets are written only here (one transaction per
OffsetCommit request) and read back by OffsetFetch, so a reset made by the control plane is
what the next consumer sees.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from control_plane.catalog.models import Topic
from control_plane.tenancy.models import Tenant


class GroupState(models.TextChoices):
    EMPTY = "Empty", "Empty"
    PREPARING_REBALANCE = "PreparingRebalance", "Preparing rebalance"
    COMPLETING_REBALANCE = "CompletingRebalance", "Completing rebalance"
    ASSIGNING = "Assigning", "Assigning"
    RECONCILING = "Reconciling", "Reconciling"
    STABLE = "Stable", "Stable"
    DEAD = "Dead", "Dead"


class GroupType(models.TextChoices):
    CLASSIC = "classic", "Classic"
    CONSUMER = "consumer", "Consumer (KIP-848)"


class ConsumerGroup(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="consumer_groups")
    group_id = models.CharField(max_length=255)
    # The rebalance protocol: classic (JoinGroup/SyncGroup), or consumer (KIP-848), whose
    # ``generation`` is the group epoch and ``protocol`` the server-side assignor.
    group_type = models.CharField(
        max_length=16, choices=GroupType.choices, default=GroupType.CLASSIC
    )
    state = models.CharField(max_length=24, choices=GroupState.choices, default=GroupState.EMPTY)
    generation = models.IntegerField(default=0)
    assignment_epoch = models.IntegerField(default=0)  # consumer groups
    protocol_type = models.CharField(max_length=255, blank=True, default="")
    protocol = models.CharField(max_length=255, blank=True, default="")
    leader = models.CharField(max_length=512, blank=True, default="")
    # classic: [{member_id, instance_id, client_id, host, session_timeout_ms,
    #   rebalance_timeout_ms, metadata (base64), assignment (base64)}]
    # consumer: [{member_id, instance_id, rack_id, client_id, host, rebalance_timeout_ms,
    #   subscribed_topic_names, subscribed_topic_regex, server_assignor, member_epoch,
    #   previous_member_epoch, state, assigned, revoking, target ([[topic id, [p...]]...]),
    #   resolved ([[name, topic id, partitions]...])}]
    members = models.JSONField(default=list, blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "group_id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "group_id"], name="group_unique_id"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.group_id}"

    @property
    def is_active(self) -> bool:
        return bool(self.members) or self.state not in (GroupState.EMPTY, GroupState.DEAD)


class CommittedOffset(models.Model):
    group = models.ForeignKey(ConsumerGroup, on_delete=models.CASCADE, related_name="offsets")
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="committed_offsets")
    partition = models.PositiveIntegerField()
    offset = models.BigIntegerField()
    leader_epoch = models.IntegerField(default=-1)
    # Kafka tells a null metadata string from an empty one, so this one may be NULL.
    metadata = models.TextField(null=True, blank=True)  # noqa: DJ001
    committed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["group", "topic", "partition"]
        constraints = [
            models.UniqueConstraint(
                fields=["group", "topic", "partition"], name="offset_unique_partition"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group}: {self.topic.name}-{self.partition}@{self.offset}"


class LagSample(models.Model):
    """One measurement of a group's lag on one partition (a bounded time series)."""

    group = models.ForeignKey(ConsumerGroup, on_delete=models.CASCADE, related_name="lag")
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="+")
    partition = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now, db_index=True)
    # None, with lag_basis "log_start", for a partition assigned but not yet committed.
    committed_offset = models.BigIntegerField(null=True, blank=True)
    log_end_offset = models.BigIntegerField()
    lag = models.BigIntegerField()
    lag_seconds = models.FloatField(null=True, blank=True)
    lag_basis = models.CharField(
        max_length=16,
        choices=[("committed", "committed offset"), ("log_start", "log start (no commit yet)")],
        default="committed",
    )

    class Meta:
        ordering = ["group", "topic", "partition", "at"]
        indexes = [models.Index(fields=["group", "at"], name="lag_group_at")]

    def __str__(self) -> str:
        return f"{self.group} {self.topic.name}-{self.partition} lag {self.lag} at {self.at}"
