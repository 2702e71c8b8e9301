"""Redis connection pools shared by every cache object of a process.

Django creates a cache object per request context (under ASGI, per request), and its Redis
client builds a connection pool per object, so each request would connect to Redis anew.
``SharedConnectionPool.from_url`` hands every object the one pool for its URL and options.
"""

from __future__ import annotations

import threading
from typing import Any

import redis


class SharedConnectionPool(redis.ConnectionPool):
    _shared: dict[tuple[str, str], redis.ConnectionPool] = {}
    _lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Any:
        key = (url, repr(sorted(kwargs.items(), key=lambda item: item[0])))
        with cls._lock:
            pool = cls._shared.get(key)
            if pool is None:
                pool = cls._shared[key] = redis.ConnectionPool.from_url(url, **kwargs)
        return pool
