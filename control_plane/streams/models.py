"""What the data API must remember: the answers to produce requests with an idempotency key."""

from __future__ import annotations

from django.db import models


class ProduceReceipt(models.Model):
    """The response to one produce request sent with an ``Idempotency-Key`` header.

    A retry with the same key (from the same service account, within the retention time)
    gets this response again and produces nothing. ``response`` is null while the first
    request is still producing.
    """

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE)
    service_account = models.ForeignKey("access.ServiceAccount", on_delete=models.CASCADE)
    idempotency_key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "service_account", "idempotency_key"],
                name="streams_receipt_unique_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.service_account_id}:{self.idempotency_key}"
