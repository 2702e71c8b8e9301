"""Periodic topic measurements (the console's throughput charts)."""

from __future__ import annotations

from celery import shared_task

from control_plane.catalog import usage


@shared_task(name="millrace.catalog.sample_topics", time_limit=120, ignore_result=True)
def sample_topics() -> int:
    """Record each topic's end offset, consumed offset and size; prune old samples."""
    return usage.sample_topics()
