"""The broker threads' database connections: checked once a second, not before every
call, and replaced at once after one broke."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection

from control_plane.brokerlink import connections
from control_plane.brokerlink.transactions import DjangoTransactionStore


def test_the_connection_is_checked_at_most_once_a_second(monkeypatch) -> None:
    checks: list[float] = []
    now = [1000.0]
    monkeypatch.setattr(connections, "close_old_connections", lambda: checks.append(now[0]))
    monkeypatch.setattr(connections.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(connections, "_checked", type(connections._checked)())
    for _ in range(5):
        connections.fresh_connection()
    now[0] += 0.5
    connections.fresh_connection()
    assert checks == [1000.0]
    now[0] += 0.6
    connections.fresh_connection()
    assert checks == [1000.0, 1001.1]


@pytest.mark.django_db(transaction=True)
def test_a_connection_cut_under_a_broker_thread_costs_one_call() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs Postgres (a backend to terminate)")
    import psycopg

    from control_plane.tenancy.models import Tenant

    tenant = Tenant.objects.create(name="conn", slug="conn").id
    store = DjangoTransactionStore()
    assert store.load_transaction(tenant, "tx") is None
    backend = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [backend])
    with pytest.raises(DatabaseError):
        store.load_transaction(tenant, "tx")  # within the second: not checked first
    # The failure marks the connection; the next call replaces it instead of failing too.
    assert store.load_transaction(tenant, "tx") is None
    assert connection.connection.info.backend_pid != backend
