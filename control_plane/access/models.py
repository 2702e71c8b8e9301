"""Service accounts, their API keys, and ACLs in Kafka's model.

An API key's secret is never stored: only SCRAM-SHA-256 and SCRAM-SHA-512 credentials
(salt, iterations, stored key, server key; enough to verify a SCRAM exchange, not to
recover the secret) and a slow hash (Argon2) for HTTP authentication.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from control_plane.tenancy.models import Tenant
from data_plane.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

SERVICE_ACCOUNT_NAME_REGEX = r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}\Z"


class ServiceAccount(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="service_accounts")
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="service_account_unique_name"),
        ]

    @property
    def principal(self) -> str:
        """The Kafka principal ACLs name: ``User:<service account name>``."""
        return f"User:{self.name}"

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class ApiKeyQuerySet(models.QuerySet["ApiKey"]):
    def active(self) -> ApiKeyQuerySet:
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiKey(models.Model):
    service_account = models.ForeignKey(
        ServiceAccount, on_delete=models.CASCADE, related_name="api_keys"
    )
    # Denormalised from the service account so tenant scoping is one indexed filter.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    key_id = models.CharField(max_length=32, unique=True, editable=False)
    description = models.CharField(max_length=200, blank=True, default="")
    secret_hash = models.CharField(max_length=255, editable=False)
    scram_sha256_salt = models.BinaryField(editable=False)
    scram_sha256_stored_key = models.BinaryField(editable=False)
    scram_sha256_server_key = models.BinaryField(editable=False)
    scram_sha256_iterations = models.PositiveIntegerField(editable=False)
    scram_sha512_salt = models.BinaryField(editable=False)
    scram_sha512_stored_key = models.BinaryField(editable=False)
    scram_sha512_server_key = models.BinaryField(editable=False)
    scram_sha512_iterations = models.PositiveIntegerField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"

    def __str__(self) -> str:
        return self.key_id


_BINDING_FIELDS = [
    "tenant",
    "resource_type",
    "pattern_type",
    "resource_name",
    "operation",
    "permission",
    "host",
]


class Acl(models.Model):
    """One ACL binding inside a tenant; ``service_account`` NULL means every principal."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="acls")
    service_account = models.ForeignKey(
        ServiceAccount, null=True, blank=True, on_delete=models.CASCADE, related_name="acls"
    )
    resource_type = models.CharField(
        max_length=24, choices=[(t.value, t.value) for t in ResourceType]
    )
    pattern_type = models.CharField(
        max_length=16, choices=[(p.value, p.value) for p in PatternType]
    )
    resource_name = models.CharField(max_length=255)
    operation = models.CharField(max_length=24, choices=[(o.value, o.value) for o in Operation])
    permission = models.CharField(max_length=8, choices=[(p.value, p.value) for p in Permission])
    host = models.CharField(max_length=64, default=WILDCARD_HOST)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "resource_type", "resource_name", "id"]
        constraints = [
            # Two partial constraints rather than nulls_distinct=False, which SQLite lacks.
            models.UniqueConstraint(
                fields=[*_BINDING_FIELDS, "service_account"],
                condition=models.Q(service_account__isnull=False),
                name="acl_unique_binding",
            ),
            models.UniqueConstraint(
                fields=_BINDING_FIELDS,
                condition=models.Q(service_account__isnull=True),
                name="acl_unique_wildcard_binding",
            ),
        ]

    @property
    def principal(self) -> str:
        return self.service_account.principal if self.service_account else WILDCARD_PRINCIPAL

    def to_binding(self) -> AclBinding:
        return AclBinding(
            principal=self.principal,
            resource_type=ResourceType(self.resource_type),
            pattern_type=PatternType(self.pattern_type),
            resource_name=self.resource_name,
            operation=Operation(self.operation),
            permission=Permission(self.permission),
            host=self.host,
            id=self.pk,
        )

    def __str__(self) -> str:
        return (
            f"{self.permission} {self.principal} {self.operation} {self.resource_type}:"
            f"{self.pattern_type}:{self.resource_name}"
        )
