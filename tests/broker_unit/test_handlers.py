"""Broker handlers in-process: the in-memory store, a replica manager on a temporary
directory, the metadata cache — no broker process, no sockets, no database.

The handlers see only ``RequestContext`` and ``Services`` (narrow protocols), so a test
assembles exactly those and calls a handler with a decoded request body.
"""

from __future__ import annotations

import asyncio
import time
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
from data_plane.broker.txn_markers import BrokerMarkerWriter
from data_plane.groups.consumer_group import ConsumerConfig, ConsumerGroupCoordinator
from data_plane.groups.coordinator import CoordinatorConfig, GroupCoordinator
from data_plane.log.config import LogConfig
from data_plane.log.manager import LogManager
from data_plane.metadata.model import BrokerInfo, MetadataSnapshot
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import create_topics, delete_topics, fetch, metadata, produce
from data_plane.records.batch import iter_batches
from data_plane.replication.manager import ReplicaManager, ReplicationConfig
from data_plane.txn.coordinator import TransactionCoordinator
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
        # As the server's: this broker, then the others at the client's listener's address.
        others = [
            {"node_id": b.id, "host": host, "port": port, "rack": b.rack}
            for b in sorted(self.snapshot.brokers.values(), key=lambda b: b.id)
            if b.id != ME
            for host, port in [b.endpoint(tls)]
            if port is not None
        ]
        return [self.broker_metadata(tls), *others]

    def coordinator_for(self, tenant_id: int, group_id: str) -> BrokerInfo | None:
        return self.snapshot.brokers.get(ME)

    def transaction_coordinator_for(
        self, tenant_id: int, transactional_id: str
    ) -> BrokerInfo | None:
        return self.snapshot.brokers.get(ME)

    def default_partitions(self, tenant_id: int) -> int:
        return 1

    def tenant_rate(self, tenant_id: int, direction: str) -> int:
        return 2**40

    def tenant_storage(self, tenant_id: int) -> int:
        return self.storage.get(tenant_id, 0)

    def tenant_over_storage(self, tenant_id: int) -> bool:
        return False

    def tenant_suspended(self, tenant_id: int) -> str | None:
        tenant = self.snapshot.tenants.get(tenant_id)
        return tenant.suspension() if tenant is not None else None

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

    groups = GroupCoordinator(store, call, CoordinatorConfig())
    markers = BrokerMarkerWriter(ME, lambda: node.snapshot, replicas, "", node.refresh_metadata)
    transactions = TransactionCoordinator(
        store, call, markers, clock=lambda: int(time.time() * 1000)
    )
    services = Services(
        metadata=node,
        cluster=node,
        tenants=node,
        producer_ids=node,
        admin=store,
        replicas=replicas,
        groups=groups,
        consumer_groups=ConsumerGroupCoordinator(groups, ConsumerConfig()),
        quotas=ByteRateQuotas(),
        metrics=metrics,
        transactions=transactions,
        consumer_protocol=True,
    )
    acme = store.add_tenant("acme")
    globex = store.add_tenant("globex")
    yield store, node, services, acme, globex
    replicas.stop()
    logs.close_all()


def principal_of(
    store: MemoryStore, tenant_id: int, *grants: tuple[Operation, ResourceType], name: str = "app"
):
    key_id, _ = store.add_key(tenant_id, name)
    for op, rtype in grants:
        resource = "kafka-cluster" if rtype is ResourceType.CLUSTER else "*"
        store.add_acl(
            tenant_id,
            AclBinding(
                principal=f"User:{name}",
                resource_type=rtype,
                pattern_type=PatternType.LITERAL,
                resource_name=resource,
                operation=op,
                permission=Permission.ALLOW,
                host="*",
            ),
        )
    principal = store.principal_for_key(key_id)
    assert principal is not None
    return principal


def call(
    services: Services,
    principal: Any,
    key: int,
    version: int,
    body: dict[str, Any],
    tls: bool = False,
):
    ctx = RequestContext(services, principal, "127.0.0.1", version, "unit-test", tls)
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


def test_metadata_by_topic_id_stays_inside_the_tenant(world):
    """KIP-848 consumers learn their assignment as topic ids and ask Metadata by id."""
    store, node, services, acme, globex = world
    store.add_topic(acme, "orders", partitions=3)
    store.add_topic(globex, "orders")
    viewer = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.TOPIC))
    nobody = principal_of(store, acme, name="stranger")
    asyncio.run(node.refresh_metadata())
    mine = store.snapshot().topic(acme, "orders").topic_id
    theirs = store.snapshot().topic(globex, "orders").topic_id

    def by_id(principal: Any, version: int, *ids: uuid.UUID) -> list[dict[str, Any]]:
        body = {
            "topics": [{"name": None, "topic_id": i} for i in ids],
            "allow_auto_topic_creation": False,
        }
        return call(services, principal, metadata.KEY, version, body)["topics"]

    [found, unknown, other] = by_id(viewer, 12, mine, uuid.uuid4(), theirs)
    assert (found["error_code"], found["name"], found["topic_id"]) == (E.NONE, "orders", mine)
    assert len(found["partitions"]) == 3
    assert (unknown["error_code"], unknown["name"]) == (E.UNKNOWN_TOPIC_ID, None)
    # Another tenant's id is as unknown as one that never existed.
    assert (other["error_code"], other["name"]) == (E.UNKNOWN_TOPIC_ID, None)
    [refused] = by_id(nobody, 12, mine)
    assert (refused["error_code"], refused["name"]) == (E.TOPIC_AUTHORIZATION_FAILED, None)
    # v10-11 answer a name that may not be null: empty.
    [old] = by_id(viewer, 10, uuid.uuid4())
    assert (old["error_code"], old["name"]) == (E.UNKNOWN_TOPIC_ID, "")


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


def test_a_suspended_tenant_may_not_produce_and_is_told_why(world):
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    writer = principal_of(store, acme, (Operation.WRITE, ResourceType.TOPIC))
    store.update_tenant(acme, suspended="unpaid invoice", reads_until_ms=0)
    asyncio.run(node.refresh_metadata())
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": batch(1)}]}],
    }
    [part] = call(services, writer, produce.KEY, 9, body)["responses"][0]["partition_responses"]
    assert part["error_code"] == E.POLICY_VIOLATION
    assert part["error_message"] == "tenant 'acme' is suspended: unpaid invoice"
    topic = store.snapshot().topic(acme, "orders")
    partition, _ = services.replicas.leader_partition(topic, 0)
    assert partition is not None and partition.log.log_end_offset == 0  # nothing written
    store.update_tenant(acme, suspended=None)  # resumed: the next produce is stored
    asyncio.run(node.refresh_metadata())
    [part] = call(services, writer, produce.KEY, 9, body)["responses"][0]["partition_responses"]
    assert part["error_code"] == E.NONE and partition.log.log_end_offset == 1


# --- Fetch by topic id (v13+) ---------------------------------------------------------------

BY_ID = range(13, 18)


def fetch_by_id(
    services: Services,
    principal: Any,
    version: int,
    wanted: list[tuple[uuid.UUID, int]],
    *,
    tls: bool = False,
    replica_id: int = -1,
) -> dict[str, Any]:
    """A Fetch by topic id as a client sends it: encoded at ``version`` and decoded again,
    so the handler sees exactly what the wire carries (defaults for absent tagged fields)."""
    body: dict[str, Any] = {
        "replica_id": replica_id,
        "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": index,
                        "fetch_offset": 0,
                        "partition_max_bytes": 1 << 20,
                        "replica_directory_id": uuid.uuid4(),
                    }
                ],
            }
            for topic_id, index in wanted
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    decoded = fetch.REQUEST.decode(fetch.REQUEST.encode(body, version), version)
    got: dict[str, Any] = call(services, principal, fetch.KEY, version, decoded, tls)
    # What the handler answers must encode at the version asked for.
    fetch.RESPONSE.encode_chunks(got, version)
    return got


def produce_three(services: Services, principal: Any, topic: str) -> bytes:
    records = batch(3)
    answer = call(
        services,
        principal,
        produce.KEY,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == E.NONE
    return bytes(records)


@pytest.mark.parametrize("version", BY_ID)
def test_fetch_by_topic_id_reads_the_topic_and_echoes_its_id(world, version):
    store, node, services, acme, _ = world
    orders = store.add_topic(acme, "orders")
    app = principal_of(
        store, acme, (Operation.WRITE, ResourceType.TOPIC), (Operation.READ, ResourceType.TOPIC)
    )
    asyncio.run(node.refresh_metadata())
    produced = produce_three(services, app, "orders")
    got = fetch_by_id(services, app, version, [(orders.topic_id, 0)])
    [topic] = got["responses"]
    assert topic["topic_id"] == orders.topic_id
    [part] = topic["partitions"]
    assert (part["error_code"], part["high_watermark"]) == (E.NONE, 3)
    stored = part["records"].read()
    [header] = list(iter_batches(stored))
    assert (header.base_offset, header.records_count) == (0, 3)
    assert zlib.crc32(stored[61:]) == zlib.crc32(produced[61:])
    assert "node_endpoints" not in got and "current_leader" not in part


@pytest.mark.parametrize("version", BY_ID)
def test_fetch_by_id_of_another_tenants_topic_is_as_unknown_as_a_random_id(world, version):
    store, node, services, acme, globex = world
    theirs = store.add_topic(globex, "orders")
    store.add_topic(acme, "orders")
    app = principal_of(store, acme, (Operation.READ, ResourceType.TOPIC))
    key_id, _ = store.add_key(acme, "nobody")  # no READ: an unknown id is unknown first
    nobody = store.principal_for_key(key_id)
    asyncio.run(node.refresh_metadata())
    stranger = uuid.uuid4()
    for who in (app, nobody):
        got = fetch_by_id(services, who, version, [(theirs.topic_id, 0), (stranger, 0)])
        assert [t["topic_id"] for t in got["responses"]] == [theirs.topic_id, stranger]
        codes = [p["error_code"] for t in got["responses"] for p in t["partitions"]]
        assert codes == [E.UNKNOWN_TOPIC_ID, E.UNKNOWN_TOPIC_ID]
        assert all(p["records"] == b"" for t in got["responses"] for p in t["partitions"])
    # Their own topic without READ: not authorized.
    ours = node.snapshot.topic(acme, "orders").topic_id
    got = fetch_by_id(services, nobody, version, [(ours, 0)])
    assert got["responses"][0]["partitions"][0]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED


def test_fetch_by_the_id_of_a_deleted_and_recreated_topic(world):
    store, node, services, acme, _ = world
    old = store.add_topic(acme, "orders")
    app = principal_of(
        store, acme, (Operation.WRITE, ResourceType.TOPIC), (Operation.READ, ResourceType.TOPIC)
    )
    store.delete_topic(store.system_principal(acme), "orders")
    new = store.add_topic(acme, "orders")
    asyncio.run(node.refresh_metadata())
    assert new.topic_id != old.topic_id
    produce_three(services, app, "orders")
    got = fetch_by_id(services, app, 13, [(old.topic_id, 0), (new.topic_id, 0)])
    stale, fresh = (t["partitions"][0] for t in got["responses"])
    assert stale["error_code"] == E.UNKNOWN_TOPIC_ID
    assert (fresh["error_code"], fresh["high_watermark"]) == (E.NONE, 3)


@pytest.mark.parametrize("version", [15, 16, 17])
def test_a_tenant_naming_a_replica_in_replica_state_is_refused(world, version):
    store, node, services, acme, _ = world
    orders = store.add_topic(acme, "orders")
    app = principal_of(store, acme, (Operation.READ, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    got = fetch_by_id(services, app, version, [(orders.topic_id, 0)], replica_id=2)
    assert got["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED and got["responses"] == []


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("version", BY_ID)
def test_fetch_from_a_broker_not_leading_names_the_leader_from_v16(world, version, tls):
    store, node, services, acme, _ = world
    store.register_broker(2, "10.0.0.2", 9192, "rack-b", "tls.example", 9193)
    store.register_broker(3, "10.0.0.3", 9292, None, "tls3.example", 9293)
    orders = store.add_topic(acme, "orders", partitions=4, replication_factor=1)
    app = principal_of(store, acme, (Operation.READ, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    info = node.snapshot.topic(acme, "orders")
    theirs = next(p for p in info.partitions if p.leader == 2)
    mine = next(p for p in info.partitions if p.leader == ME)
    got = fetch_by_id(
        services,
        app,
        version,
        [(orders.topic_id, theirs.index), (orders.topic_id, mine.index)],
        tls=tls,
    )
    elsewhere, here = (t["partitions"][0] for t in got["responses"])
    assert elsewhere["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    assert here["error_code"] == E.NONE
    assert "current_leader" not in here
    if version < 16:
        assert "current_leader" not in elsewhere and "node_endpoints" not in got
        return
    assert elsewhere["current_leader"] == {"leader_id": 2, "leader_epoch": theirs.leader_epoch}
    # Only the leader named (not broker 3, not this one), at the listener's address.
    address = ("tls.example", 9193) if tls else ("10.0.0.2", 9192)
    assert got["node_endpoints"] == [
        {"node_id": 2, "host": address[0], "port": address[1], "rack": "rack-b"}
    ]
    decoded = fetch.RESPONSE.decode(fetch.RESPONSE.encode(got, version), version)
    assert decoded["node_endpoints"][0]["host"] == address[0]
    assert decoded["responses"][0]["partitions"][0]["current_leader"]["leader_id"] == 2


# --- Produce v10 (KIP-951) ------------------------------------------------------------------


def produce_at(
    services: Services, principal: Any, version: int, topic: str, indexes: list[int], tls: bool
) -> dict[str, Any]:
    """A Produce as a client sends it: encoded at ``version`` and decoded again; the
    answer must encode at that version too."""
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": i, "records": batch(2)} for i in indexes]}
        ],
    }
    decoded = produce.REQUEST.decode(produce.REQUEST.encode(body, version), version)
    got: dict[str, Any] = call(services, principal, produce.KEY, version, decoded, tls)
    produce.RESPONSE.encode_chunks(got, version)
    return got


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("version", [9, 10])
def test_produce_to_a_broker_not_leading_names_the_leader_from_v10(world, version, tls):
    store, node, services, acme, _ = world
    store.register_broker(2, "10.0.0.2", 9192, "rack-b", "tls.example", 9193)
    store.register_broker(3, "10.0.0.3", 9292, None, "tls3.example", 9293)
    store.add_topic(acme, "orders", partitions=4, replication_factor=1)
    app = principal_of(store, acme, (Operation.WRITE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    info = node.snapshot.topic(acme, "orders")
    theirs = next(p for p in info.partitions if p.leader == 2)
    mine = next(p for p in info.partitions if p.leader == ME)
    got = produce_at(services, app, version, "orders", [theirs.index, mine.index], tls)
    elsewhere, here = got["responses"][0]["partition_responses"]
    assert (elsewhere["error_code"], elsewhere["base_offset"]) == (E.NOT_LEADER_OR_FOLLOWER, -1)
    assert (here["error_code"], here["base_offset"]) == (E.NONE, 0)
    assert "current_leader" not in here
    if version < 10:
        assert "current_leader" not in elsewhere and "node_endpoints" not in got
        return
    assert elsewhere["current_leader"] == {"leader_id": 2, "leader_epoch": theirs.leader_epoch}
    address = ("tls.example", 9193) if tls else ("10.0.0.2", 9192)
    assert got["node_endpoints"] == [
        {"node_id": 2, "host": address[0], "port": address[1], "rack": "rack-b"}
    ]
    decoded = produce.RESPONSE.decode(produce.RESPONSE.encode(got, version), version)
    assert decoded["node_endpoints"][0]["host"] == address[0]
    [_, ok] = decoded["responses"][0]["partition_responses"]
    assert decoded["responses"][0]["partition_responses"][0]["current_leader"]["leader_id"] == 2
    assert ok["current_leader"] == {"leader_id": -1, "leader_epoch": -1}  # absent: defaults


def test_produce_v10_where_this_broker_leads_carries_no_leader(world):
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders", partitions=2)
    app = principal_of(store, acme, (Operation.WRITE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    got = produce_at(services, app, 10, "orders", [0, 1], False)
    parts = got["responses"][0]["partition_responses"]
    assert [(p["error_code"], p["base_offset"]) for p in parts] == [(E.NONE, 0), (E.NONE, 0)]
    assert all("current_leader" not in p for p in parts) and "node_endpoints" not in got
    # Nor does an unknown topic (not a leadership answer).
    got = produce_at(services, app, 10, "missing", [0], False)
    [part] = got["responses"][0]["partition_responses"]
    assert part["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert "current_leader" not in part and "node_endpoints" not in got


# --- DeleteTopics by topic id (v6) ----------------------------------------------------------


def delete_by_id(services: Services, principal: Any, ids: list[uuid.UUID]) -> list[dict]:
    body = {"topics": [{"name": None, "topic_id": i} for i in ids], "timeout_ms": 1000}
    decoded = delete_topics.REQUEST.decode(delete_topics.REQUEST.encode(body, 6), 6)
    got = call(services, principal, delete_topics.KEY, 6, decoded)
    # As a client reads it (name is nullable from v6).
    answer = delete_topics.RESPONSE.decode(delete_topics.RESPONSE.encode(got, 6), 6)
    return list(answer["responses"])


def test_delete_topics_by_id_of_another_tenant_or_a_gone_topic_is_unknown(world):
    store, node, services, acme, globex = world
    theirs = store.add_topic(globex, "orders")
    old = store.add_topic(acme, "orders")
    app = principal_of(store, acme, (Operation.DELETE, ResourceType.TOPIC))
    store.delete_topic(store.system_principal(acme), "orders")
    new = store.add_topic(acme, "orders")
    asyncio.run(node.refresh_metadata())
    stranger = uuid.uuid4()
    answer = delete_by_id(services, app, [theirs.topic_id, old.topic_id, stranger])
    assert [(r["name"], r["topic_id"], r["error_code"]) for r in answer] == [
        (None, theirs.topic_id, E.UNKNOWN_TOPIC_ID),
        (None, old.topic_id, E.UNKNOWN_TOPIC_ID),
        (None, stranger, E.UNKNOWN_TOPIC_ID),
    ]
    # Nothing was deleted: globex's topic and acme's new one are intact.
    assert node.snapshot.topic(globex, "orders").topic_id == theirs.topic_id
    assert node.snapshot.topic(acme, "orders").topic_id == new.topic_id
    # The new id deletes the topic, and answers its name and id.
    [done] = delete_by_id(services, app, [new.topic_id])
    assert (done["name"], done["topic_id"], done["error_code"]) == ("orders", new.topic_id, E.NONE)
    assert node.snapshot.topic(acme, "orders") is None
    assert node.snapshot.topic(globex, "orders") is not None
    # Neither a name nor an id: an invalid request, as in Kafka.
    [empty] = delete_by_id(services, app, [uuid.UUID(int=0)])
    assert empty["error_code"] == E.INVALID_REQUEST
