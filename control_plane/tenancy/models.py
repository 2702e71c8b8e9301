"""Tenants (virtual clusters) and the people who belong to them."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

SLUG_VALIDATOR = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?\Z",
    "use 1-50 lowercase letters, digits and hyphens, starting and ending with a letter or digit",
)


def _default_limit(name: str) -> int:
    return int(settings.MILLRACE_DEFAULT_TENANT_LIMITS[name])


def default_max_partitions() -> int:
    return _default_limit("max_partitions")


def default_max_storage_bytes() -> int:
    return _default_limit("max_storage_bytes")


def default_produce_byte_rate() -> int:
    return _default_limit("produce_byte_rate")


def default_fetch_byte_rate() -> int:
    return _default_limit("fetch_byte_rate")


def default_max_connectors() -> int:
    return _default_limit("max_connectors")


def default_max_connector_tasks() -> int:
    return _default_limit("max_connector_tasks")


def default_max_connections() -> int:
    return _default_limit("max_connections")


class Plan(models.Model):
    """A set of limits operators define and assign to tenants (docs/accounts.md, "Plans").

    Assigning a plan copies its limits into the tenant, where brokers and services enforce
    them; changing a plan changes every tenant on it at once (no restart: brokers get the
    tenants' metadata). The default plan is what tenants people create themselves get.
    """

    slug = models.SlugField(max_length=50, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=300, blank=True, default="")
    is_default = models.BooleanField(default=False)
    max_partitions = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    max_storage_bytes = models.PositiveBigIntegerField(validators=[MinValueValidator(1)])
    produce_byte_rate = models.PositiveBigIntegerField(validators=[MinValueValidator(1)])
    fetch_byte_rate = models.PositiveBigIntegerField(validators=[MinValueValidator(1)])
    max_connections = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    # The longest retention.ms a topic may have (None: no ceiling).
    max_retention_ms = models.PositiveBigIntegerField(null=True, blank=True)
    max_connectors = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    max_connector_tasks = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"],
                condition=models.Q(is_default=True),
                name="plan_one_default",
            )
        ]

    def __str__(self) -> str:
        return self.slug


class Tenant(models.Model):
    """A team's virtual cluster: every topic, group and key name resolves inside one.

    Limits are set by operators (staff); the data plane enforces byte rates (Step 3).
    """

    slug = models.SlugField(max_length=50, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=200)
    max_partitions = models.PositiveIntegerField(
        default=default_max_partitions, validators=[MinValueValidator(1)]
    )
    max_storage_bytes = models.PositiveBigIntegerField(
        default=default_max_storage_bytes, validators=[MinValueValidator(1)]
    )
    produce_byte_rate = models.PositiveBigIntegerField(
        default=default_produce_byte_rate, validators=[MinValueValidator(1)]
    )
    fetch_byte_rate = models.PositiveBigIntegerField(
        default=default_fetch_byte_rate, validators=[MinValueValidator(1)]
    )
    # Connect: connectors in the tenant's Connect cluster, and their tasks.max summed.
    max_connectors = models.PositiveIntegerField(
        default=default_max_connectors, validators=[MinValueValidator(1)]
    )
    max_connector_tasks = models.PositiveIntegerField(
        default=default_max_connector_tasks, validators=[MinValueValidator(1)]
    )
    # Authenticated connections on each broker (and at most the broker's own
    # max_connections_per_tenant).
    max_connections = models.PositiveIntegerField(
        default=default_max_connections, validators=[MinValueValidator(1)]
    )
    # The longest retention.ms its topics may have (None: no ceiling); brokers also cap
    # the retention they apply to it, so a lower ceiling takes effect on existing topics.
    max_retention_ms = models.PositiveBigIntegerField(null=True, blank=True)
    # The plan its limits came from (None: limits set one by one, or no plan).
    plan = models.ForeignKey(
        Plan, null=True, blank=True, on_delete=models.PROTECT, related_name="tenants"
    )
    # Partitions of topics created without a count (Kafka's num.partitions); None: the
    # deployment's MILLRACE_DEFAULT_PARTITIONS.
    default_partitions = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    # Suspended by an operator (docs/accounts.md): produce and new connections are
    # refused; connections open at the time may read until ``reads_until``.
    suspended_at = models.DateTimeField(null=True, blank=True)
    suspension_reason = models.CharField(max_length=200, blank=True)
    reads_until = models.DateTimeField(null=True, blank=True)
    # Its owner asked for it to be deleted (``control_plane.lifecycle``): it is suspended,
    # its keys are revoked and its members gone while the job removes everything else.
    deletion_requested_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    """Tenant roles, weakest first; see docs/api.md for the matrix."""

    VIEWER = "viewer", "Viewer"
    DEVELOPER = "developer", "Developer"
    ADMIN = "admin", "Admin"
    OWNER = "owner", "Owner"

    @classmethod
    def rank(cls, role: str) -> int:
        return [c.value for c in cls].index(role)

    @classmethod
    def at_least(cls, role: str, minimum: str) -> bool:
        return cls.rank(role) >= cls.rank(minimum)


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class ClientQuota(models.Model):
    """One KIP-546 client-quota value of a tenant: ``key`` = ``value`` on the entity
    (``user``, ``client_id``).

    A component is "" when the entity does not name that type and ``<default>``
    (``data_plane.client_quotas.DEFAULT_NAME``) for the type's default entity, as Kafka
    spelled them in ZooKeeper. User names are the tenant's service accounts (unprefixed);
    they are not foreign keys, since Kafka lets a quota be set before its user exists.
    Brokers read these with the tenant (the ``tenant`` metadata scope).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="client_quotas")
    user = models.CharField(max_length=255, blank=True)
    client_id = models.CharField(max_length=255, blank=True)
    key = models.CharField(max_length=64)
    value = models.FloatField()

    class Meta:
        ordering = ["tenant", "user", "client_id", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user", "client_id", "key"], name="client_quota_unique_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}: user={self.user!r} client-id={self.client_id!r} {self.key}"
