"""The database connection of a broker's worker thread, kept healthy cheaply.

``close_old_connections()`` before every store call (a broker lives for days; its
connections must not) makes Django check the connection with a ``SELECT 1`` before the
call's first query, since ``CONN_HEALTH_CHECKS`` is on: a second round trip on every
call, paid on the hot paths (each transaction's coordinator writes, each leader's
verification read, group offset commits). :func:`fresh_connection` does the same at most
once a second per thread, and at once after a query failed on the connection (Django then
tests it and opens a new one), so a broken connection costs at most that one failed call.
"""

from __future__ import annotations

import threading
import time

from django.db import close_old_connections, connection

CHECK_EVERY_S = 1.0

_checked = threading.local()


def fresh_connection() -> None:
    now = time.monotonic()
    last = getattr(_checked, "at", None)
    if last is None or now - last >= CHECK_EVERY_S or connection.errors_occurred:
        close_old_connections()
        _checked.at = now
