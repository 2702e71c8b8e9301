"""Periodic audit maintenance."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from control_plane.audit.models import AuditEvent

PRUNE_BATCH = 5000


@shared_task(name="millrace.audit.prune_audit_events", time_limit=300, ignore_result=True)
def prune_audit_events() -> int:
    """Delete events older than MILLRACE_AUDIT_RETENTION_DAYS, a batch at a time.

    Re-enqueues itself while a full batch was deleted, so one run never holds a long lock.
    """
    cutoff = timezone.now() - timedelta(days=settings.MILLRACE_AUDIT_RETENTION_DAYS)
    ids = list(
        AuditEvent.objects.filter(created_at__lt=cutoff)
        .order_by("id")
        .values_list("id", flat=True)[:PRUNE_BATCH]
    )
    deleted, _ = AuditEvent.objects.filter(id__in=ids).delete()
    if len(ids) == PRUNE_BATCH:
        prune_audit_events.delay()
    return deleted
