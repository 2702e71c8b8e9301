"""Telling brokers that metadata changed (topics, and the keys and ACLs they enforce).

On Postgres a change is announced with ``pg_notify`` on the ``millrace_metadata``
channel after the transaction commits; brokers LISTEN and refresh their cache (Step 3).
Where LISTEN/NOTIFY is missing (the embedded SQLite default) brokers poll instead, so
this is a documented no-op there.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, transaction

CHANNEL = "millrace_metadata"


def _send(payload: dict[str, Any]) -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, json.dumps(payload)])


def notify_metadata_changed(kind: str, **fields: Any) -> None:
    """Announce ``kind`` (e.g. ``topic.created``) once the current transaction commits."""
    payload = {"kind": kind, **fields}
    transaction.on_commit(lambda: _send(payload))
