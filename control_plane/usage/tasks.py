"""The beat's usage jobs: sum reports into hourly rows, and prune old rows."""

from __future__ import annotations

from celery import shared_task

from control_plane.usage import services


@shared_task(name="millrace.usage.aggregate", time_limit=600, ignore_result=True)
def aggregate() -> int:
    """Recompute the hourly rows of hours with new reports; returns the hours done."""
    return services.aggregate().hours


@shared_task(name="millrace.usage.prune", time_limit=600, ignore_result=True)
def prune() -> int:
    raw, hourly = services.prune()
    return raw + hourly
