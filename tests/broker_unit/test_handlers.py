"""Broker handlers in-process: the in-memory store, a replica manager on a temporary
directory, the metadata cache — no broker process, no sockets, no database.

The handlers see only ``RequestContext`` and ``Services`` (narrow protocols), so a test
assembles exactly those and calls a handler with a decoded request body.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest

from data_plane.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from data_plane.broker.handlers import DISPATCH
from data_plane.broker.handlers.context import RequestContext, Services
from data_plane.broker.memory_store import MemoryStore
from data_plane.broker.metadata_cache import MetadataCache
from data_plane.broker.metrics import BrokerMetrics
from data_plane.broker.quotas import ByteRateQuotas
from data_plane.groups.coordinator import CoordinatorConfig, GroupCoordinator
from data_plane.log.config import LogConfig
from data_plane.log.manager import LogManager
from data_plane.metadata.model import BrokerInfo, MetadataSnapshot
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import create_topics, fetch, metadata, produce
from data_plane.records.batch import iter_batches
from data_plane.replication.manager import ReplicaManager, ReplicationConfig
from tests.log.helpers import batch

E = ErrorCode
ME = 1


class Node:
    """The broker-side protocols a handler needs (Metadata, Cluster, TenantLimits,
    ProducerIds), kept by a metadata cache over the store."""

    def __init__(self, store: MemoryStore, replicas: ReplicaManager) -> None:
        self.store = store
        self.cache = MetadataCache(full_refresh_seconds=None)
        self.replicas = replicas
        self.refreshes = 0
        self.storage: dict[int, int] = {}
        self.next_id = 1000

    @property
    def snapshot(self) -> MetadataSnapshot:
        return self.cache.snapshot

    async def refresh_metadata(self) -> None:
        self.refreshes += 1
        change = self.cache.refresh(self.store)
        if self.cache.unassigned_topics and self.store.assign_unassigned_partitions():
            change = self.cache.refresh(self.store)
        self.replicas.apply(self.snapshot, None if change.full else change.topics)

    @property
    def broker_id(self) -> int:
        return ME

    def broker_metadata(self, tls: bool = False) -> dict[str, Any]:
        return {"node_id": ME, "host": "127.0.0.1", "port": 9092, "rack": None}

    def cluster_metadata(self, tls: bool = False) -> list[dict[str, Any]]:
        return [self.broker_metadata(tls)]

    def coordinator_for(self, tenant_id: int, group_id: str) -> BrokerInfo | None:
        return self.snapshot.brokers.get(ME)

    def default_partitions(self, tenant_id: int) -> int:
        return 1

    def tenant_rate(self, tenant_id: int, direction: str) -> int:
        return 2**40

    def tenant_storage(self, tenant_id: int) -> int:
        return self.storage.get(tenant_id, 0)

    def tenant_over_storage(self, tenant_id: int) -> bool:
        return False

    def add_storage(self, tenant_id: int, nbytes: int) -> None:
        self.storage[tenant_id] = self.storage.get(tenant_id, 0) + nbytes

    async def next_producer_id(self) -> int:
        self.next_id += 1
        return self.next_id


@pytest.fixture
def world(tmp_path: Path):
    store = MemoryStore(default_replication_factor=1)
    store.register_broker(ME, "127.0.0.1", 9092, None)
    logs = LogManager(tmp_path, lambda _: LogConfig())
    metrics = BrokerMetrics()
    replicas = ReplicaManager(
        ReplicationConfig(broker_id=ME, data_dir=tmp_path),
        logs,
        lambda _: LogConfig(),
        store,
        metrics,
        lambda: node.snapshot.brokers,
    )
    node = Node(store, replicas)

    async def call(fn: Any, *args: Any) -> Any:
        return fn(*args)

    services = Services(
        metadata=node,
        cluster=node,
        tenants=node,
        producer_ids=node,
        admin=store,
        replicas=replicas,
        groups=GroupCoordinator(store, call, CoordinatorConfig()),
        quotas=ByteRateQuotas(),
        metrics=metrics,
    )
    acme = store.add_tenant("acme")
    globex = store.add_tenant("globex")
    yield store, node, services, acme, globex
    replicas.stop()
    logs.close_all()


def principal_of(store: MemoryStore, tenant_id: int, *grants: tuple[Operation, ResourceType]):
    key_id, _ = store.add_key(tenant_id, "app")
    for op, rtype in grants:
        name = "kafka-cluster" if rtype is ResourceType.CLUSTER else "*"
        store.add_acl(
            tenant_id,
            AclBinding(
                principal="User:app",
                resource_type=rtype,
                pattern_type=PatternType.LITERAL,
                resource_name=name,
                operation=op,
                permission=Permission.ALLOW,
                host="*",
            ),
        )
    principal = store.principal_for_key(key_id)
    assert principal is not None
    return principal


def call(services: Services, principal: Any, key: int, version: int, body: dict[str, Any]):
    ctx = RequestContext(services, principal, "127.0.0.1", version, "unit-test")
    return asyncio.run(DISPATCH[key](ctx, body))


def test_produce_then_fetch_reads_back_what_was_stored(world):
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders", partitions=2)
    asyncio.run(node.refresh_metadata())
    app = principal_of(
        store, acme, (Operation.WRITE, ResourceType.TOPIC), (Operation.READ, ResourceType.TOPIC)
    )
    asyncio.run(node.refresh_metadata())
    records = batch(3)
    answer = call(
        services,
        app,
        produce.KEY,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": "orders", "partition_data": [{"index": 1, "records": records}]}
            ],
        },
    )
    [part] = answer["responses"][0]["partition_responses"]
    assert (part["error_code"], part["base_offset"]) == (E.NONE, 0)
    assert node.storage[acme] == len(records)
    got = call(
        services,
        app,
        fetch.KEY,
        12,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [
                        {
                            "partition": 1,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    [fetched] = got["responses"][0]["partitions"]
    assert fetched["error_code"] == E.NONE and fetched["high_watermark"] == 3
    stored = fetched["records"].read()
    [header] = list(iter_batches(stored))
    assert (header.base_offset, header.records_count) == (0, 3)
    # What was stored is the producer's batch with its offset assigned, CRC intact.
    assert zlib.crc32(stored[61:]) == zlib.crc32(bytes(records)[61:])


def test_metadata_shows_only_the_callers_tenant_and_only_what_it_may_describe(world):
    store, node, services, acme, globex = world
    store.add_topic(acme, "orders")
    store.add_topic(globex, "orders")
    store.add_topic(globex, "secrets")
    viewer = principal_of(store, globex, (Operation.DESCRIBE, ResourceType.TOPIC))
    nobody = principal_of(store, acme)
    asyncio.run(node.refresh_metadata())
    body = {"topics": None, "allow_auto_topic_creation": False}
    seen = call(services, viewer, metadata.KEY, 12, body)
    assert sorted(t["name"] for t in seen["topics"]) == ["orders", "secrets"]
    assert all(t["topic_id"].int for t in seen["topics"])
    assert {t["topic_id"] for t in seen["topics"]} != {
        store.snapshot().topic(acme, "orders").topic_id
    }
    # Without Describe nothing is listed, and asking by name says not authorized; another
    # tenant's topic of the same name is simply this tenant's (here: not authorized).
    assert call(services, nobody, metadata.KEY, 12, body)["topics"] == []
    named = {"topics": [{"name": "secrets", "topic_id": uuid.UUID(int=0)}]}
    [topic] = call(
        services, nobody, metadata.KEY, 12, named | {"allow_auto_topic_creation": False}
    )["topics"]
    assert topic["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_goes_through_the_store_and_refreshes_the_metadata(world):
    store, node, services, acme, _ = world
    admin = principal_of(store, acme, (Operation.CREATE, ResourceType.CLUSTER))
    asyncio.run(node.refresh_metadata())
    before = node.refreshes
    request = {
        "topics": [
            {
                "name": "events",
                "num_partitions": 3,
                "replication_factor": -1,
                "assignments": [],
                "configs": [{"name": "cleanup.policy", "value": "compact"}],
            },
            {
                "name": "bad name!",
                "num_partitions": 1,
                "replication_factor": -1,
                "assignments": [],
                "configs": [],
            },
        ],
        "timeout_ms": 1000,
        "validate_only": False,
    }
    answer = call(services, admin, create_topics.KEY, 7, request)
    created, refused = answer["topics"]
    assert created["error_code"] == E.NONE and created["num_partitions"] == 3
    assert refused["error_code"] == E.INVALID_TOPIC_EXCEPTION
    assert node.refreshes == before + 1
    topic = node.snapshot.topic(acme, "events")
    assert topic is not None and topic.partition_count == 3
    assert topic.configs == {"cleanup.policy": "compact"}
    assert node.snapshot.topic(acme, "bad name!") is None  # the refusal left nothing
    # Its partitions were placed on this broker, which now leads them.
    partition, code = services.replicas.leader_partition(topic, 2)
    assert code == E.NONE and partition is not None


def test_produce_to_another_tenants_topic_is_unknown(world):
    store, node, services, acme, globex = world
    store.add_topic(globex, "payments")
    writer = principal_of(store, acme, (Operation.WRITE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    answer = call(
        services,
        writer,
        produce.KEY,
        9,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": "payments", "partition_data": [{"index": 0, "records": batch(1)}]}
            ],
        },
    )
    [part] = answer["responses"][0]["partition_responses"]
    assert part["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    topic = store.snapshot().topic(globex, "payments")
    partition, _ = services.replicas.leader_partition(topic, 0)
    assert partition is not None and partition.log.log_end_offset == 0  # nothing written
