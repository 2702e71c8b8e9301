"""MetadataCache: skip refreshes when nothing changed, apply deltas instead of rebuilding,
and notice what changes without a commit (leases, key expiry). Driven by the memory store,
whose ``reads`` counter says what each refresh read."""

from __future__ import annotations

import random
import uuid

import pytest

from data_plane.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from data_plane.broker.memory_store import MemoryStore
from data_plane.broker.metadata_cache import MetadataCache, apply_delta
from data_plane.metadata.model import MetadataDelta, MetadataSnapshot, PartitionInfo, TopicInfo


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    store = MemoryStore(clock=clock, lease_seconds=10)
    store.register_broker(1, "127.0.0.1", 9001, None)
    store.register_broker(2, "127.0.0.1", 9002, None)
    return store


def acl(name: str) -> AclBinding:
    return AclBinding(
        "User:app", ResourceType.TOPIC, PatternType.LITERAL, name, Operation.READ, Permission.ALLOW
    )


def tenant_reads(store: MemoryStore) -> dict[int | None, int]:
    """Reads of tenant-scoped rows since the counter was cleared, by tenant."""
    out: dict[int | None, int] = {}
    for (scope, tenant_id), n in store.reads.items():
        if scope != "brokers":
            out[tenant_id] = out.get(tenant_id, 0) + n
    return out


def same_view(cached: MetadataSnapshot, fresh: MetadataSnapshot) -> None:
    assert cached.version == fresh.version
    assert cached.tenants == fresh.tenants
    assert cached.topics == fresh.topics
    assert cached.acls == fresh.acls
    assert cached.keys == fresh.keys
    assert cached.active_keys == fresh.active_keys
    assert cached.brokers == fresh.brokers
    index = {t.topic_id: t for ts in fresh.topics.values() for t in ts.values()}
    assert cached.topic_index == index


def test_the_first_refresh_reads_a_snapshot(store: MemoryStore) -> None:
    acme = store.add_tenant("acme")
    store.add_topic(acme, "orders", 2, 2)
    cache = MetadataCache(clock=store.clock)
    assert cache.refresh(store).full
    same_view(cache.snapshot, store.snapshot())


def test_nothing_changed_nothing_is_read_or_rebuilt(store: MemoryStore) -> None:
    for i in range(5):
        store.add_topic(store.add_tenant(f"t{i}"), "orders", 3, 2)
    cache = MetadataCache(clock=store.clock)
    cache.refresh(store)
    before = cache.snapshot
    store.reads.clear()
    for _ in range(3):
        result = cache.refresh(store)
        assert not result.changed
    assert cache.snapshot is before
    assert tenant_reads(store) == {}
    assert store.reads[("brokers", None)] == 3  # the live list, a few rows, each time


def test_a_one_topic_change_rereads_that_topic_only(store: MemoryStore) -> None:
    tenants = [store.add_tenant(f"t{i}") for i in range(20)]
    for tenant_id in tenants:
        store.add_topic(tenant_id, "orders", 2, 2)
        store.add_topic(tenant_id, "audit", 1, 1)
    cache = MetadataCache(clock=store.clock)
    cache.refresh(store)
    before = cache.snapshot
    store.reads.clear()

    target = tenants[7]
    store.create_partitions(store.system_principal(target), "orders", 4, False)
    result = cache.refresh(store)

    after = cache.snapshot
    orders = after.topic(target, "orders")
    assert orders is not None and orders.partition_count == 4
    assert result.topics == {orders.topic_id} and not result.full
    assert tenant_reads(store) == {target: 1}  # one topic re-read, nothing else
    for tenant_id in tenants:
        if tenant_id != target:
            assert after.topics[tenant_id] is before.topics[tenant_id]  # shared, not copied
    assert after.topic(target, "audit") is before.topic(target, "audit")
    assert after.tenants is before.tenants and after.acls is before.acls
    assert after.topic_by_id(orders.topic_id) is orders
    same_view(after, store.snapshot())


def test_acl_and_key_changes_touch_their_tenant_only(store: MemoryStore) -> None:
    acme, globex = store.add_tenant("acme"), store.add_tenant("globex")
    store.add_topic(acme, "orders")
    old_key, _ = store.add_key(globex, "app")
    cache = MetadataCache(clock=store.clock)
    cache.refresh(store)
    before = cache.snapshot
    store.reads.clear()

    store.add_acl(acme, acl("orders"))
    new_key, _ = store.add_key(globex, "app")
    store.revoke_key(old_key)
    result = cache.refresh(store)

    assert result.tenants == {acme, globex} and result.keys and not result.topics
    assert tenant_reads(store) == {acme: 1, globex: 1}
    assert cache.snapshot.topics is before.topics
    assert new_key in cache.snapshot.active_keys and old_key not in cache.snapshot.active_keys
    same_view(cache.snapshot, store.snapshot())


def test_deltas_add_up_to_the_snapshot(store: MemoryStore, clock: Clock) -> None:
    """Random changes, a refresh after each: always what a full snapshot says."""
    rng = random.Random(7)
    cache = MetadataCache(clock=clock)
    tenants = [store.add_tenant(f"t{i}") for i in range(4)]
    keys: list[str] = []
    cache.refresh(store)
    for step in range(150):
        tenant_id = rng.choice(tenants)
        admin = store.system_principal(tenant_id)
        names = [t.name for t in store.snapshot().tenant_topics(tenant_id).values()]
        action = rng.randrange(9)
        if action == 0 or not names:
            store.add_topic(tenant_id, f"topic-{step}", rng.randint(1, 3), rng.randint(1, 2))
        elif action == 1:
            name = rng.choice(names)
            topic = store.snapshot().topic(tenant_id, name)
            assert topic is not None
            store.create_partitions(admin, name, topic.partition_count + 1, False)
        elif action == 2:
            store.delete_topic(admin, rng.choice(names))
        elif action == 3:
            store.add_acl(tenant_id, acl(f"topic-{step}"))
        elif action == 4:
            store.delete_acls(admin, lambda b: rng.random() < 0.5)
        elif action == 5:
            keys.append(store.add_key(tenant_id, "app", expires_at=clock.now + 30)[0])
        elif action == 6 and keys:
            store.revoke_key(rng.choice(keys))
        elif action == 7:
            tenants.append(store.add_tenant(f"new-{step}"))
        else:
            store.update_tenant(tenant_id, produce_byte_rate=rng.randint(1, 10**6))
        clock.now += 1
        assert not cache.refresh(store).full
        same_view(cache.snapshot, store.snapshot())


def test_a_version_older_than_the_log_reads_a_snapshot(clock: Clock) -> None:
    store = MemoryStore(clock=clock, change_log_limit=3)
    acme = store.add_tenant("acme")
    cache = MetadataCache(clock=clock)
    cache.refresh(store)
    for i in range(5):
        store.add_acl(acme, acl(f"t{i}"))
    assert cache.refresh(store).full
    same_view(cache.snapshot, store.snapshot())


def test_a_lapsed_lease_drops_the_broker_without_any_commit(
    store: MemoryStore, clock: Clock
) -> None:
    cache = MetadataCache(clock=clock)
    cache.refresh(store)
    assert sorted(cache.snapshot.brokers) == [1, 2]
    version = store.metadata_version()
    clock.now += 11
    store.heartbeat(1)  # broker 2 stopped heartbeating
    result = cache.refresh(store)
    assert result.brokers and not result.topics
    assert sorted(cache.snapshot.brokers) == [1]
    assert store.metadata_version() == version
    store.heartbeat(2)
    assert cache.refresh(store).brokers
    assert sorted(cache.snapshot.brokers) == [1, 2]


def test_an_expired_key_leaves_active_keys_without_a_read(store: MemoryStore, clock: Clock) -> None:
    acme = store.add_tenant("acme")
    short, _ = store.add_key(acme, "app", expires_at=clock.now + 5)
    lasting, _ = store.add_key(acme, "app")
    cache = MetadataCache(clock=clock)
    cache.refresh(store)
    assert {short, lasting} <= cache.snapshot.active_keys
    store.reads.clear()
    clock.now += 6
    result = cache.refresh(store)
    assert result.keys and result.tenants == {acme}
    assert short not in cache.snapshot.active_keys and lasting in cache.snapshot.active_keys
    assert tenant_reads(store) == {}
    same_view(cache.snapshot, store.snapshot())


def test_a_full_snapshot_now_and_then(store: MemoryStore, clock: Clock) -> None:
    cache = MetadataCache(clock=clock, full_refresh_seconds=60)
    assert cache.refresh(store).full
    clock.now += 30
    assert not cache.refresh(store).full
    clock.now += 31
    assert cache.refresh(store).full
    assert cache.refresh(store, full=True).full


def test_unassigned_topics_are_tracked(clock: Clock) -> None:
    store = MemoryStore(clock=clock)
    acme = store.add_tenant("acme")
    early = store.add_topic(acme, "early", 2, 1)
    cache = MetadataCache(clock=clock)
    cache.refresh(store)
    assert cache.unassigned_topics == {early.topic_id}
    store.register_broker(1, "127.0.0.1", 9001, None)
    assert store.assign_unassigned_partitions() == 2
    result = cache.refresh(store)
    assert result.topics == {early.topic_id} and result.brokers
    assert cache.unassigned_topics == frozenset()


def test_a_deleted_tenant_takes_everything_with_it() -> None:
    topic = TopicInfo(5, "orders", uuid.uuid4(), (PartitionInfo(0, 1, 0, (1,), (1,)),), {})
    snapshot = MetadataSnapshot(
        topics={5: {"orders": topic}},
        acls={5: (acl("orders"),)},
        keys={5: {"MRKA": None}},
        active_keys=frozenset({"MRKA", "MRKB"}),
    )
    after = apply_delta(snapshot, MetadataDelta(version=3, tenants={5: None}))
    assert after.topics == {} and after.acls == {} and after.keys == {}
    assert after.active_keys == {"MRKB"}
    assert after.topic_by_id(topic.topic_id) is None
    assert after.version == 3


def test_topic_by_id_is_indexed() -> None:
    topics = {
        t: {f"n{i}": TopicInfo(t, f"n{i}", uuid.uuid4(), (), {}) for i in range(50)}
        for t in range(20)
    }
    snapshot = MetadataSnapshot(topics=topics)
    wanted = topics[13]["n42"]
    assert snapshot.topic_by_id(wanted.topic_id) is wanted
    assert snapshot.topic_by_id(uuid.uuid4()) is None
    assert snapshot.topic_index is not None and len(snapshot.topic_index) == 1000
