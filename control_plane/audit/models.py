"""The audit trail: one row per mutation, written in the same transaction as the change."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ActorType(models.TextChoices):
    USER = "user", "User"
    API_KEY = "api_key", "API key"
    SYSTEM = "system", "System"


class AuditEvent(models.Model):
    # NULL for cluster-level events (tenant creation by an operator, brokers). Named, not
    # imported: audit sits below tenancy (tenancy's services record events).
    tenant = models.ForeignKey(
        "tenancy.Tenant",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
    )
    # Kept after the tenant is gone, so its history stays findable by operators.
    tenant_slug = models.CharField(max_length=50, blank=True, default="")
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # "alice" or "MRK..." (key id): survives deletion of the user or key.
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=300)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="audit_tenant_time")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%dT%H:%M:%S} {self.actor} {self.action} {self.object_repr}"
