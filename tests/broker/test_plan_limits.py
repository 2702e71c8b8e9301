"""A plan's limits on a broker, in process with the in-memory store: the connections a
tenant may hold on each broker and the retention ceiling, both changed without a restart
(the tenant's metadata changes; the broker applies it to new connections and open logs).
The connection limit with real clients is in tests/broker/test_connection_limits.py."""

from __future__ import annotations

import asyncio

from data_plane.broker.memory_store import MemoryStore
from data_plane.broker.server import Broker, BrokerConfig
from data_plane.log.config import LogConfig
from data_plane.log.manager import TopicPartition

HOUR_MS = 3_600_000


def test_the_retention_ceiling_caps_longer_and_unlimited_retention_only():
    week = LogConfig()
    assert week.with_retention_ceiling(None) is week
    assert week.with_retention_ceiling(HOUR_MS).retention_ms == HOUR_MS
    forever = LogConfig(retention_ms=-1)
    assert forever.with_retention_ceiling(HOUR_MS).retention_ms == HOUR_MS
    short = LogConfig(retention_ms=60_000)
    assert short.with_retention_ceiling(HOUR_MS) is short


def test_a_plan_change_reaches_open_logs_and_new_connections_without_a_restart(tmp_path):
    store = MemoryStore()
    acme = store.add_tenant("acme")
    other = store.add_tenant("globex")
    broker = Broker(BrokerConfig(data_dir=tmp_path, max_connections_per_tenant=10), store)

    async def scenario() -> None:
        store.register_broker(1, "127.0.0.1", 9092, None)
        await broker.refresh_metadata(full=True)
        topic = store.add_topic(acme, "orders", configs={"retention.ms": "-1"})
        kept = store.add_topic(acme, "audit", configs={"retention.ms": "60000"})
        theirs = store.add_topic(other, "orders")
        await broker.refresh_metadata()
        logs = {
            name: broker.logs.get_or_create(TopicPartition(t.topic_id, 0), broker.config_for(t))
            for name, t in (("orders", topic), ("audit", kept), ("theirs", theirs))
        }
        assert logs["orders"].config.retention_ms == -1
        # The plan gets a ceiling of an hour and two connections per broker.
        store.update_tenant(acme, max_retention_ms=HOUR_MS, max_connections=2)
        await broker.refresh_metadata()
        assert logs["orders"].config.retention_ms == HOUR_MS
        assert logs["audit"].config.retention_ms == 60_000  # within it already
        assert logs["theirs"].config.retention_ms == LogConfig().retention_ms
        assert [broker.admit_tenant(acme) for _ in range(3)] == [True, True, False]
        assert broker.admit_tenant(other)  # another tenant is not counted with it
        # An upgrade: more connections, no ceiling; the open logs follow at once.
        store.update_tenant(acme, max_retention_ms=None, max_connections=5)
        await broker.refresh_metadata()
        assert logs["orders"].config.retention_ms == -1
        assert broker.admit_tenant(acme)
        # The broker's own limit still applies when it is the lower one.
        store.update_tenant(acme, max_connections=1000)
        await broker.refresh_metadata()
        assert sum(broker.admit_tenant(acme) for _ in range(20)) == 10 - 3

    asyncio.run(scenario())
