"""Periodic catalog maintenance."""

from __future__ import annotations

from celery import shared_task

from control_plane.catalog import client_versions


@shared_task(name="millrace.catalog.prune_client_versions", time_limit=300, ignore_result=True)
def prune_client_versions() -> int:
    """Forget client versions not seen for MILLRACE_CLIENT_VERSIONS_KEEP_DAYS."""
    return client_versions.prune()
