"""What the Postgres connectors share: where they may connect, and how.

A worker that runs other people's connectors (a hosted worker) sets
``postgres.allowed.hosts`` in its worker config: a comma-separated list of host names
or addresses, ``host`` or ``host:port``, the connectors may reach. Without it (a worker
on one's own machine) any host is allowed, as in Kafka Connect. This keeps a tenant's
connector from being pointed at the platform's own metadata database.
"""

from __future__ import annotations

from collections.abc import Mapping

ALLOWED_HOSTS = "postgres.allowed.hosts"  # the worker config key


def host_error(host: str, port: int, worker_config: Mapping[str, str]) -> str | None:
    """Why ``host:port`` may not be used by a connector on this worker (None: it may)."""
    allowed = [
        entry.strip().lower()
        for entry in (worker_config.get(ALLOWED_HOSTS) or "").split(",")
        if entry.strip()
    ]
    if not allowed:
        return None
    host = host.strip().lower()
    if host in allowed or f"{host}:{port}" in allowed:
        return None
    return f"{host}:{port} is not among the hosts this worker may connect to"


def quote_ident(name: str) -> str:
    """An SQL identifier, quoted (``"a""b"``) so any name is safe."""
    return '"' + name.replace('"', '""') + '"'
