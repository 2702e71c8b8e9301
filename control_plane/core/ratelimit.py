"""Limits failed authentication attempts per client address (login, API keys).

Counts live in Django's cache (Redis in production, so every web process shares them;
local memory on the embedded default). A fixed one-minute window is enough to make
guessing a password or key secret hopeless without locking out a legitimate user for long.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache

WINDOW_SECONDS = 60


def _key(scope: str, ip: str | None) -> str:
    window = int(time.time() // WINDOW_SECONDS)
    return f"authfail:{scope}:{ip or 'unknown'}:{window}"


def is_blocked(scope: str, ip: str | None) -> bool:
    count = cache.get(_key(scope, ip), 0)
    return int(count) >= settings.MILLRACE_AUTH_FAILURES_PER_MINUTE


def record_failure(scope: str, ip: str | None) -> None:
    key = _key(scope, ip)
    if cache.add(key, 1, timeout=WINDOW_SECONDS * 2):
        return
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=WINDOW_SECONDS * 2)


def retry_after_seconds() -> int:
    return WINDOW_SECONDS - int(time.time() % WINDOW_SECONDS)
