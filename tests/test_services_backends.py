"""The real services behind the settings: Postgres LISTEN/NOTIFY and the Channels layer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import psycopg
import pytest
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection

from control_plane.access import services as access_services
from control_plane.catalog import services as catalog_services
from control_plane.core.notify import CHANNEL
from tests.conftest import SYSTEM
from tests.test_settings import django_python


@contextlib.contextmanager
def listening():
    """A separate autocommit connection LISTENing on the metadata channel."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY needs Postgres; brokers poll on SQLite")
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        yield listener


@pytest.mark.django_db(transaction=True)
def test_metadata_changes_are_notified_after_commit(tenant_a):
    with listening() as listener:
        topic = catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
        sa = access_services.create_service_account(SYSTEM, tenant_a, name="app")
        key = access_services.create_api_key(SYSTEM, sa).api_key
        access_services.revoke_api_key(SYSTEM, key)
        catalog_services.delete_topic(SYSTEM, topic)
        payloads = [json.loads(n.payload) for n in listener.notifies(timeout=5, stop_after=4)]
    assert [p["kind"] for p in payloads] == [
        "topic.created",
        "access.api_key_created",
        "access.api_key_revoked",
        "topic.deleted",
    ]
    assert payloads[0]["topic_id"] == str(topic.topic_id)
    assert payloads[1]["key_id"] == payloads[2]["key_id"] == key.key_id


@pytest.mark.django_db(transaction=True)
def test_failed_change_notifies_nothing(tenant_a):
    with listening() as listener:
        with pytest.raises(Exception):  # noqa: B017 - any service error
            catalog_services.create_topic(SYSTEM, tenant_a, name="bad name", partition_count=1)
        assert list(listener.notifies(timeout=1, stop_after=1)) == []


def test_channel_layer_round_trip():
    layer = get_channel_layer()
    expected = "channels_redis" if settings.REDIS_URL else "channels.layers"
    assert type(layer).__module__.startswith(expected)

    async def round_trip():
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "probe", "n": 1})
        return await asyncio.wait_for(layer.receive(channel), timeout=5)

    assert asyncio.run(round_trip()) == {"type": "probe", "n": 1}


def test_cache_objects_share_one_redis_pool():
    """Django makes a cache object per request context; they must not each connect anew."""
    if not settings.REDIS_URL:
        pytest.skip("the Redis cache needs REDIS_URL")
    from django.core.cache import caches

    first, second = caches.create_connection("default"), caches.create_connection("default")
    assert first is not second
    assert first._cache._get_connection_pool(True) is second._cache._get_connection_pool(True)
    second.set("pool-probe", 1, timeout=5)
    assert first.get("pool-probe") == 1


POOL_PROBE = """
import json, threading, django
django.setup()
from django.db import connection

pids = []

def request():  # as daphne runs a view: a new thread, the connection closed at the end
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pids.append(cursor.fetchone()[0])
    connection.close()

for _ in range(6):
    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
print(json.dumps({"pooled": getattr(connection, "pool", None) is not None, "pids": pids}))
"""


@pytest.mark.parametrize("pool_size", ["0", "3"])
def test_database_pool_serves_requests_in_new_threads(pool_size):
    """DATABASE_POOL_SIZE (the web role's setting) reuses connections across request threads."""
    if connection.vendor != "postgresql":
        pytest.skip("the connection pool is for Postgres")
    result = django_python(POOL_PROBE, {**os.environ, "DATABASE_POOL_SIZE": pool_size})
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout)
    assert len(probe["pids"]) == 6
    if pool_size == "0":  # a connection per request thread
        assert not probe["pooled"]
        assert len(set(probe["pids"])) == 6
    else:
        assert probe["pooled"]
        assert len(set(probe["pids"])) <= int(pool_size)
