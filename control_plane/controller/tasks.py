"""The controller's Celery tasks: beat runs ``tick`` every second; anything may trigger it.

Several workers may run these at once: every decision is a compare-and-set on the
partition row (see ``services``), so exactly one of two concurrent decisions is applied.
"""

from __future__ import annotations

from celery import shared_task

from control_plane.controller import services


@shared_task(name="millrace.controller.tick", time_limit=60, ignore_result=True)
def tick() -> int:
    """Fence brokers whose lease expired and fix leadership; returns the changes made."""
    return len(services.controller_tick())


@shared_task(name="millrace.controller.preferred_leader_election", time_limit=300)
def preferred_leader_election() -> int:
    return len(services.preferred_leader_election())
