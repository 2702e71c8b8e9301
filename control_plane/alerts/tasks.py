"""The beat's alert jobs: evaluate the rules, and send deliveries that are due."""

from __future__ import annotations

from celery import shared_task

from control_plane.alerts import services


@shared_task(name="millrace.alerts.evaluate", time_limit=120, ignore_result=True)
def evaluate() -> int:
    """Measure every enabled rule; returns how many subjects fired or resolved."""
    result = services.evaluate()
    return result.fired + result.resolved


@shared_task(name="millrace.alerts.deliver", time_limit=60, ignore_result=True)
def deliver(delivery_id: int) -> str | None:
    return services.deliver(delivery_id)


@shared_task(name="millrace.alerts.retry_deliveries", time_limit=300, ignore_result=True)
def retry_deliveries() -> int:
    """Send every pending delivery that is due (retries after back-off, and any whose
    task was lost); returns how many were tried."""
    due = services.due_deliveries()
    for pk in due:
        services.deliver(pk)
    return len(due)
