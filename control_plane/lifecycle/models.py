"""A tenant deletion: the job's state, kept after the tenant is gone (with the audit trail).

The job (``services.run_deletion``) moves through ``STEPS`` in order; each step is
idempotent, so a worker killed mid-way is followed by another that starts the step again.
A worker holds the deletion by a lease (``lease_until``) that it renews as it goes; a lease
that lapsed means the worker died, and the beat's ``resume_deletions`` hands the deletion
to another worker.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class DeletionState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"


STEPS = ("keys", "topics", "groups", "transactions", "connect", "tenant", "brokers")


class TenantDeletion(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # NULL once the tenant row is gone (the last steps); its names are kept below.
    tenant = models.OneToOneField(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="deletion"
    )
    tenant_slug = models.CharField(max_length=50)
    tenant_name = models.CharField(max_length=200)
    tenant_pk = models.BigIntegerField()  # the metadata change log names tenants by id
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    requested_by_name = models.CharField(max_length=200, blank=True, default="")
    requested_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(
        max_length=16, choices=DeletionState.choices, default=DeletionState.PENDING
    )
    step = models.CharField(max_length=32, blank=True, default="")
    # What each step did so far: {"topics": {"done": 3, "total": 10}, ...}.
    progress = models.JSONField(default=dict)
    attempts = models.PositiveIntegerField(default=0)  # workers that took it up
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at"]
        indexes = [models.Index(fields=["state", "lease_until"], name="deletion_state_lease")]

    def __str__(self) -> str:
        return f"deletion of {self.tenant_slug} ({self.state})"
