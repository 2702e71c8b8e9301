"""The Celery application for the controller and maintenance jobs.

Tasks are declared with explicit dotted names (``millrace.<app>.<verb>``) and take ids,
never model instances. The broker is Redis with ``REDIS_URL`` and the filesystem
transport without it (see settings).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

app = Celery("millrace")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _lag_interval() -> float:
    from django.conf import settings

    return float(settings.MILLRACE_LAG_SAMPLE_SECONDS)


app.conf.beat_schedule = {
    "prune-audit-events": {
        "task": "millrace.audit.prune_audit_events",
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
    "sample-group-lag": {
        "task": "millrace.groups.sample_lag",
        "schedule": _lag_interval(),
    },
}
