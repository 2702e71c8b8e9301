"""Knowing at once that a broker process died: a Postgres session lock it holds.

The heartbeat lease (``MILLRACE_BROKER_LEASE_SECONDS``) covers every way a broker can
stop answering, but takes the whole lease to notice. A broker on Postgres also holds a
session-level advisory lock, keyed by its id, on a connection of its own. When the
process dies (kill -9, a crash, an OOM kill) the kernel closes that connection, Postgres
ends the session and the lock goes with it, so the controller's next tick sees the broker
gone and fences it without waiting for the lease. A broker that is alive but stuck (a
pause, an overloaded machine) keeps its lock; the lease still fences it.

A broker records in its row whether it holds the lock (``Broker.liveness_lock``), so a
broker that could not take it (SQLite, an earlier process with the same id still
holding it) is judged by its lease alone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import psycopg
from django.db import connection

logger = logging.getLogger(__name__)
LOCK_CLASS = 0x4D52  # the first key of every broker liveness lock ("MR")


def _connect() -> Any:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


class LivenessLock:
    """The lock one broker process holds while it runs."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._guard = threading.Lock()

    def ensure(self, broker_id: int) -> bool:
        """Hold the lock (taking it again after a lost connection); True if held."""
        if connection.vendor != "postgresql":
            return False
        with self._guard:
            if self._conn is not None:
                try:
                    self._conn.execute("SELECT 1")
                    return True
                except psycopg.Error:
                    logger.warning("broker liveness connection lost; taking the lock again")
                    self._close()
            try:
                conn = _connect()
                row = conn.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, broker_id)
                ).fetchone()
            except psycopg.Error:
                logger.warning("could not take the broker liveness lock", exc_info=True)
                return False
            if not row or not row[0]:
                conn.close()
                logger.warning(
                    "another session holds broker %s's liveness lock (an earlier process?); "
                    "relying on the heartbeat lease",
                    broker_id,
                )
                return False
            self._conn = conn
            return True

    def release(self) -> None:
        with self._guard:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


def lock_holders() -> set[int] | None:
    """Ids of brokers whose process holds its lock now; None where there are no locks."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objsubid = 2"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [LOCK_CLASS],
        )
        return {int(row[0]) for row in cursor.fetchall()}
