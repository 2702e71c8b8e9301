"""Topics, their partitions, and the brokers that will host them.

A topic's identity on disk and on the wire (topic id) is its UUID, never the
tenant-facing name. Partition leadership fields (``leader``, ``leader_epoch``, ``isr``,
``partition_epoch``) change only by compare-and-set in the controller (Step 5); until
brokers exist a partition has no replicas (``replicas == []``, ``leader is None``).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

from control_plane.tenancy.models import Tenant


class Topic(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="topics")
    name = models.CharField(max_length=249)
    # Lookups for Kafka's '.'/'_' collision rule (see data_plane.topic_config).
    collision_key = models.CharField(max_length=249, editable=False)
    topic_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    partition_count = models.PositiveIntegerField()
    replication_factor = models.PositiveSmallIntegerField()
    # Only explicit overrides; defaults come from data_plane.topic_config.
    configs = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="topic_unique_name"),
            models.UniqueConstraint(
                fields=["tenant", "collision_key"], name="topic_unique_collision_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class Partition(models.Model):
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="partitions")
    index = models.PositiveIntegerField()
    replicas = models.JSONField(default=list, blank=True)  # broker ids, preferred leader first
    leader = models.IntegerField(null=True, blank=True)
    leader_epoch = models.IntegerField(default=0)
    isr = models.JSONField(default=list, blank=True)
    partition_epoch = models.IntegerField(default=0)
    # A reassignment in progress (Kafka's KIP-455): ``replicas`` holds the target replicas
    # followed by the ones leaving; these say which are which, and ``original_replicas``
    # keeps the order to go back to if it is cancelled. All empty otherwise.
    adding_replicas = models.JSONField(default=list, blank=True)
    removing_replicas = models.JSONField(default=list, blank=True)
    original_replicas = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["topic", "index"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "index"], name="partition_unique_index"),
        ]
        # What a controller tick reads (controller/services.py): leaders by broker, and
        # the few partitions being reassigned. On Postgres a GIN index on ``isr`` (made by
        # migration 0009: it has no portable form) finds the ISRs naming a broker.
        indexes = [
            models.Index(fields=["leader"], name="partition_leader"),
            models.Index(
                fields=["id"],
                condition=~models.Q(adding_replicas=[], removing_replicas=[]),
                name="partition_reassigning",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic}-{self.index}"


class ProducerIdBlock(models.Model):
    """The next free producer id; brokers take blocks of ids from it (one row).

    Idempotent producers need ids unique across brokers and restarts, so a broker claims a
    block with one locked update and hands ids out from memory.
    """

    next_id = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"next producer id {self.next_id}"


class BrokerState(models.TextChoices):
    RUNNING = "running", "Running"
    SHUTTING_DOWN = "shutting_down", "Shutting down"
    FENCED = "fenced", "Fenced"


class BrokerQuerySet(models.QuerySet["Broker"]):
    def live(self, lease_seconds: int = 10) -> BrokerQuerySet:
        """Running brokers whose heartbeat lease has not expired.

        When no running broker has a fresh lease, every running broker counts as live: all
        leases lapsing together says that the metadata store or the machine stalled (a
        busy two-core host running every process), not that every broker died at once.
        Treating them as gone would only take every partition offline, with no broker to
        move leadership to; a broker whose process is really gone is still fenced by its
        liveness lock (``core/liveness.py``) or comes back by registering again.
        """
        running = self.filter(state=BrokerState.RUNNING)
        fresh = running.filter(last_heartbeat__gte=self.lease_cutoff(lease_seconds))
        if fresh.exists() or not running.exists():
            return fresh
        return running

    @staticmethod
    def lease_cutoff(lease_seconds: int) -> datetime:
        return timezone.now() - timedelta(seconds=lease_seconds)


class Broker(models.Model):
    """A data-plane node; it registers itself and renews its lease by heartbeat (Step 3)."""

    id = models.PositiveIntegerField(primary_key=True)
    host = models.CharField(max_length=255)
    port = models.PositiveIntegerField()
    rack = models.CharField(max_length=100, blank=True, default="")
    # The TLS (SASL_SSL) listener's advertised address, when the broker has one.
    tls_host = models.CharField(max_length=255, blank=True, default="")
    tls_port = models.PositiveIntegerField(null=True, blank=True)
    # Its plain listener also takes clients without credentials (as the `default` tenant):
    # the development listener of `manage.py up` (`broker --allow-anonymous`).
    dev_listener = models.BooleanField(default=False)
    state = models.CharField(
        max_length=16, choices=BrokerState.choices, default=BrokerState.RUNNING
    )
    registered_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat = models.DateTimeField(default=timezone.now)
    # An operator asked to empty this broker: no new replicas go to it, and its existing
    # ones are being moved away (``controller.reassign.decommission_broker``).
    decommissioning = models.BooleanField(default=False)
    # It holds its liveness lock (core/liveness.py): the lock's loss fences it at once.
    liveness_lock = models.BooleanField(default=False)
    # The metadata version whose roles and logs it has applied, as its last heartbeat said
    # (a deleted topic's logs are gone from its disk by then; see lifecycle.deletion).
    metadata_version = models.BigIntegerField(default=0)

    objects = BrokerQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"broker {self.id} ({self.host}:{self.port})"


class TopicSample(models.Model):
    """One measurement of a topic (a bounded time series for the console's charts).

    ``end_offset`` sums the partitions' log end offsets and ``consumed`` the consumer
    groups' committed offsets on the topic, so their changes between two samples are the
    records produced and consumed meanwhile; ``size_bytes`` is the leaders' log size.
    """

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    end_offset = models.BigIntegerField()
    consumed = models.BigIntegerField()
    size_bytes = models.BigIntegerField(null=True, blank=True)
    # Records/s produced and consumed since the topic's previous sample (null for its first
    # one): worked out when sampling, so a chart sums a column per sampling time instead of
    # pairing every topic's samples on each page view.
    produced_per_s = models.FloatField(null=True, blank=True)
    consumed_per_s = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["topic", "at"]
        indexes = [models.Index(fields=["topic", "at"], name="topic_sample_at")]

    def __str__(self) -> str:
        return f"{self.topic.name} at {self.at}: end {self.end_offset}"


# A client version row's identity beyond its tenant: what brokers' reports are summed on.
CLIENT_VERSION_IDENTITY = (
    "principal",
    "client_id",
    "software_name",
    "software_version",
    "api_key",
    "api_version",
    "served",
)


class ClientVersion(models.Model):
    """Requests one client identity of a tenant sent at one (API, version), summed over
    every broker's reports (``data_plane.broker.client_versions``): which software, at
    which request versions, connects, so that operators see who must upgrade. An
    identity is the principal, the client id, and the software the client named in
    ApiVersions v3+ (empty for older clients). Rows not seen for
    ``MILLRACE_CLIENT_VERSIONS_KEEP_DAYS`` are pruned."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="client_versions")
    principal = models.CharField(max_length=200)
    client_id = models.CharField(max_length=255, blank=True)
    software_name = models.CharField(max_length=64, blank=True)
    software_version = models.CharField(max_length=64, blank=True)
    api_key = models.SmallIntegerField()
    api_version = models.SmallIntegerField()
    served = models.BooleanField()  # False: answered UNSUPPORTED_VERSION
    requests = models.BigIntegerField()
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    last_broker = models.IntegerField()

    class Meta:
        ordering = ["tenant", "software_name", "software_version", "client_id", "api_key"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", *CLIENT_VERSION_IDENTITY], name="client_version_unique_use"
            )
        ]

    def __str__(self) -> str:
        software = f"{self.software_name} {self.software_version}".strip()
        return f"{self.client_id} ({software}): API {self.api_key} v{self.api_version}"
