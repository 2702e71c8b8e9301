"""Alert rules, the state of each thing a rule watches, what was sent, and how.

A rule watches *subjects* (a consumer group, a plan limit, a connector or task, an API
key). Each subject's ``AlertState`` says whether it breaches and since when; it *fires*
once when it has breached for the rule's duration and *resolves* once when it no longer
does. Each firing and resolving is a ``Notification``, sent by every channel of the rule
as a ``Delivery`` (e-mail, or a webhook signed with the rule's secret, retried with
back-off); the deliveries are the log the console shows.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AlertKind(models.TextChoices):
    CONSUMER_LAG = "consumer_lag", "Consumer lag"
    USAGE = "usage", "Usage of the plan"
    CONNECTOR_FAILED = "connector_failed", "Connector or task failed"
    KEY_EXPIRING = "key_expiring", "API key expiring"


class LagMeasure(models.TextChoices):
    RECORDS = "records", "records"
    SECONDS = "seconds", "seconds"


class UsageLimit(models.TextChoices):
    STORAGE = "storage", "storage"
    PARTITIONS = "partitions", "partitions"
    PRODUCE = "produce", "produce rate"
    FETCH = "fetch", "fetch rate"


class AlertRule(models.Model):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=24, choices=AlertKind.choices)
    # consumer_lag: the group ("" every group of the tenant) and what is measured.
    group = models.CharField(max_length=255, blank=True, default="")
    measure = models.CharField(max_length=8, choices=LagMeasure.choices, blank=True, default="")
    # usage: which limit of the plan.
    limit = models.CharField(max_length=12, choices=UsageLimit.choices, blank=True, default="")
    # connector_failed: the connector ("" every connector).
    connector = models.CharField(max_length=255, blank=True, default="")
    # Records or seconds of lag, a percentage of the limit, days before expiry.
    threshold = models.FloatField(default=0)
    # How long the breach must last before the rule fires.
    for_seconds = models.PositiveIntegerField(default=0)
    emails = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=500, blank=True, default="")
    # The HMAC-SHA256 key webhooks are signed with: shown once when the rule is made
    # (the receiver keeps it); kept readable here, as signing needs it.
    webhook_secret = models.CharField(max_length=64, blank=True, default="")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="alert_rule_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.name} ({self.kind})"


class AlertState(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="states")
    subject = models.CharField(max_length=300)
    value = models.FloatField(null=True, blank=True)
    breaching_since = models.DateTimeField(null=True, blank=True)
    firing = models.BooleanField(default=False)
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["rule", "subject"]
        constraints = [
            models.UniqueConstraint(fields=["rule", "subject"], name="alert_state_unique_subject")
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.subject}: {'firing' if self.firing else 'ok'}"


class Notification(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="notifications")
    subject = models.CharField(max_length=300)
    event = models.CharField(max_length=10)  # "firing" or "resolved"
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.subject} {self.event}"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    channel = models.CharField(max_length=8)  # "email" or "webhook"
    target = models.CharField(max_length=500)
    state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status = models.IntegerField(null=True, blank=True)  # the webhook's HTTP status
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="delivery_due")]

    def __str__(self) -> str:
        return f"{self.channel} to {self.target}: {self.state}"
