"""Every broker port in memory: tenants, topics, ACLs, keys, brokers, groups and offsets.

For broker unit tests: no Django, no database. It keeps the rules of the Django adapters
(``control_plane.brokerlink``) that brokers can observe, and the contract suite
(``tests/brokerlink/test_store_contract.py``) holds both to them: the same admin checks in
the same order with the same Kafka error codes (nothing is kept of a refused or
validate-only request), replica placement by :mod:`data_plane.placement`, SCRAM
credentials derived from the key's secret, broker leases by an injected clock, AlterPartition
as a compare-and-set on the partition epoch, and a change log whose versions are what
``metadata_version`` / ``changes_since`` report.

Not modelled: audit detail beyond a list of events, reassignments, the controller's
fencing and elections (``controlled_shutdown`` aside), and SASL/PLAIN's slow hash (a
SHA-256 of the secret, compared in constant time).

Thread-safety: every method holds one lock, so the broker's worker threads may call it
concurrently. Seeding helpers (``add_tenant``, ``add_key``...) are for tests.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import scramp  # type: ignore[import-untyped]

from data_plane import internal_auth
from data_plane.acl import WILDCARD_HOST, WILDCARD_PRINCIPAL, AclBinding, InvalidAclBinding
from data_plane.broker.client_versions import ClientUse
from data_plane.broker.ports import AdminError, ScramCredentials
from data_plane.broker.usage import FIELDS as USAGE_FIELDS
from data_plane.broker.usage import UsageReport
from data_plane.client_quotas import (
    ClientQuota,
    Entity,
    InvalidQuota,
    QuotaAboveCeiling,
    altered,
    ceilings,
    make_entity,
)
from data_plane.groups.model import GroupRecord, GroupState, OffsetRecord
from data_plane.metadata.election import requested_election
from data_plane.metadata.model import (
    BrokerInfo,
    KeyExpiry,
    MetadataDelta,
    MetadataSnapshot,
    PartitionInfo,
    Principal,
    TenantInfo,
    TopicInfo,
)
from data_plane.placement import BrokerSlot, PlacementError, assign_replicas, rack_alternating
from data_plane.protocol.errors import ErrorCode
from data_plane.topic_config import (
    TOPIC_CONFIGS,
    InvalidConfig,
    InvalidTopicName,
    topic_collision_key,
    validate_topic_configs,
    validate_topic_name,
)
from data_plane.txn.model import TxnMetadata

MAX_PARTITIONS_PER_TOPIC = 10_000
DEFAULT_TENANT = "default"
ROLES = ("viewer", "developer", "admin", "owner")
_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def _entity_order(item: tuple[Entity, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((t, n or "") for t, n in item[0])


# Change-log scopes (the same names as the Django change log's).
TOPIC, ACLS, KEYS, TENANT, BROKERS = "topic", "acls", "keys", "tenant", "brokers"


@dataclass
class _Partition:
    index: int
    replicas: list[int] = field(default_factory=list)
    leader: int | None = None
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = 0
    # A reassignment in progress (KIP-455): replicas are the target, then the leaving ones.
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    original: list[int] = field(default_factory=list)

    def info(self) -> PartitionInfo:
        return PartitionInfo(
            self.index,
            self.leader,
            self.leader_epoch,
            tuple(self.replicas),
            tuple(self.isr),
            self.partition_epoch,
        )


@dataclass
class _Topic:
    tenant_id: int
    name: str
    topic_id: uuid.UUID
    replication_factor: int
    configs: dict[str, Any]
    partitions: list[_Partition]


@dataclass
class _Key:
    tenant_id: int
    service_account: str
    key_id: str
    secret_digest: bytes
    scram: dict[str, ScramCredentials]
    expires_at: float | None = None
    revoked: bool = False


@dataclass
class _Broker:
    info: BrokerInfo
    state: str = "running"  # running | shutting_down | fenced
    last_heartbeat: float = 0.0
    decommissioning: bool = False
    metadata_version: int = 0  # applied, as its last heartbeat said


@dataclass(frozen=True)
class _Change:
    version: int
    scope: str
    tenant_id: int | None = None
    topic_id: uuid.UUID | None = None


class MemoryStore:
    """An in-memory :class:`data_plane.broker.ports.MetadataStore`."""

    def __init__(
        self,
        *,
        cluster_id: str = "millrace",
        clock: Callable[[], float] = time.time,
        lease_seconds: float = 10.0,
        allow_anonymous: bool = False,
        internal_secret: str = "memory-store-internal-secret",  # noqa: S107 (tests only)
        scram_iterations: int = 4096,
        default_replication_factor: int = 3,
        max_replication_factor: int = 3,
        change_log_limit: int = 10_000,
    ) -> None:
        self.cluster_id = cluster_id
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.allow_anonymous = allow_anonymous
        self.internal_secret = internal_secret
        self.scram_iterations = scram_iterations
        self.default_replication_factor = default_replication_factor
        self.max_replication_factor = max_replication_factor
        self.change_log_limit = change_log_limit
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._tenants: dict[int, TenantInfo] = {}
        self._topics: dict[uuid.UUID, _Topic] = {}
        self._acls: dict[int, list[AclBinding]] = {}
        self._service_accounts: set[tuple[int, str]] = set()
        self._keys: dict[str, _Key] = {}
        self._brokers: dict[int, _Broker] = {}
        self._users: dict[int, tuple[bool, bool]] = {}  # user id -> (active, staff)
        self._members: dict[tuple[int, int], str] = {}  # (tenant id, user id) -> role
        self._groups: dict[tuple[int, str], GroupRecord] = {}
        self._offsets: dict[tuple[int, str], dict[tuple[str, int], OffsetRecord]] = {}
        self._next_producer_id = 0
        self._next_id = 1
        self._version = 0
        self._log: list[_Change] = []
        self._pruned_through = 0  # changes up to this version are no longer in the log
        self.audit_events: list[dict[str, Any]] = []
        self._client_uses: dict[tuple[Any, ...], ClientUse] = {}
        # (broker, incarnation, hour, tenant, topic, principal) -> (seq, values)
        self._usage: dict[tuple[Any, ...], tuple[int, tuple[int, ...]]] = {}
        self._transactions: dict[tuple[int, str], TxnMetadata] = {}
        # Offsets of transactions not yet ended, by (tenant, group, producer id).
        self._staged_offsets: dict[tuple[int, str, int], dict[tuple[str, int], OffsetRecord]] = {}
        # What snapshot() and changes_since() read, by (scope, tenant id): tests count it.
        self.reads: Counter[tuple[str, int | None]] = Counter()

    # --- the change log -------------------------------------------------------------------

    def _record(
        self, scope: str, tenant_id: int | None = None, topic_id: uuid.UUID | None = None
    ) -> None:
        self._version += 1
        self._log.append(_Change(self._version, scope, tenant_id, topic_id))
        if len(self._log) > self.change_log_limit:
            dropped = self._log[: len(self._log) - self.change_log_limit]
            self._log = self._log[len(dropped) :]
            self._pruned_through = dropped[-1].version
        self._changed.notify_all()

    def metadata_version(self) -> int:
        with self._lock:
            return self._version

    def wait_for_change(self, timeout: float) -> bool:
        with self._changed:
            seen = self._version
            return self._changed.wait_for(lambda: self._version != seen, timeout)

    # --- reads ----------------------------------------------------------------------------

    def _topic_info(self, topic: _Topic) -> TopicInfo:
        self.reads[(TOPIC, topic.tenant_id)] += 1
        return TopicInfo(
            topic.tenant_id,
            topic.name,
            topic.topic_id,
            tuple(p.info() for p in topic.partitions),
            dict(topic.configs),
        )

    def _tenant_info(self, tenant_id: int) -> TenantInfo | None:
        self.reads[(TENANT, tenant_id)] += 1
        return self._tenants.get(tenant_id)

    def _tenant_acls(self, tenant_id: int) -> tuple[AclBinding, ...]:
        self.reads[(ACLS, tenant_id)] += 1
        return tuple(self._acls.get(tenant_id, ()))

    def _usable(self, key: _Key, now: float) -> bool:
        return not key.revoked and (key.expires_at is None or key.expires_at > now)

    def _tenant_keys(self, tenant_id: int) -> KeyExpiry:
        self.reads[(KEYS, tenant_id)] += 1
        now = self.clock()
        return {
            k.key_id: k.expires_at
            for k in self._keys.values()
            if k.tenant_id == tenant_id and self._usable(k, now)
        }

    def _live(self) -> list[_Broker]:
        """Running brokers with a fresh lease; all running ones if none is fresh (a stalled
        store or machine, as ``BrokerQuerySet.live`` says)."""
        running = [b for b in self._brokers.values() if b.state == "running"]
        cutoff = self.clock() - self.lease_seconds
        fresh = [b for b in running if b.last_heartbeat >= cutoff]
        return sorted(fresh or running, key=lambda b: b.info.id)

    def live_brokers(self) -> Mapping[int, BrokerInfo]:
        with self._lock:
            self.reads[(BROKERS, None)] += 1
            return {b.info.id: b.info for b in self._live()}

    def fenced_brokers(self) -> Mapping[int, BrokerInfo]:
        with self._lock:
            live = {b.info.id for b in self._live()}
            return {i: b.info for i, b in sorted(self._brokers.items()) if i not in live}

    def snapshot(self) -> MetadataSnapshot:
        with self._lock:
            topics: dict[int, dict[str, TopicInfo]] = {}
            for topic in self._topics.values():
                topics.setdefault(topic.tenant_id, {})[topic.name] = self._topic_info(topic)
            keys = {t: self._tenant_keys(t) for t in self._tenants}
            return MetadataSnapshot(
                tenants={t: info for t in self._tenants if (info := self._tenant_info(t))},
                topics=topics,
                acls={t: self._tenant_acls(t) for t in self._acls if self._acls[t]},
                brokers=self.live_brokers(),
                active_keys=frozenset(k for ks in keys.values() for k in ks),
                cluster_id=self.cluster_id,
                version=self._version,
                keys={t: ks for t, ks in keys.items() if ks},
            )

    def changes_since(self, version: int) -> MetadataDelta | None:
        with self._lock:
            if version > self._version or version < self._pruned_through:
                return None
            tenants: dict[int, TenantInfo | None] = {}
            topics: dict[uuid.UUID, TopicInfo | None] = {}
            acls: dict[int, tuple[AclBinding, ...]] = {}
            keys: dict[int, KeyExpiry] = {}
            brokers = False
            for change in self._log:
                if change.version <= version:
                    continue
                if change.scope == TOPIC and change.topic_id is not None:
                    if change.topic_id not in topics:
                        topic = self._topics.get(change.topic_id)
                        topics[change.topic_id] = None if topic is None else self._topic_info(topic)
                elif change.scope == ACLS and change.tenant_id is not None:
                    if change.tenant_id not in acls:
                        acls[change.tenant_id] = self._tenant_acls(change.tenant_id)
                elif change.scope == KEYS and change.tenant_id is not None:
                    if change.tenant_id not in keys:
                        keys[change.tenant_id] = self._tenant_keys(change.tenant_id)
                elif change.scope == TENANT and change.tenant_id is not None:
                    if change.tenant_id not in tenants:
                        tenants[change.tenant_id] = self._tenant_info(change.tenant_id)
                elif change.scope == BROKERS:
                    brokers = True
                else:
                    return None
            return MetadataDelta(self._version, tenants, topics, acls, keys, brokers)

    # --- seeding (tests) ------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def add_tenant(self, slug: str, **limits: Any) -> int:
        """A tenant with the Django model's default limits unless given; its id."""
        with self._lock:
            tenant_id = self._new_id()
            self._tenants[tenant_id] = TenantInfo(
                tenant_id,
                slug,
                produce_byte_rate=limits.pop("produce_byte_rate", 10 * 2**20),
                fetch_byte_rate=limits.pop("fetch_byte_rate", 10 * 2**20),
                max_partitions=limits.pop("max_partitions", 1000),
                max_storage_bytes=limits.pop("max_storage_bytes", 100 * 2**30),
                default_partitions=limits.pop("default_partitions", None),
            )
            if limits:
                raise TypeError(f"unknown tenant limits {sorted(limits)}")
            self._record(TENANT, tenant_id)
            return tenant_id

    def update_tenant(self, tenant_id: int, **limits: Any) -> None:
        with self._lock:
            self._tenants[tenant_id] = replace(self._tenants[tenant_id], **limits)
            self._record(TENANT, tenant_id)

    def add_service_account(self, tenant_id: int, name: str) -> None:
        with self._lock:
            self._service_accounts.add((tenant_id, name))

    def add_key(
        self, tenant_id: int, service_account: str, *, expires_at: float | None = None
    ) -> tuple[str, str]:
        """A new API key of the service account (made if missing): (key id, secret)."""
        with self._lock:
            self._service_accounts.add((tenant_id, service_account))
            key_id = "MRK" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))
            secret = "mrsec_" + secrets.token_urlsafe(36)
            scram = {}
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                salt, stored, server, count = scramp.ScramMechanism(mechanism).make_auth_info(
                    secret, iteration_count=self.scram_iterations
                )
                scram[mechanism] = ScramCredentials(salt, stored, server, count)
            digest = hashlib.sha256(secret.encode()).digest()
            self._keys[key_id] = _Key(
                tenant_id, service_account, key_id, digest, scram, expires_at=expires_at
            )
            self._record(KEYS, tenant_id)
            return key_id, secret

    def revoke_key(self, key_id: str) -> None:
        with self._lock:
            key = self._keys[key_id]
            if not key.revoked:
                key.revoked = True
                self._record(KEYS, key.tenant_id)

    def delete_service_account(self, tenant_id: int, name: str) -> None:
        """The account with its keys and ACLs, as the control plane deletes it."""
        with self._lock:
            self._service_accounts.discard((tenant_id, name))
            for key_id in [k.key_id for k in self._keys.values() if k.tenant_id == tenant_id]:
                if self._keys[key_id].service_account == name:
                    del self._keys[key_id]
            self._acls[tenant_id] = [
                b for b in self._acls.get(tenant_id, []) if b.principal != f"User:{name}"
            ]
            self._record(KEYS, tenant_id)
            self._record(ACLS, tenant_id)

    def add_acl(self, tenant_id: int, binding: AclBinding) -> AclBinding:
        with self._lock:
            stored = replace(binding, id=self._new_id())
            self._acls.setdefault(tenant_id, []).append(stored)
            self._record(ACLS, tenant_id)
            return stored

    def add_user(self, user_id: int, *, staff: bool = False, active: bool = True) -> None:
        """A control-plane user (operators are active staff users)."""
        with self._lock:
            self._users[user_id] = (active, staff)

    def add_member(self, tenant_id: int, user_id: int, role: str) -> None:
        with self._lock:
            self._users.setdefault(user_id, (True, False))
            self._members[(tenant_id, user_id)] = role

    def set_decommissioning(self, broker_id: int, decommissioning: bool = True) -> None:
        with self._lock:
            self._brokers[broker_id].decommissioning = decommissioning

    def system_principal(self, tenant_id: int) -> Principal:
        """An operator principal of the tenant (may place replicas), for seeding topics."""
        slug = self._tenants[tenant_id].slug
        return Principal(
            tenant_id, slug, internal_auth.OPERATOR_PRINCIPAL_NAME, None, operator=True
        )

    def add_topic(
        self,
        tenant_id: int,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> TopicInfo:
        """Create a topic through the admin checks; the created topic."""
        with self._lock:
            principal = self.system_principal(tenant_id)
            self.create_topic(principal, name, partitions, replication_factor, configs or {}, False)
            topic = next(
                t for t in self._topics.values() if t.tenant_id == tenant_id and t.name == name
            )
            return self._topic_info(topic)

    # --- credentials ----------------------------------------------------------------------

    def _tenant_by_slug(self, slug: str) -> TenantInfo | None:
        return next((t for t in self._tenants.values() if t.slug == slug), None)

    def _active_key(self, key_id: str) -> _Key | None:
        key = self._keys.get(key_id)
        return key if key is not None and self._usable(key, self.clock()) else None

    def _key_principal(self, key: _Key) -> Principal:
        slug = self._tenants[key.tenant_id].slug
        return Principal(key.tenant_id, slug, f"User:{key.service_account}", key.key_id)

    def _proxied(self, user: str) -> _Key | None:
        slug, key_id = internal_auth.proxied_key(user) or ("", "")
        key = self._active_key(key_id)
        if key is None or self._tenants[key.tenant_id].slug != slug:
            return None
        return key

    def _operator(self, user: str) -> TenantInfo | None:
        slug, user_id = internal_auth.operator_member(user) or ("", 0)
        active, staff = self._users.get(user_id, (False, False))
        return self._tenant_by_slug(slug) if active and staff else None

    def _console(self, user: str) -> tuple[TenantInfo, str] | None:
        slug, user_id = internal_auth.console_member(user) or ("", 0)
        tenant = self._tenant_by_slug(slug)
        active, _ = self._users.get(user_id, (False, False))
        role = self._members.get((tenant.id, user_id)) if tenant else None
        if tenant is None or role is None or not active:
            return None
        return tenant, role

    def _internal_user_exists(self, user: str) -> bool | None:
        """Whether an internal user name is usable now; None if it is not internal."""
        if user == internal_auth.BROKER_USER:
            return True
        if internal_auth.proxied_key(user) is not None:
            return self._proxied(user) is not None
        if internal_auth.operator_member(user) is not None:
            return self._operator(user) is not None
        if internal_auth.console_member(user) is not None:
            return self._console(user) is not None
        slug = internal_auth.tenant_slug(user) or internal_auth.connect_tenant(user)
        if slug is not None:
            return self._tenant_by_slug(slug) is not None
        return None

    def scram_credentials(self, key_id: str, mechanism: str) -> ScramCredentials | None:
        with self._lock:
            internal = self._internal_user_exists(key_id)
            if internal is not None:
                if not internal:
                    return None
                return ScramCredentials(
                    *internal_auth.scram_credentials(self.internal_secret, key_id, mechanism)
                )
            key = self._active_key(key_id)
            return None if key is None else key.scram.get(mechanism)

    def principal_for_key(self, key_id: str) -> Principal | None:
        with self._lock:
            if key_id == internal_auth.BROKER_USER:
                name = internal_auth.BROKER_PRINCIPAL_NAME
                return Principal(0, "", name, key_id, internal=True, broker=True)
            if internal_auth.proxied_key(key_id) is not None:
                key = self._proxied(key_id)
                return None if key is None else self._key_principal(key)
            if internal_auth.operator_member(key_id) is not None:
                tenant = self._operator(key_id)
                if tenant is None:
                    return None
                name = internal_auth.OPERATOR_PRINCIPAL_NAME
                grants = internal_auth.OPERATOR
                return Principal(
                    tenant.id, tenant.slug, name, key_id, True, operator=True, grants=grants
                )
            if internal_auth.console_member(key_id) is not None:
                found = self._console(key_id)
                if found is None:
                    return None
                tenant, role = found
                writer = ROLES.index(role) >= ROLES.index("developer")
                grants = internal_auth.CONSOLE_WRITER if writer else internal_auth.ALLOWED
                name = internal_auth.CONSOLE_PRINCIPAL_NAME
                return Principal(tenant.id, tenant.slug, name, key_id, True, grants=grants)
            connect_slug = internal_auth.connect_tenant(key_id)
            if connect_slug is not None:
                connect_tenant = self._tenant_by_slug(connect_slug)
                if connect_tenant is None:
                    return None
                return Principal(
                    connect_tenant.id, connect_slug, internal_auth.CONNECT_PRINCIPAL_NAME,
                    key_id, internal=True, grants=internal_auth.CONNECT,
                    resources=internal_auth.CONNECT_RESOURCES,
                )  # fmt: skip
            slug = internal_auth.tenant_slug(key_id)
            if slug is not None:
                found_tenant = self._tenant_by_slug(slug)
                if found_tenant is None:
                    return None
                name = internal_auth.PRINCIPAL_NAME
                return Principal(found_tenant.id, slug, name, key_id, internal=True)
            key = self._active_key(key_id)
            return None if key is None else self._key_principal(key)

    def verify_plain(self, key_id: str, secret: str) -> Principal | None:
        with self._lock:
            key = self._keys.get(key_id)
            digest = hashlib.sha256(secret.encode()).digest()
            if key is None or not hmac.compare_digest(digest, key.secret_digest):
                return None
            return self._key_principal(key) if self._usable(key, self.clock()) else None

    def anonymous_principal(self) -> Principal | None:
        with self._lock:
            tenant = self._tenant_by_slug(DEFAULT_TENANT) if self.allow_anonymous else None
            return (
                None
                if tenant is None
                else Principal(tenant.id, tenant.slug, "User:ANONYMOUS", None)
            )

    # --- brokers --------------------------------------------------------------------------

    def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None,
        tls_host: str | None = None,
        tls_port: int | None = None,
    ) -> None:
        with self._lock:
            info = BrokerInfo(broker_id, host, port, rack or None, tls_host or None, tls_port)
            old = self._brokers.get(broker_id)
            decommissioning = old.decommissioning if old else False
            self._brokers[broker_id] = _Broker(info, "running", self.clock(), decommissioning)
            self._record(BROKERS)

    def heartbeat(self, broker_id: int, metadata_version: int = 0) -> None:
        with self._lock:
            broker = self._brokers.get(broker_id)
            if broker is not None:
                broker.last_heartbeat = self.clock()
                broker.state = "running"
                broker.metadata_version = metadata_version

    def deregister_broker(self, broker_id: int) -> None:
        with self._lock:
            if broker_id in self._brokers:
                self._brokers[broker_id].state = "shutting_down"
                self._record(BROKERS)

    def controlled_shutdown(self, broker_id: int) -> int:
        with self._lock:
            if broker_id in self._brokers:
                self._brokers[broker_id].state = "shutting_down"
            self._record(BROKERS)
            live = {b.info.id for b in self._live()} - {broker_id}
            for topic in self._topics.values():
                changed = False
                for p in topic.partitions:
                    others = [b for b in p.isr if b != broker_id and b in live]
                    if (p.leader == broker_id or broker_id in p.isr) and others:
                        leader = p.leader
                        if leader == broker_id or leader not in others:
                            leader = next(b for b in p.replicas if b in others)
                        self._set(p, leader, others)
                        changed = True
                if changed:
                    self._record(TOPIC, topic.tenant_id, topic.topic_id)
            return sum(
                1 for t in self._topics.values() for p in t.partitions if p.leader == broker_id
            )

    @staticmethod
    def _set(p: _Partition, leader: int | None, isr: list[int]) -> None:
        if leader != p.leader:
            p.leader_epoch += 1
        p.leader, p.isr = leader, isr
        p.partition_epoch += 1

    def allocate_producer_ids(self, count: int) -> int:
        with self._lock:
            first = self._next_producer_id
            self._next_producer_id += count
            return first

    def alter_partition(
        self,
        topic_id: str,
        index: int,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
    ) -> tuple[int, int, int, tuple[int, ...]]:
        with self._lock:
            topic = self._topics.get(uuid.UUID(str(topic_id)))
            if topic is None or not 0 <= index < len(topic.partitions):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, ()
            p = topic.partitions[index]
            now = (p.leader_epoch, p.partition_epoch, tuple(p.isr))
            if p.leader != leader or leader_epoch != p.leader_epoch:
                return (ErrorCode.FENCED_LEADER_EPOCH, *now)
            if partition_epoch != p.partition_epoch:
                return (ErrorCode.INVALID_UPDATE_VERSION, *now)
            if leader not in isr or not set(isr) <= set(p.replicas):
                return (ErrorCode.INVALID_REQUEST, *now)
            ordered = [b for b in p.replicas if b in set(isr)]
            live = {b.info.id for b in self._live()}
            if any(b not in live and b not in p.isr for b in ordered):
                return (ErrorCode.INELIGIBLE_REPLICA, *now)
            self._set(p, leader, ordered)
            self._complete_reassignment(p, live)
            self._record(TOPIC, topic.tenant_id, topic.topic_id)
            return ErrorCode.NONE, p.leader_epoch, p.partition_epoch, tuple(p.isr)

    def _complete_reassignment(self, p: _Partition, live: set[int]) -> None:
        """As the controller's tick: once every target replica is in the ISR, the target
        becomes the replica set (leadership moves if the leader is leaving)."""
        if not (p.adding or p.removing):
            return
        target = [b for b in p.replicas if b not in p.removing]
        if not all(b in p.isr for b in target):
            return
        leader = p.leader if p.leader in target and p.leader in live else None
        if leader is None:
            leader = next((b for b in target if b in live), None)
            if leader is None:
                return
        p.replicas, p.adding, p.removing, p.original = target, [], [], []
        self._set(p, leader, [b for b in target if b in p.isr])

    def _slots(self) -> list[BrokerSlot]:
        return [BrokerSlot(b.info.id, b.info.rack) for b in self._live() if not b.decommissioning]

    def _place(
        self, topic: _Topic, start: int, stop: int, slots: list[BrokerSlot]
    ) -> list[list[int]]:
        first = topic.partitions[0].replicas if topic.partitions else []
        ordered = [b.id for b in rack_alternating(slots)]
        begin = ordered.index(first[0]) if first and first[0] in ordered else 0
        try:
            return assign_replicas(
                slots, stop - start, topic.replication_factor, first_partition=start, start=begin
            )
        except PlacementError as exc:
            raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None

    def assign_unassigned_partitions(self) -> int:
        with self._lock:
            slots = self._slots()
            done = 0
            for topic in self._topics.values():
                rows = [p for p in topic.partitions if not p.replicas]
                if not slots or not rows or topic.replication_factor > len(slots):
                    continue
                for p in rows:
                    (replicas,) = self._place(topic, p.index, p.index + 1, slots)
                    p.replicas, p.leader, p.isr = replicas, replicas[0], list(replicas)
                    done += 1
                self._record(TOPIC, topic.tenant_id, topic.topic_id)
            return done

    # --- admin ----------------------------------------------------------------------------

    def _audit(self, principal: Principal, action: str, obj: str, **fields: Any) -> None:
        event = {"tenant_id": principal.tenant_id, "action": action, "object": obj}
        self.audit_events.append({**event, "actor": principal.key_id or principal.name, **fields})

    def _topic(self, principal: Principal, name: str) -> _Topic:
        for topic in self._topics.values():
            if topic.tenant_id == principal.tenant_id and topic.name == name:
                return topic
        raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")

    def _budget(self, tenant_id: int, extra: int) -> None:
        tenant = self._tenants[tenant_id]
        in_use = sum(len(t.partitions) for t in self._topics.values() if t.tenant_id == tenant_id)
        if in_use + extra > tenant.max_partitions:
            raise AdminError(
                ErrorCode.POLICY_VIOLATION,
                f"tenant {tenant.slug} may have {tenant.max_partitions} partitions; "
                f"{in_use} are in use and this needs {extra} more",
            )

    @staticmethod
    def _partition_count(count: object) -> int:
        if isinstance(count, bool) or not isinstance(count, int):
            raise AdminError(ErrorCode.INVALID_PARTITIONS, "partition_count must be an integer")
        if not 1 <= count <= MAX_PARTITIONS_PER_TOPIC:
            raise AdminError(
                ErrorCode.INVALID_PARTITIONS,
                f"partition_count must be between 1 and {MAX_PARTITIONS_PER_TOPIC}",
            )
        return count

    @staticmethod
    def _configs(configs: Mapping[str, object], replication_factor: int) -> dict[str, Any]:
        try:
            return validate_topic_configs(configs, replication_factor=replication_factor)
        except InvalidConfig as exc:
            raise AdminError(ErrorCode.INVALID_CONFIG, exc.message) from None

    def _assignment(
        self, assignment: Sequence[Sequence[int]], replication_factor: int | None
    ) -> list[list[int]]:
        code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        if not assignment:
            raise AdminError(code, "the replica assignment names no partitions")
        live = {slot.id for slot in self._slots()}
        plan: list[list[int]] = []
        for index, replicas in enumerate(assignment):
            row = list(replicas)
            if not row:
                raise AdminError(code, f"partition {index} has no replicas")
            if len(set(row)) != len(row):
                raise AdminError(code, f"partition {index} names a broker twice: {row}")
            expected = replication_factor or (len(plan[0]) if plan else len(row))
            if len(row) != expected:
                raise AdminError(code, f"partition {index} has {len(row)} replicas, not {expected}")
            gone = [b for b in row if b not in live]
            if gone:
                raise AdminError(code, f"partition {index}: broker(s) {gone} are not live")
            plan.append(row)
        return plan

    def _add_partitions(
        self, topic: _Topic, count: int, plan: list[list[int]] | None
    ) -> list[_Partition]:
        start = len(topic.partitions)
        slots = self._slots()
        if plan is None and not slots:
            return [_Partition(i) for i in range(start, count)]
        if plan is None:
            plan = self._place(topic, start, count, slots)
        return [
            _Partition(i, list(r), r[0], 0, list(r))
            for i, r in zip(range(start, count), plan, strict=True)
        ]

    def create_topic(
        self,
        principal: Principal,
        name: str,
        partitions: int,
        replication_factor: int | None,
        configs: Mapping[str, str],
        validate_only: bool,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        with self._lock:
            try:
                validate_topic_name(name)
            except InvalidTopicName as exc:
                raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
            plan = None
            if assignment is not None:
                plan = self._assignment(assignment, None)
                partitions, replication_factor = len(plan), len(plan[0])
            self._partition_count(partitions)
            registered = bool(self._brokers)
            live = len(self._live())
            if replication_factor is None:
                replication_factor = (
                    max(1, min(self.default_replication_factor, live)) if registered else 1
                )
            max_rf = live if registered else self.max_replication_factor
            if max_rf == 0:
                raise AdminError(
                    ErrorCode.INVALID_REPLICATION_FACTOR, "no broker is alive to host replicas"
                )
            if not 1 <= replication_factor <= max_rf:
                raise AdminError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication_factor must be between 1 and {max_rf}",
                )
            parsed = self._configs(configs, replication_factor)
            tenant_topics = [t for t in self._topics.values() if t.tenant_id == principal.tenant_id]
            if any(t.name == name for t in tenant_topics):
                raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
            key = topic_collision_key(name)
            if any(topic_collision_key(t.name) == key for t in tenant_topics):
                raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} collides")
            self._budget(principal.tenant_id, partitions)
            topic = _Topic(principal.tenant_id, name, uuid.uuid4(), replication_factor, parsed, [])
            topic.partitions = self._add_partitions(topic, partitions, plan)
            if validate_only:
                return
            self._topics[topic.topic_id] = topic
            self._audit(principal, "topic.create", name)
            self._record(TOPIC, topic.tenant_id, topic.topic_id)

    def delete_topic(self, principal: Principal, name: str) -> None:
        with self._lock:
            topic = self._topic(principal, name)
            del self._topics[topic.topic_id]
            for (tenant_id, _), offsets in self._offsets.items():
                for tp in [tp for tp in offsets if tp[0] == name]:
                    if tenant_id == topic.tenant_id:
                        del offsets[tp]
            self._audit(principal, "topic.delete", name)
            self._record(TOPIC, topic.tenant_id, topic.topic_id)

    def create_partitions(
        self,
        principal: Principal,
        name: str,
        count: int,
        validate_only: bool,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        with self._lock:
            topic = self._topic(principal, name)
            self._partition_count(count)
            have = len(topic.partitions)
            if count <= have:
                raise AdminError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic {name!r} has {have} partitions; the count can only grow",
                )
            self._budget(topic.tenant_id, count - have)
            plan = None
            if assignment is not None:
                plan = self._assignment(assignment, topic.replication_factor)
                if len(plan) != count - have:
                    raise AdminError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"the replica assignment places {len(plan)} partition(s) but "
                        f"{count - have} are being added",
                    )
            added = self._add_partitions(topic, count, plan)
            if validate_only:
                return
            topic.partitions.extend(added)
            self._audit(principal, "topic.add_partitions", name)
            self._record(TOPIC, topic.tenant_id, topic.topic_id)

    def alter_topic_configs(
        self,
        principal: Principal,
        name: str,
        changes: Mapping[str, str | None],
        validate_only: bool,
    ) -> None:
        with self._lock:
            topic = self._topic(principal, name)
            merged: dict[str, object] = dict(topic.configs)
            for key, value in changes.items():
                if key not in TOPIC_CONFIGS:
                    raise AdminError(ErrorCode.INVALID_CONFIG, f"unknown topic config {key!r}")
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            parsed = self._configs(merged, topic.replication_factor)
            if validate_only:
                return
            topic.configs = parsed
            self._audit(principal, "topic.alter_configs", name)
            self._record(TOPIC, topic.tenant_id, topic.topic_id)

    def create_acl(self, principal: Principal, binding: Any) -> None:
        with self._lock:
            tenant_id = principal.tenant_id
            code = ErrorCode.INVALID_REQUEST
            who = binding.principal
            if who != WILDCARD_PRINCIPAL:
                if not who.startswith("User:") or len(who) == len("User:"):
                    raise AdminError(code, "principal must be 'User:<service account name>'")
                if (tenant_id, who[len("User:") :]) not in self._service_accounts:
                    raise AdminError(code, f"no service account named {who[5:]!r}")
            if len(binding.resource_name) > 255:
                raise AdminError(code, "use at most 255 characters")
            host = binding.host
            if host in ("", WILDCARD_HOST):
                host = WILDCARD_HOST
            else:
                try:
                    host = str(ipaddress.ip_address(host))
                except ValueError:
                    raise AdminError(code, "enter '*' or one IP address") from None
            new = replace(binding, host=host, id=None)
            try:
                new.validate()
            except InvalidAclBinding as exc:
                raise AdminError(code, exc.message) from None
            if any(replace(b, id=None) == new for b in self._acls.get(tenant_id, [])):
                raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, "an identical ACL already exists")
            self._acls.setdefault(tenant_id, []).append(replace(new, id=self._new_id()))
            self._audit(principal, "acl.create", str(new))
            self._record(ACLS, tenant_id)

    def alter_client_quotas(
        self,
        principal: Principal,
        entity: Entity,
        changes: Mapping[str, float | None],
        validate_only: bool,
    ) -> None:
        with self._lock:
            tenant = self._tenants[principal.tenant_id]
            quotas = {q.entity: q.values for q in tenant.client_quotas}
            try:
                entity = make_entity(entity)
                values = altered(
                    quotas.get(entity, {}),
                    changes,
                    ceilings(tenant.produce_byte_rate, tenant.fetch_byte_rate),
                )
            except QuotaAboveCeiling as exc:
                raise AdminError(ErrorCode.POLICY_VIOLATION, str(exc)) from None
            except InvalidQuota as exc:
                raise AdminError(ErrorCode.INVALID_REQUEST, str(exc)) from None
            if validate_only or values == quotas.get(entity, {}):
                return
            quotas[entity] = values
            self._tenants[tenant.id] = replace(
                tenant,
                client_quotas=tuple(
                    ClientQuota(e, v) for e, v in sorted(quotas.items(), key=_entity_order) if v
                ),
            )
            self._audit(principal, "tenant.alter_client_quotas", repr(entity), values=values)
            self._record(TENANT, tenant.id)

    def delete_acls(self, principal: Principal, matcher: Callable[[Any], bool]) -> list[Any]:
        with self._lock:
            tenant_id = principal.tenant_id
            kept: list[AclBinding] = []
            deleted: list[AclBinding] = []
            for binding in self._acls.get(tenant_id, []):
                (deleted if matcher(binding) else kept).append(binding)
            if deleted:
                self._acls[tenant_id] = kept
                for binding in deleted:
                    self._audit(principal, "acl.delete", str(binding))
                self._record(ACLS, tenant_id)
            return deleted

    def delete_group(self, principal: Principal, group_id: str) -> bool:
        with self._lock:
            key = (principal.tenant_id, group_id)
            group = self._groups.get(key)
            if group is None:
                return False
            if group.members or group.state not in (GroupState.EMPTY, GroupState.DEAD):
                raise AdminError(
                    ErrorCode.NON_EMPTY_GROUP,
                    f"cannot delete consumer group {group_id!r} while it has members",
                )
            del self._groups[key]
            self._offsets.pop(key, None)
            self._audit(principal, "group.delete", group_id)
            return True

    def elect_leaders(
        self, principal: Principal, unclean: bool, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[str, dict[int, tuple[int, str | None]]]:
        with self._lock:
            live = {b.info.id for b in self._live()}
            tenant_topics = {
                t.name: t for t in self._topics.values() if t.tenant_id == principal.tenant_id
            }
            wanted: Mapping[str, Sequence[int]] = (
                {n: [p.index for p in t.partitions] for n, t in tenant_topics.items()}
                if partitions is None
                else partitions
            )
            out: dict[str, dict[int, tuple[int, str | None]]] = {}
            for name, indexes in wanted.items():
                results = out.setdefault(name, {})
                topic = tenant_topics.get(name)
                changed = False
                for index in indexes:
                    if topic is None or not 0 <= index < len(topic.partitions):
                        results[index] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                        continue
                    p = topic.partitions[index]
                    decided = requested_election(p.replicas, p.isr, p.leader, live, unclean)
                    results[index] = (decided.error_code, None)
                    if decided.error_code != ErrorCode.NONE:
                        continue
                    if decided.unclean:
                        self._audit(
                            principal,
                            "partition.unclean_election",
                            f"{name}-{index}",
                            before={"leader": p.leader, "isr": list(p.isr)},
                            after={"leader": decided.leader, "isr": list(decided.isr)},
                        )
                    self._set(p, decided.leader, list(decided.isr))
                    changed = True
                if changed and topic is not None:
                    self._record(TOPIC, topic.tenant_id, topic.topic_id)
            return out

    def alter_reassignments(
        self,
        principal: Principal,
        requests: Mapping[str, Mapping[int, Sequence[int] | None]],
    ) -> dict[str, dict[int, tuple[int, str | None]]]:
        with self._lock:
            out: dict[str, dict[int, tuple[int, str | None]]] = {}
            for name, wanted in requests.items():
                results = out.setdefault(name, {})
                topic = next(
                    (
                        t
                        for t in self._topics.values()
                        if t.tenant_id == principal.tenant_id and t.name == name
                    ),
                    None,
                )
                changed = False
                for index, target in wanted.items():
                    if topic is None or not 0 <= index < len(topic.partitions):
                        results[index] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                        continue
                    p = topic.partitions[index]
                    refused = self._reassign(principal, topic, p, target)
                    results[index] = refused or (ErrorCode.NONE, None)
                    changed = changed or refused is None
                if changed and topic is not None:
                    self._record(TOPIC, topic.tenant_id, topic.topic_id)
            return out

    def _reassign(
        self, principal: Principal, topic: _Topic, p: _Partition, target: Sequence[int] | None
    ) -> tuple[int, str | None] | None:
        """Start or cancel one partition's reassignment; the refusal, or None."""
        what = f"{topic.name}-{p.index}"
        if target is None:
            if not (p.adding or p.removing):
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"{what} is not being reassigned"
            original = p.original
            isr = [b for b in original if b in p.isr] or original[:1]
            leader = p.leader
            if leader not in original:
                live = {b.info.id for b in self._live()}
                leader = next((b for b in original if b in isr and b in live), None)
                if leader is None:
                    return ErrorCode.REASSIGNMENT_IN_PROGRESS, (
                        f"{what}: no original replica is live and in sync to lead again"
                    )
            before = [b for b in p.replicas if b not in p.removing]
            p.replicas, p.adding, p.removing, p.original = list(original), [], [], []
            self._set(p, leader, isr)
            self._audit(principal, "partition.reassignment_cancelled", what, before=before)
            return None
        wanted = list(target)
        eligible = {b.info.id for b in self._live() if not b.decommissioning}
        current = [b for b in p.replicas if b not in p.removing]
        if not wanted or len(set(wanted)) != len(wanted):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "replicas must be distinct broker ids"
        if len(wanted) != topic.replication_factor:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                f"the topic's replication factor is {topic.replication_factor}: "
                f"give {topic.replication_factor} broker(s), not {len(wanted)}"
            )
        for b in wanted:
            if b not in eligible and b not in p.replicas:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, (
                    f"broker {b} is not live or is being decommissioned"
                )
        if wanted == list(p.replicas):
            return None
        if p.adding or p.removing:
            return ErrorCode.REASSIGNMENT_IN_PROGRESS, (
                f"{what} is already being reassigned; cancel it first"
            )
        adding = [b for b in wanted if b not in current]
        removing = [b for b in current if b not in wanted]
        p.original = current if adding or removing else []
        p.replicas, p.adding, p.removing = [*wanted, *removing], adding, removing
        p.partition_epoch += 1
        self._audit(principal, "partition.reassignment_started", what, before=current)
        return None

    def list_reassignments(
        self, principal: Principal, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]:
        with self._lock:
            out: dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]
            out = {}
            for topic in self._topics.values():
                if topic.tenant_id != principal.tenant_id:
                    continue
                if partitions is not None and topic.name not in partitions:
                    continue
                asked = None if partitions is None else set(partitions[topic.name])
                for p in topic.partitions:
                    if (p.adding or p.removing) and (asked is None or p.index in asked):
                        out.setdefault(topic.name, {})[p.index] = (
                            tuple(p.replicas),
                            tuple(p.adding),
                            tuple(p.removing),
                        )
            return out

    def audit(
        self,
        principal: Principal,
        action: str,
        object_type: str,
        object_repr: str,
        after: dict[str, Any],
    ) -> None:
        with self._lock:
            after = {"principal": principal.name, **after}
            self._audit(principal, action, object_repr, object_type=object_type, after=after)

    # --- transactions -----------------------------------------------------------------------

    def load_transaction(self, tenant_id: int, transactional_id: str) -> TxnMetadata | None:
        with self._lock:
            return self._transactions.get((tenant_id, transactional_id))

    def save_transaction(self, txn: TxnMetadata) -> bool:
        with self._lock:
            if txn.tenant_id not in self._tenants:
                raise KeyError(f"no tenant {txn.tenant_id}")
            key = (txn.tenant_id, txn.transactional_id)
            stored = self._transactions.get(key)
            if (stored.version if stored is not None else -1) != txn.version - 1:
                return False
            self._transactions[key] = txn
            return True

    def list_transactions(self, tenant_id: int) -> list[TxnMetadata]:
        with self._lock:
            return [t for k, t in sorted(self._transactions.items()) if k[0] == tenant_id]

    def unfinished_transactions(self) -> list[TxnMetadata]:
        with self._lock:
            return [t for t in self._transactions.values() if t.state.unfinished]

    def stage_txn_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        group_id: str,
        offsets: list[OffsetRecord],
        check: Callable[[TxnMetadata | None], int],
    ) -> int:
        with self._lock:
            error = check(self._transactions.get((tenant_id, transactional_id)))
            if error:
                return error
            staged = self._staged_offsets.setdefault((tenant_id, group_id, producer_id), {})
            now_ms = int(self.clock() * 1000)
            for o in offsets:
                staged[(o.topic, o.partition)] = replace(o, commit_ms=o.commit_ms or now_ms)
            return 0

    def settle_txn_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        group_id: str,
        commit: bool,
        check: Callable[[TxnMetadata | None], bool],
    ) -> bool:
        with self._lock:
            if not check(self._transactions.get((tenant_id, transactional_id))):
                return False
            staged = self._staged_offsets.pop((tenant_id, group_id, producer_id), {})
            if commit and staged:
                self.commit_offsets(tenant_id, group_id, list(staged.values()))
            return True

    def pending_txn_partitions(self, tenant_id: int, group_id: str) -> set[tuple[str, int]]:
        with self._lock:
            return {
                tp
                for (tid, gid, _), staged in self._staged_offsets.items()
                if (tid, gid) == (tenant_id, group_id)
                for tp in staged
            }

    # --- client versions ------------------------------------------------------------------

    def report_clients(self, broker_id: int, uses: Sequence[ClientUse]) -> None:
        with self._lock:
            for use in uses:
                if use.tenant_id not in self._tenants:
                    continue
                key = use.identity
                had = self._client_uses.get(key)
                if had is not None:
                    use = replace(
                        had,
                        requests=had.requests + use.requests,
                        first_seen=min(had.first_seen, use.first_seen),
                        last_seen=max(had.last_seen, use.last_seen),
                    )
                self._client_uses[key] = use

    def reported_clients(self, tenant_id: int) -> list[ClientUse]:
        with self._lock:
            return [u for k, u in sorted(self._client_uses.items()) if k[0] == tenant_id]

    # --- usage ----------------------------------------------------------------------------

    def report_usage(self, broker_id: int, report: UsageReport) -> None:
        with self._lock:
            for row in report.rows:
                if row.tenant_id not in self._tenants:
                    continue
                key = (
                    broker_id,
                    report.incarnation,
                    row.hour,
                    row.tenant_id,
                    row.topic_id,
                    row.principal,
                )
                had = self._usage.get(key)
                if had is None or had[0] < report.seq:
                    self._usage[key] = (report.seq, row.values)

    def usage_totals(self, tenant_id: int) -> dict[str, int]:
        with self._lock:
            sums = [0] * len(USAGE_FIELDS)
            for key, (_, values) in self._usage.items():
                if key[3] == tenant_id:
                    sums = [a + b for a, b in zip(sums, values, strict=True)]
            return dict(zip(USAGE_FIELDS, sums, strict=True))

    # --- consumer groups ------------------------------------------------------------------

    def load_group(self, tenant_id: int, group_id: str) -> GroupRecord | None:
        with self._lock:
            return self._groups.get((tenant_id, group_id))

    def save_group(self, record: GroupRecord) -> None:
        with self._lock:
            self._groups[(record.tenant_id, record.group_id)] = record

    def commit_offsets(self, tenant_id: int, group_id: str, offsets: list[OffsetRecord]) -> None:
        with self._lock:
            key = (tenant_id, group_id)
            if key not in self._groups:
                now_ms = int(self.clock() * 1000)
                self._groups[key] = GroupRecord(
                    tenant_id, group_id, GroupState.EMPTY, 0, None, None, None, (), now_ms
                )
            names = {t.name for t in self._topics.values() if t.tenant_id == tenant_id}
            stored = self._offsets.setdefault(key, {})
            for o in offsets:
                if o.topic in names:  # a topic deleted meanwhile: nothing to keep
                    commit_ms = o.commit_ms or int(self.clock() * 1000)
                    stored[(o.topic, o.partition)] = replace(o, commit_ms=commit_ms)

    def fetch_offsets(self, tenant_id: int, group_id: str) -> list[OffsetRecord]:
        with self._lock:
            return list(self._offsets.get((tenant_id, group_id), {}).values())

    def delete_offsets(
        self, tenant_id: int, group_id: str, partitions: list[tuple[str, int]]
    ) -> None:
        with self._lock:
            stored = self._offsets.get((tenant_id, group_id), {})
            for tp in partitions:
                stored.pop(tp, None)

    def list_groups(self, tenant_id: int) -> list[GroupRecord]:
        with self._lock:
            return [g for (t, _), g in sorted(self._groups.items()) if t == tenant_id]
