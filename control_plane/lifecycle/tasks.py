"""The tenant-deletion job, and the beat's sweep that resumes deletions whose worker died."""

from __future__ import annotations

import socket

from celery import shared_task

from control_plane.lifecycle import services


@shared_task(name="millrace.lifecycle.delete_tenant", time_limit=24 * 3600, ignore_result=True)
def delete_tenant(deletion_id: str) -> bool:
    """Run a tenant deletion's remaining steps (nothing when another worker holds it)."""
    return services.run_deletion(deletion_id, worker=socket.gethostname())


@shared_task(name="millrace.lifecycle.resume_deletions", time_limit=60, ignore_result=True)
def resume_deletions() -> int:
    """Queue every deletion no worker holds (never started, or its worker's lease lapsed:
    a worker killed mid-way). Returns how many were queued."""
    found = services.unfinished()
    for deletion in found:
        delete_tenant.delay(str(deletion.pk))
    return len(found)
