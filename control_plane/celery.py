"""The Celery application for the controller and maintenance jobs.

Tasks are declared with explicit dotted names (``millrace.<app>.<verb>``) and take ids,
never model instances. The broker is Redis with ``REDIS_URL`` and the filesystem
transport without it (see settings).

Workers and beat log through ``settings.LOGGING`` (JSON or plain, ``control_plane.logs``)
instead of Celery's own format; a task's log lines carry its ``task_id`` and ``task``.
Workers serve task metrics (``control_plane.celery_metrics``).
"""

from __future__ import annotations

import logging.config
import os
from typing import Any

import structlog
from celery import Celery, signals

from control_plane import celery_metrics  # noqa: F401 - connects the worker's metric signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

app = Celery("millrace")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    """With a receiver here Celery leaves the root logger alone: ours formats everything."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


# Task id -> what binding it replaced (a task run eagerly inside a request keeps the
# request's context afterwards).
_bound: dict[str, Any] = {}


@signals.task_prerun.connect
def _bind_task(sender: Any = None, task_id: str | None = None, **_: Any) -> None:
    if task_id:
        _bound[task_id] = structlog.contextvars.bind_contextvars(
            task_id=task_id, task=getattr(sender, "name", None)
        )


@signals.task_postrun.connect
def _unbind_task(task_id: str | None = None, **_: Any) -> None:
    tokens = _bound.pop(task_id, None) if task_id else None
    if tokens:
        structlog.contextvars.reset_contextvars(**tokens)


def _lag_interval() -> float:
    from django.conf import settings

    return float(settings.MILLRACE_LAG_SAMPLE_SECONDS)


def _usage_interval() -> float:
    from django.conf import settings

    return float(settings.MILLRACE_USAGE_AGGREGATE_SECONDS)


def _alert_interval() -> float:
    from django.conf import settings

    return float(settings.MILLRACE_ALERT_EVALUATE_SECONDS)


app.conf.beat_schedule = {
    "prune-audit-events": {
        "task": "millrace.audit.prune_audit_events",
        "schedule": 3600.0,
    },
    "prune-client-versions": {
        "task": "millrace.catalog.prune_client_versions",
        "schedule": 3600.0,
    },
    "expire-group-offsets": {
        "task": "millrace.groups.expire_offsets",
        "schedule": 600.0,
    },
    "controller-tick": {
        "task": "millrace.controller.tick",
        "schedule": 1.0,
    },
    "preferred-leader-election": {
        "task": "millrace.controller.preferred_leader_election",
        "schedule": 300.0,
    },
    "aggregate-usage": {
        "task": "millrace.usage.aggregate",
        "schedule": _usage_interval(),
    },
    "prune-usage": {
        "task": "millrace.usage.prune",
        "schedule": 3600.0,
    },
    "evaluate-alerts": {
        "task": "millrace.alerts.evaluate",
        "schedule": _alert_interval(),
    },
    "retry-alert-deliveries": {
        "task": "millrace.alerts.retry_deliveries",
        "schedule": 10.0,
    },
    "resume-tenant-deletions": {
        "task": "millrace.lifecycle.resume_deletions",
        "schedule": 30.0,
    },
    "sample-group-lag": {
        "task": "millrace.groups.sample_lag",
        "schedule": _lag_interval(),
    },
    "sample-topics": {
        "task": "millrace.catalog.sample_topics",
        "schedule": _lag_interval(),
    },
}
