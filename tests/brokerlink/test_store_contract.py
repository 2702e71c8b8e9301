"""One contract for every implementation of the broker's ports (the nats-server pattern).

Each test runs against the in-memory store (``data_plane.broker.memory_store``) and the
Django adapters (``control_plane.brokerlink``, on the test database, committing as
production does). Seeding differs (``World``); what the broker can observe must not.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import scramp

from data_plane.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from data_plane.broker.memory_store import MemoryStore
from data_plane.broker.metadata_cache import MetadataCache
from data_plane.broker.ports import AdminError, MetadataStore
from data_plane.groups.model import GroupRecord, GroupState, MemberRecord, OffsetRecord
from data_plane.metadata.model import Principal
from data_plane.protocol.errors import ErrorCode


class World:
    """Seeds tenants and keys in one store the way its users would (services for Django)."""

    store: MetadataStore

    def tenant(self, slug: str, **limits: Any) -> int:
        raise NotImplementedError

    def key(self, tenant_id: int, service_account: str = "app") -> tuple[str, str]:
        raise NotImplementedError

    def revoke(self, key_id: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def principal(self, tenant_id: int) -> Principal:
        """A principal of the tenant acting through an API key (admin requests)."""
        key_id, _ = self.key(tenant_id, "admin")
        found = self.store.principal_for_key(key_id)
        assert found is not None
        return found


class MemoryWorld(World):
    def __init__(self) -> None:
        self.store = self.memory = MemoryStore(lease_seconds=10)

    def tenant(self, slug: str, **limits: Any) -> int:
        return self.memory.add_tenant(slug, **limits)

    def key(self, tenant_id: int, service_account: str = "app") -> tuple[str, str]:
        return self.memory.add_key(tenant_id, service_account)

    def revoke(self, key_id: str) -> None:
        self.memory.revoke_key(key_id)


class DjangoWorld(World):
    def __init__(self) -> None:
        from control_plane.brokerlink.store import DjangoMetadataStore

        self.store = self.django = DjangoMetadataStore()

    def close(self) -> None:
        self.django.close()

    def tenant(self, slug: str, **limits: Any) -> int:
        from control_plane.core.actor import Actor
        from control_plane.tenancy import services

        return services.create_tenant(Actor.system(), slug=slug, name=slug, limits=limits).pk

    def key(self, tenant_id: int, service_account: str = "app") -> tuple[str, str]:
        from control_plane.access import services
        from control_plane.access.models import ServiceAccount
        from control_plane.core.actor import Actor
        from control_plane.tenancy.models import Tenant

        tenant = Tenant.objects.get(pk=tenant_id)
        sa = ServiceAccount.objects.filter(tenant=tenant, name=service_account).first()
        if sa is None:
            sa = services.create_service_account(Actor.system(), tenant, name=service_account)
        created = services.create_api_key(Actor.system(), sa)
        return created.api_key.key_id, created.secret

    def revoke(self, key_id: str) -> None:
        from control_plane.access import services
        from control_plane.access.models import ApiKey
        from control_plane.core.actor import Actor

        services.revoke_api_key(Actor.system(), ApiKey.objects.get(key_id=key_id))


@pytest.fixture(
    params=[
        "memory",
        # The adapters commit (and stamp versions at commit), as in production.
        pytest.param("django", marks=pytest.mark.django_db(transaction=True)),
    ]
)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    world = MemoryWorld() if request.param == "memory" else DjangoWorld()
    yield world
    world.close()


def acl(principal: str = "User:app", name: str = "orders") -> AclBinding:
    return AclBinding(
        principal=principal,
        resource_type=ResourceType.TOPIC,
        pattern_type=PatternType.LITERAL,
        resource_name=name,
        operation=Operation.READ,
        permission=Permission.ALLOW,
    )


def brokers(store: MetadataStore, *ids: int) -> None:
    for broker_id in ids:
        store.register_broker(broker_id, "127.0.0.1", 9000 + broker_id, None)


def refused(code: ErrorCode, fn: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(AdminError) as raised:
        fn(*args, **kwargs)
    assert raised.value.error_code == code, raised.value.message


# --- MetadataSource ---------------------------------------------------------------------------


def test_snapshot_holds_tenants_topics_acls_keys_and_live_brokers(world: World) -> None:
    store = world.store
    acme = world.tenant("acme", max_partitions=50)
    admin = world.principal(acme)
    key_id, _ = world.key(acme, "app")
    brokers(store, 1, 2)
    store.create_topic(admin, "orders", 3, 2, {"retention.ms": "60000"}, False)
    store.create_acl(admin, acl())

    snap = store.snapshot()
    assert snap.tenants[acme].slug == "acme"
    assert snap.tenants[acme].max_partitions == 50
    topic = snap.topic(acme, "orders")
    assert topic is not None
    assert [p.index for p in topic.partitions] == [0, 1, 2]
    assert all(len(p.replicas) == 2 and p.leader == p.replicas[0] for p in topic.partitions)
    assert all(set(p.isr) == set(p.replicas) for p in topic.partitions)
    assert topic.configs == {"retention.ms": 60000}
    assert snap.topic_by_id(topic.topic_id) == topic
    assert [(b.principal, b.resource_name) for b in snap.tenant_acls(acme)] == [
        ("User:app", "orders")
    ]
    assert key_id in snap.active_keys
    assert key_id in snap.keys[acme]
    assert sorted(snap.brokers) == [1, 2]
    assert snap.version == store.metadata_version()


def test_every_change_moves_the_version(world: World) -> None:
    store = world.store
    seen = [store.metadata_version()]

    def moved() -> None:
        now = store.metadata_version()
        assert now > seen[-1]
        seen.append(now)

    acme = world.tenant("acme")
    moved()
    admin = world.principal(acme)  # a key
    moved()
    brokers(store, 1)
    moved()
    store.create_topic(admin, "orders", 1, 1, {}, False)
    moved()
    store.create_partitions(admin, "orders", 2, False)
    moved()
    store.alter_topic_configs(admin, "orders", {"retention.ms": "1000"}, False)
    moved()
    store.create_acl(admin, acl("User:admin"))
    moved()
    store.delete_acls(admin, lambda b: True)
    moved()
    world.revoke(admin.key_id or "")
    moved()
    store.delete_topic(world.principal(acme), "orders")
    moved()
    assert store.snapshot().version == seen[-1]


def test_changes_since_rereads_only_the_changed_scopes(world: World) -> None:
    store = world.store
    acme, globex = world.tenant("acme"), world.tenant("globex")
    a, g = world.principal(acme), world.principal(globex)
    brokers(store, 1)
    store.create_topic(a, "orders", 1, 1, {}, False)
    store.create_topic(a, "audit", 1, 1, {}, False)
    store.create_topic(g, "orders", 1, 1, {}, False)
    start = store.metadata_version()
    assert store.changes_since(start) is not None
    assert store.changes_since(start).empty  # type: ignore[union-attr]

    store.create_partitions(a, "orders", 3, False)
    delta = store.changes_since(start)
    assert delta is not None and delta.version == store.metadata_version()
    orders = store.snapshot().topic(acme, "orders")
    assert orders is not None
    assert dict(delta.topics) == {orders.topic_id: orders}
    assert not delta.tenants and not delta.acls and not delta.keys

    mark = store.metadata_version()
    store.create_acl(g, acl("User:admin"))
    key_id, _ = world.key(acme)
    world.revoke(key_id)
    delta = store.changes_since(mark)
    assert delta is not None
    assert set(delta.acls) == {globex}
    assert [b.principal for b in delta.acls[globex]] == ["User:admin"]
    assert set(delta.keys) == {acme}
    assert key_id not in delta.keys[acme] and a.key_id in delta.keys[acme]
    assert not delta.topics

    mark = store.metadata_version()
    store.delete_topic(a, "audit")
    later = world.tenant("initech")
    delta = store.changes_since(mark)
    assert delta is not None
    assert list(delta.topics.values()) == [None]
    assert delta.tenants[later] is not None and delta.tenants[later].slug == "initech"

    assert store.changes_since(store.metadata_version() + 100) is None


def test_broker_registration_changes_the_live_list(world: World) -> None:
    store = world.store
    mark = store.metadata_version()
    brokers(store, 1, 2)
    assert sorted(store.live_brokers()) == [1, 2]
    assert store.live_brokers()[2].port == 9002
    delta = store.changes_since(mark)
    assert delta is not None and delta.brokers
    assert store.fenced_brokers() == {}
    store.deregister_broker(2)
    assert sorted(store.live_brokers()) == [1]
    assert sorted(store.snapshot().brokers) == [1]
    # Still registered, no longer live: what DescribeCluster v2 lists as fenced.
    assert {i: (b.host, b.port) for i, b in store.fenced_brokers().items()} == {
        2: ("127.0.0.1", 9002)
    }
    brokers(store, 2)  # registering again: live, not fenced
    assert sorted(store.live_brokers()) == [1, 2] and store.fenced_brokers() == {}


def test_a_cache_kept_by_deltas_sees_what_a_snapshot_sees(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    admin = world.principal(acme)
    brokers(store, 1, 2)
    cache = MetadataCache()
    assert cache.refresh(store).full
    steps = [
        lambda: store.create_topic(admin, "orders", 2, 2, {}, False),
        lambda: store.create_topic(admin, "audit", 1, 1, {}, False),
        lambda: store.create_partitions(admin, "orders", 3, False),
        lambda: store.alter_topic_configs(admin, "orders", {"retention.ms": "1000"}, False),
        lambda: store.create_acl(admin, acl("User:admin")),
        lambda: world.key(acme),
        lambda: world.revoke(admin.key_id or ""),
        lambda: world.tenant("globex"),
        lambda: store.delete_topic(world.principal(acme), "audit"),
        lambda: store.controlled_shutdown(2),
    ]
    for step in steps:
        step()
        result = cache.refresh(store)
        assert result.changed and not result.full
        cached, fresh = cache.snapshot, store.snapshot()
        assert cached.version == fresh.version
        assert (cached.tenants, cached.topics, cached.acls) == (
            fresh.tenants,
            fresh.topics,
            fresh.acls,
        )
        assert (cached.keys, cached.active_keys) == (fresh.keys, fresh.active_keys)
        assert cached.brokers == fresh.brokers
        assert cached.topic_index == fresh.topic_index
    assert not cache.refresh(store).changed


# --- Credentials ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_credentials_are_derived_from_the_secret(world: World, mechanism: str) -> None:
    acme = world.tenant("acme")
    key_id, secret = world.key(acme, "app")
    creds = world.store.scram_credentials(key_id, mechanism)
    assert creds is not None
    _, stored, server, _ = scramp.ScramMechanism(mechanism).make_auth_info(
        secret, iteration_count=creds.iterations, salt=creds.salt
    )
    assert (creds.stored_key, creds.server_key) == (stored, server)
    assert world.store.scram_credentials("MRKNOSUCHKEY0000000", mechanism) is None


def test_principals_of_active_keys_only(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    key_id, secret = world.key(acme, "app")
    principal = store.principal_for_key(key_id)
    assert principal is not None
    assert (principal.tenant_id, principal.tenant_slug) == (acme, "acme")
    assert (principal.name, principal.key_id) == ("User:app", key_id)
    assert store.verify_plain(key_id, secret) == principal
    assert store.verify_plain(key_id, secret + "x") is None
    assert store.verify_plain("MRKNOSUCHKEY0000000", secret) is None
    assert store.anonymous_principal() is None  # no unauthenticated listener

    world.revoke(key_id)
    assert store.principal_for_key(key_id) is None
    assert store.verify_plain(key_id, secret) is None
    assert store.scram_credentials(key_id, "SCRAM-SHA-256") is None
    assert key_id not in store.snapshot().active_keys


# --- BrokerRegistry ---------------------------------------------------------------------------


def test_alter_partition_is_a_compare_and_set(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    brokers(store, 1, 2)
    store.create_topic(world.principal(acme), "orders", 1, 2, {}, False)
    topic = store.snapshot().topic(acme, "orders")
    assert topic is not None
    p = topic.partitions[0]
    assert p.leader is not None
    tid = str(topic.topic_id)
    shrunk = [p.leader]

    stale = store.alter_partition(tid, 0, p.leader, p.leader_epoch, p.partition_epoch - 1, shrunk)
    assert stale[0] == ErrorCode.INVALID_UPDATE_VERSION
    assert stale[1:] == (p.leader_epoch, p.partition_epoch, p.isr)
    fenced = store.alter_partition(tid, 0, p.leader, p.leader_epoch + 1, p.partition_epoch, shrunk)
    assert fenced[0] == ErrorCode.FENCED_LEADER_EPOCH
    outsider = store.alter_partition(tid, 0, p.leader, p.leader_epoch, p.partition_epoch, [9])
    assert outsider[0] == ErrorCode.INVALID_REQUEST
    unknown = store.alter_partition(str(uuid.uuid4()), 0, 1, 0, 0, [1])
    assert unknown[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    mark = store.metadata_version()
    done = store.alter_partition(tid, 0, p.leader, p.leader_epoch, p.partition_epoch, shrunk)
    assert done == (ErrorCode.NONE, p.leader_epoch, p.partition_epoch + 1, tuple(shrunk))
    after = store.snapshot().topic(acme, "orders")
    assert after is not None and after.partitions[0].isr == tuple(shrunk)
    delta = store.changes_since(mark)
    assert delta is not None and set(delta.topics) == {topic.topic_id}
    again = store.alter_partition(tid, 0, p.leader, p.leader_epoch, p.partition_epoch, p.isr)
    assert again[0] == ErrorCode.INVALID_UPDATE_VERSION  # the epoch it was decided from moved


def test_producer_id_blocks_never_overlap(world: World) -> None:
    first = world.store.allocate_producer_ids(1000)
    second = world.store.allocate_producer_ids(10)
    third = world.store.allocate_producer_ids(1000)
    assert second >= first + 1000
    assert third >= second + 10


def test_partitions_made_before_brokers_are_placed_when_they_come(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    store.create_topic(world.principal(acme), "early", 2, 1, {}, False)
    topic = store.snapshot().topic(acme, "early")
    assert topic is not None and all(not p.replicas and p.leader is None for p in topic.partitions)
    brokers(store, 1)
    mark = store.metadata_version()
    assert store.assign_unassigned_partitions() == 2
    topic = store.snapshot().topic(acme, "early")
    assert topic is not None and [p.replicas for p in topic.partitions] == [(1,), (1,)]
    delta = store.changes_since(mark)
    assert delta is not None and delta.topics[topic.topic_id] == topic
    assert store.assign_unassigned_partitions() == 0


def test_controlled_shutdown_moves_leadership_to_another_in_sync_replica(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    brokers(store, 1, 2)
    store.create_topic(world.principal(acme), "orders", 2, 2, {}, False)
    assert store.controlled_shutdown(1) == 0
    topic = store.snapshot().topic(acme, "orders")
    assert topic is not None
    assert all(p.leader == 2 and p.isr == (2,) for p in topic.partitions)
    assert 1 not in store.live_brokers()


# --- Admin ------------------------------------------------------------------------------------


def test_refused_and_validate_only_requests_leave_nothing_behind(world: World) -> None:
    store = world.store
    acme = world.tenant("acme", max_partitions=4)
    admin = world.principal(acme)
    brokers(store, 1)
    store.create_topic(admin, "orders", 2, 1, {}, False)
    store.create_topic(admin, "a.b", 1, 1, {}, False)
    store.create_acl(admin, acl("User:admin"))
    before, version = store.snapshot(), store.metadata_version()

    refused(ErrorCode.TOPIC_ALREADY_EXISTS, store.create_topic, admin, "orders", 1, 1, {}, False)
    refused(ErrorCode.TOPIC_ALREADY_EXISTS, store.create_topic, admin, "a_b", 1, 1, {}, False)
    refused(ErrorCode.POLICY_VIOLATION, store.create_topic, admin, "big", 2, 1, {}, False)
    refused(ErrorCode.INVALID_TOPIC_EXCEPTION, store.create_topic, admin, "a b", 1, 1, {}, False)
    refused(ErrorCode.INVALID_PARTITIONS, store.create_topic, admin, "zero", 0, 1, {}, False)
    refused(ErrorCode.INVALID_REPLICATION_FACTOR, store.create_topic, admin, "rf", 1, 2, {}, False)
    bad = {"retention.ms": "soon"}
    refused(ErrorCode.INVALID_CONFIG, store.create_topic, admin, "cfg", 1, 1, bad, False)
    refused(ErrorCode.INVALID_CONFIG, store.create_topic, admin, "cfg", 1, 1, {"nope": "1"}, False)
    plan = [[1, 1]]
    refused(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        store.create_topic,
        admin,
        "p",
        1,
        None,
        {},
        False,
        plan,
    )
    refused(ErrorCode.INVALID_PARTITIONS, store.create_partitions, admin, "orders", 1, False)
    refused(ErrorCode.POLICY_VIOLATION, store.create_partitions, admin, "orders", 4, False)
    refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, store.create_partitions, admin, "x", 3, False)
    refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, store.delete_topic, admin, "x")
    refused(
        ErrorCode.INVALID_CONFIG, store.alter_topic_configs, admin, "orders", {"nope": "1"}, False
    )
    refused(ErrorCode.TOPIC_ALREADY_EXISTS, store.create_acl, admin, acl("User:admin"))
    refused(ErrorCode.INVALID_REQUEST, store.create_acl, admin, acl("User:nobody"))
    refused(ErrorCode.INVALID_REQUEST, store.create_acl, admin, acl(name=""))
    store.create_topic(admin, "dry", 1, 1, {}, True)
    store.create_partitions(admin, "orders", 3, True)
    store.alter_topic_configs(admin, "orders", {"retention.ms": "1000"}, True)

    after = store.snapshot()
    assert store.metadata_version() == version
    assert after.topics == before.topics
    assert after.acls == before.acls


def test_delete_acls_returns_what_it_deleted(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    admin = world.principal(acme)
    store.create_acl(admin, acl("User:admin", "orders"))
    store.create_acl(admin, acl("User:admin", "audit"))
    mark = store.metadata_version()
    assert store.delete_acls(admin, lambda b: b.resource_name == "nothing") == []
    assert store.metadata_version() == mark
    deleted = store.delete_acls(admin, lambda b: b.resource_name == "orders")
    assert [b.resource_name for b in deleted] == ["orders"]
    assert [b.resource_name for b in store.snapshot().tenant_acls(acme)] == ["audit"]


# --- groups -----------------------------------------------------------------------------------


def _group(tenant_id: int, state: GroupState, members: int) -> GroupRecord:
    member = MemberRecord("m-1", None, "client", "/127.0.0.1", 10_000, 20_000, b"meta", b"asg")
    return GroupRecord(
        tenant_id,
        "g1",
        state,
        3,
        "consumer",
        "range",
        "m-1" if members else None,
        (member,) * members,
        int(time.time()) * 1000,
    )


def test_groups_and_offsets_round_trip(world: World) -> None:
    store = world.store
    acme, globex = world.tenant("acme"), world.tenant("globex")
    admin = world.principal(acme)
    brokers(store, 1)
    store.create_topic(admin, "orders", 2, 1, {}, False)

    stable = _group(acme, GroupState.STABLE, 1)
    store.save_group(stable)
    assert store.load_group(acme, "g1") == stable
    assert store.load_group(globex, "g1") is None
    assert store.list_groups(acme) == [stable]
    assert store.list_groups(globex) == []

    now = int(time.time()) * 1000
    store.commit_offsets(
        acme,
        "g1",
        [
            OffsetRecord("orders", 0, 10, 1, "m", now),
            OffsetRecord("orders", 1, 20, 1, None, now),
            OffsetRecord("gone", 0, 5, 1, None, now),  # no such topic: not kept
        ],
    )
    key = sorted
    assert key(store.fetch_offsets(acme, "g1"), key=lambda o: o.partition) == [
        OffsetRecord("orders", 0, 10, 1, "m", now),
        OffsetRecord("orders", 1, 20, 1, None, now),
    ]
    store.delete_offsets(acme, "g1", [("orders", 0)])
    assert [o.partition for o in store.fetch_offsets(acme, "g1")] == [1]
    assert store.fetch_offsets(globex, "g1") == []

    refused(ErrorCode.NON_EMPTY_GROUP, store.delete_group, admin, "g1")
    store.save_group(_group(acme, GroupState.EMPTY, 0))
    assert store.delete_group(admin, "g1") is True
    assert store.load_group(acme, "g1") is None
    assert store.fetch_offsets(acme, "g1") == []
    assert store.delete_group(admin, "g1") is False


def test_committing_offsets_creates_an_empty_group(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    brokers(store, 1)
    store.create_topic(world.principal(acme), "orders", 1, 1, {}, False)
    store.commit_offsets(acme, "fresh", [OffsetRecord("orders", 0, 1, 0, None, 0)])
    group = store.load_group(acme, "fresh")
    assert group is not None and group.state == GroupState.EMPTY and group.members == ()
    assert [o.offset for o in store.fetch_offsets(acme, "fresh")] == [1]


# --- ElectLeaders -----------------------------------------------------------------------------


def operator(world: World, tenant_id: int) -> Principal:
    slug = world.store.snapshot().tenants[tenant_id].slug
    return Principal(tenant_id, slug, "User:__millrace-operator", None, operator=True)


def test_preferred_election_gives_leadership_back_to_the_first_replica(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    brokers(store, 1, 2)
    store.create_topic(world.principal(acme), "orders", 2, 2, {}, False)
    ops = operator(world, acme)
    assert store.elect_leaders(ops, False, {"orders": [0, 1]}) == {
        "orders": {
            0: (ErrorCode.ELECTION_NOT_NEEDED, None),
            1: (ErrorCode.ELECTION_NOT_NEEDED, None),
        }
    }
    topic = store.snapshot().topic(acme, "orders")
    assert topic is not None
    p = topic.partitions[0]
    preferred, other = p.replicas
    # The preferred replica stops; the other takes over; the preferred one comes back but
    # is not in sync yet: it cannot lead.
    store.controlled_shutdown(preferred)
    brokers(store, preferred)
    moved = store.snapshot().topic(acme, "orders")
    assert moved is not None
    p = moved.partitions[0]
    assert (p.leader, p.isr) == (other, (other,))
    code = store.elect_leaders(ops, False, {"orders": [0]})["orders"][0][0]
    assert code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    # Back in sync (the leader says so): the preferred election moves leadership back.
    tid = str(moved.topic_id)
    done = store.alter_partition(tid, 0, other, p.leader_epoch, p.partition_epoch, [1, 2])
    assert done[0] == ErrorCode.NONE
    mark = store.metadata_version()
    got = store.elect_leaders(ops, False, None)
    assert got["orders"][0] == (ErrorCode.NONE, None)
    after = store.snapshot().topic(acme, "orders")
    assert after is not None
    assert after.partitions[0].leader == preferred
    assert after.partitions[0].leader_epoch == p.leader_epoch + 1
    assert store.metadata_version() > mark
    # Unknown topics and partitions, and another tenant's topic, are unknown.
    globex = world.tenant("globex")
    store.create_topic(world.principal(globex), "theirs", 1, 1, {}, False)
    unknown = store.elect_leaders(ops, False, {"orders": [7], "nope": [0], "theirs": [0]})
    assert {t: r for t, by in unknown.items() for r in by.values()} == {
        t: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None) for t in ("orders", "nope", "theirs")
    }


def test_unclean_election_takes_a_live_out_of_sync_replica_only_without_a_leader(
    world: World,
) -> None:
    store = world.store
    acme = world.tenant("acme")
    brokers(store, 1, 2)
    # unclean.leader.election.enable is false: an operator's request elects all the same.
    store.create_topic(world.principal(acme), "orders", 1, 2, {}, False)
    ops = operator(world, acme)
    assert store.elect_leaders(ops, True, {"orders": [0]})["orders"][0][0] == (
        ErrorCode.ELECTION_NOT_NEEDED
    )
    topic = store.snapshot().topic(acme, "orders")
    assert topic is not None
    p = topic.partitions[0]
    assert p.leader is not None
    leader = p.leader
    (other,) = [b for b in p.replicas if b != leader]
    tid = str(topic.topic_id)
    assert store.alter_partition(tid, 0, leader, p.leader_epoch, p.partition_epoch, [leader])[
        0
    ] == (ErrorCode.NONE)
    store.deregister_broker(leader)  # the only in-sync replica is gone
    # Preferred: the first replica is either the gone leader or out of sync.
    assert store.elect_leaders(ops, False, {"orders": [0]})["orders"][0][0] == (
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    )
    assert store.elect_leaders(ops, True, {"orders": [0]})["orders"][0] == (ErrorCode.NONE, None)
    after = store.snapshot().topic(acme, "orders")
    assert after is not None
    assert (after.partitions[0].leader, after.partitions[0].isr) == (other, (other,))
    # Now nothing is live: no replica is eligible.
    store.deregister_broker(other)
    store.deregister_broker(leader)
    # (the leader is not live: an election is needed, but no replica can take it)
    assert store.elect_leaders(ops, True, {"orders": [0]})["orders"][0][0] == (
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    )


# --- Partition reassignments ------------------------------------------------------------------


def test_reassignments_start_list_and_cancel(world: World) -> None:
    store = world.store
    acme = world.tenant("acme")
    brokers(store, 1, 2, 3)
    store.create_topic(world.principal(acme), "orders", 2, 1, {}, False)
    ops = operator(world, acme)
    topic = store.snapshot().topic(acme, "orders")
    assert topic is not None
    (old,) = topic.partitions[0].replicas
    new = next(b for b in (1, 2, 3) if b != old)
    (p1,) = topic.partitions[1].replicas
    assert store.list_reassignments(ops, None) == {}

    mark = store.metadata_version()
    assert store.alter_reassignments(ops, {"orders": {0: [new]}}) == {
        "orders": {0: (ErrorCode.NONE, None)}
    }
    assert store.metadata_version() > mark
    moving = store.snapshot().topic(acme, "orders")
    assert moving is not None
    assert moving.partitions[0].replicas == (new, old)  # the new replica starts following
    assert moving.partitions[0].leader == old
    listed = {"orders": {0: ((new, old), (new,), (old,))}}
    assert store.list_reassignments(ops, None) == listed
    assert store.list_reassignments(ops, {"orders": [0, 1], "nope": [0]}) == listed
    assert store.list_reassignments(ops, {"orders": [1]}) == {}
    # Another tenant's operator sees none of it.
    globex = world.tenant("globex")
    assert store.list_reassignments(operator(world, globex), None) == {}

    answers = store.alter_reassignments(
        ops,
        {
            "orders": {0: [old], 1: [9], 5: [1]},
            "nope": {0: [1]},
        },
    )
    codes = {(t, i): code for t, by in answers.items() for i, (code, _) in by.items()}
    assert codes == {
        ("orders", 0): ErrorCode.REASSIGNMENT_IN_PROGRESS,
        ("orders", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("orders", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    for target in ([1, 2], [], [p1, p1]):
        code = store.alter_reassignments(ops, {"orders": {1: target}})["orders"][1][0]
        assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT, target
    assert store.alter_reassignments(ops, {"orders": {1: None}})["orders"][1][0] == (
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    )
    assert store.alter_reassignments(ops, {"orders": {1: [p1]}})["orders"][1][0] == ErrorCode.NONE

    # Cancelling puts the partition back where it was.
    assert store.alter_reassignments(ops, {"orders": {0: None}}) == {
        "orders": {0: (ErrorCode.NONE, None)}
    }
    assert store.list_reassignments(ops, None) == {}
    back = store.snapshot().topic(acme, "orders")
    assert back is not None
    assert (back.partitions[0].replicas, back.partitions[0].leader) == ((old,), old)


# --- client quotas ----------------------------------------------------------------------------


def _quotas(store: MetadataStore, tenant_id: int) -> dict[Any, dict[str, float]]:
    return {q.entity: dict(q.values) for q in store.snapshot().tenants[tenant_id].client_quotas}


def test_client_quotas_are_set_removed_and_seen_by_brokers(world: World) -> None:
    store = world.store
    acme = world.tenant("acme", produce_byte_rate=1000, fetch_byte_rate=2000)
    globex = world.tenant("globex")
    admin = world.principal(acme)
    cache = MetadataCache()
    cache.refresh(store)
    alice = (("user", "alice"),)
    default_user = (("user", None),)
    pair = (("client-id", "cli"), ("user", None))
    store.alter_client_quotas(admin, alice, {"producer_byte_rate": 1000}, False)
    store.alter_client_quotas(admin, default_user, {"consumer_byte_rate": 5.5}, False)
    store.alter_client_quotas(admin, pair, {"producer_byte_rate": 7}, False)
    expected = {
        alice: {"producer_byte_rate": 1000.0},
        default_user: {"consumer_byte_rate": 5.5},
        pair: {"producer_byte_rate": 7.0},
    }
    assert _quotas(store, acme) == expected
    assert _quotas(store, globex) == {}
    # A broker keeping up by deltas sees them without a full read.
    assert cache.refresh(store).tenants == {acme}
    assert {q.entity: dict(q.values) for q in cache.snapshot.tenants[acme].client_quotas} == (
        expected
    )
    # Removing a key; removing an entity's last key removes the entity.
    store.alter_client_quotas(
        admin, alice, {"producer_byte_rate": None, "consumer_byte_rate": 10}, False
    )
    store.alter_client_quotas(admin, pair, {"producer_byte_rate": None}, False)
    assert _quotas(store, acme) == {
        alice: {"consumer_byte_rate": 10.0},
        default_user: {"consumer_byte_rate": 5.5},
    }
    cache.refresh(store)
    assert cache.snapshot.tenants[acme] == store.snapshot().tenants[acme]


def test_refused_and_validate_only_client_quotas_change_nothing(world: World) -> None:
    store = world.store
    acme = world.tenant("acme", produce_byte_rate=1000, fetch_byte_rate=2000)
    admin = world.principal(acme)
    alice = (("user", "alice"),)
    store.alter_client_quotas(admin, alice, {"producer_byte_rate": 10}, False)
    version = store.metadata_version()
    over = {"producer_byte_rate": 1001.0}
    refused(ErrorCode.POLICY_VIOLATION, store.alter_client_quotas, admin, alice, over, False)
    over = {"consumer_byte_rate": 2001.0}
    refused(ErrorCode.POLICY_VIOLATION, store.alter_client_quotas, admin, alice, over, False)
    for bad in ({"request_percentage": 5.0}, {"nope": 5.0}, {"producer_byte_rate": -1.0}):
        refused(ErrorCode.INVALID_REQUEST, store.alter_client_quotas, admin, alice, bad, False)
    # One bad key refuses the entity's whole alteration.
    mixed = {"consumer_byte_rate": 20.0, "controller_mutation_rate": 1.0}
    refused(ErrorCode.INVALID_REQUEST, store.alter_client_quotas, admin, alice, mixed, False)
    store.alter_client_quotas(admin, alice, {"producer_byte_rate": 999}, True)
    store.alter_client_quotas(admin, alice, {"producer_byte_rate": 10}, False)  # no change
    assert store.metadata_version() == version
    assert _quotas(store, acme) == {alice: {"producer_byte_rate": 10.0}}


def test_usage_reports_keep_the_newest_totals_per_broker_process(world: World) -> None:
    from data_plane.broker.usage import Meter

    a = world.tenant(f"use-{uuid.uuid4().hex[:6]}")
    topic = uuid.uuid4()
    at = 1_790_000_000.0
    one, other = Meter(clock=lambda: at), Meter(clock=lambda: at)
    one.produced(a, topic, "orders", "User:app", 100, 1)
    first = one.report()
    one.produced(a, topic, "orders", "User:app", 50, 1)
    one.produced(999_999, topic, "orders", "User:app", 9, 1)  # an unknown tenant
    second = one.report()
    assert first is not None and second is not None
    world.store.report_usage(1, second)
    world.store.report_usage(1, first)  # older: changes nothing
    world.store.report_usage(1, second)  # again: changes nothing
    other.fetched(a, topic, "orders", "User:bi", 70, 2)  # another process of broker 1
    later = other.report()
    assert later is not None
    world.store.report_usage(1, later)
    totals = world.store.usage_totals(a)
    assert (totals["produce_bytes"], totals["fetch_bytes"], totals["fetch_records"]) == (150, 70, 2)
    assert world.store.usage_totals(999_999)["produce_bytes"] == 0


def test_client_reports_add_up_per_identity_and_version(world: World) -> None:
    from data_plane.broker.client_versions import ClientUse

    a, b = world.tenant(f"cv-{uuid.uuid4().hex[:6]}"), world.tenant(f"cv-{uuid.uuid4().hex[:6]}")

    def use(tenant: int, version: int, requests: int, first: float, last: float, **kw: Any):
        fields = {
            "principal": "User:app",
            "client_id": "orders",
            "software_name": "sarama",
            "software_version": "1.22.1",
            "api_key": 0,
            "served": True,
            **kw,
        }
        return ClientUse(
            tenant_id=tenant,
            api_version=version,
            requests=requests,
            first_seen=first,
            last_seen=last,
            **fields,
        )

    t0 = 1_790_000_000.0
    world.store.report_clients(1, [use(a, 2, 10, t0, t0 + 5), use(b, 9, 1, t0, t0)])
    world.store.report_clients(
        2,
        [
            use(a, 2, 5, t0 - 30, t0 + 60),  # the same use from another broker: summed
            use(a, 12, 3, t0, t0 + 1, served=False),  # refused: a row of its own
            use(a, 2, 1, t0, t0, software_name="", software_version=""),  # no KIP-511
            use(999_999, 2, 1, t0, t0),  # an unknown tenant: left out
        ],
    )
    rows = world.store.reported_clients(a)
    got = {(r.software_name, r.api_version, r.served): r for r in rows}
    assert set(got) == {("sarama", 2, True), ("sarama", 12, False), ("", 2, True)}
    both = got[("sarama", 2, True)]
    assert (both.requests, both.first_seen, both.last_seen) == (15, t0 - 30, t0 + 60)
    assert got[("sarama", 12, False)].requests == 3
    assert [(r.api_version, r.requests) for r in world.store.reported_clients(b)] == [(9, 1)]
    assert world.store.reported_clients(999_999) == []


def test_transaction_state_is_saved_loaded_and_kept_per_tenant(world: World) -> None:
    from data_plane.txn.model import TxnMetadata, TxnPartition, TxnState

    a, b = world.tenant(f"tx-{uuid.uuid4().hex[:6]}"), world.tenant(f"tx-{uuid.uuid4().hex[:6]}")
    store = world.store
    assert store.load_transaction(a, "orders-tx") is None
    first = TxnMetadata(a, "orders-tx", 4000, 0, -1, 60_000, TxnState.EMPTY, updated_ms=5)
    assert store.save_transaction(first)
    assert store.load_transaction(a, "orders-tx") == first
    # Another coordinator's first write of the same id loses.
    assert not store.save_transaction(dataclasses.replace(first, producer_id=4100))
    ongoing = first.to(
        TxnState.ONGOING,
        9,
        partitions=frozenset({TxnPartition(str(uuid.uuid4()), 2), TxnPartition("t", 0)}),
        groups=frozenset({"billing"}),
        start_ms=9,
        version=1,
        coordinator_epoch=7,  # a coordinator took it over
        next_producer_id=4300,  # transactions V2: its epoch ran out
        previous_producer_id=3999,
    )
    assert store.save_transaction(ongoing)  # replaces the id's state
    assert store.load_transaction(a, "orders-tx") == ongoing
    # A write on top of a version that is no longer stored (a stale coordinator) loses.
    stale = first.to(TxnState.EMPTY, 10, producer_epoch=1, version=1)
    assert not store.save_transaction(stale)
    assert not store.save_transaction(dataclasses.replace(stale, version=5))
    assert store.load_transaction(a, "orders-tx") == ongoing
    other = TxnMetadata(b, "orders-tx", 4001, 3, 2, 1000, TxnState.COMPLETE_ABORT)
    assert store.save_transaction(other)  # the same id in another tenant: another one
    assert store.load_transaction(a, "orders-tx") == ongoing
    assert store.load_transaction(b, "orders-tx") == other
    store.save_transaction(TxnMetadata(a, "a-first", 4002, 0, -1, 1000, TxnState.EMPTY))
    assert [t.transactional_id for t in store.list_transactions(a)] == ["a-first", "orders-tx"]
    assert store.list_transactions(b) == [other]


def test_transactional_offsets_stay_apart_until_the_transaction_ends(world: World) -> None:
    from data_plane.txn.model import TxnMetadata, TxnState

    store = world.store
    acme, globex = world.tenant("acme"), world.tenant("globex")
    brokers(store, 1)
    store.create_topic(world.principal(acme), "orders", 2, 1, {}, False)
    now = int(time.time()) * 1000
    store.commit_offsets(acme, "g1", [OffsetRecord("orders", 0, 5, 1, None, now)])
    store.save_transaction(TxnMetadata(acme, "tx", 7001, 0, -1, 60_000, TxnState.ONGOING))
    seen: list[object] = []

    def accept(txn: object) -> int:
        seen.append(txn)
        return 0

    def stage(pid: int, offsets: list[OffsetRecord], check: Any = accept) -> int:
        return store.stage_txn_offsets(acme, "tx", pid, "g1", offsets, check)

    # The check sees the id's stored state; when it refuses, nothing is staged.
    assert stage(7001, [OffsetRecord("orders", 1, 99, 1, None, now)], lambda txn: 48) == 48
    assert store.pending_txn_partitions(acme, "g1") == set()
    assert stage(7001, [OffsetRecord("orders", 0, 10, 1, "a", now)]) == 0
    assert seen[-1] == store.load_transaction(acme, "tx")
    assert stage(7001, [OffsetRecord("orders", 0, 12, 2, "b", now)]) == 0
    assert stage(7002, [OffsetRecord("orders", 1, 3, 1, None, now)]) == 0
    # Not the group's until committed; pending for require_stable readers.
    assert [(o.partition, o.offset) for o in store.fetch_offsets(acme, "g1")] == [(0, 5)]
    assert store.pending_txn_partitions(acme, "g1") == {("orders", 0), ("orders", 1)}
    assert store.pending_txn_partitions(globex, "g1") == set()

    def settle(pid: int, commit: bool, check: Any = lambda txn: True) -> bool:
        return store.settle_txn_offsets(acme, "tx", pid, "g1", commit, check)

    # The check sees the id's stored state; when it refuses, nothing is settled.
    assert settle(7001, True, lambda txn: txn is None) is False
    assert store.pending_txn_partitions(acme, "g1") == {("orders", 0), ("orders", 1)}
    assert [(o.partition, o.offset) for o in store.fetch_offsets(acme, "g1")] == [(0, 5)]
    assert settle(7001, True, lambda txn: txn == store.load_transaction(acme, "tx")) is True
    assert store.fetch_offsets(acme, "g1") == [OffsetRecord("orders", 0, 12, 2, "b", now)]
    assert store.pending_txn_partitions(acme, "g1") == {("orders", 1)}
    assert settle(7001, True) is True  # twice: nothing more
    assert settle(7002, False) is True  # aborted: dropped
    assert [(o.partition, o.offset) for o in store.fetch_offsets(acme, "g1")] == [(0, 12)]
    assert store.pending_txn_partitions(acme, "g1") == set()
    assert store.fetch_offsets(globex, "g1") == []
