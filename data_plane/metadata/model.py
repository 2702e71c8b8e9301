"""Immutable metadata the broker works from, replaced as a whole (copy-on-write).

A :class:`MetadataSnapshot` is replaced, never mutated, so request handlers read a
consistent view without locks. A new snapshot is either read whole from the store or built
from the previous one and a :class:`MetadataDelta` (``metadata_cache.py``), sharing the
maps of every tenant the delta does not touch.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from data_plane.acl import AclBinding, Operation, ResourceType
from data_plane.client_quotas import ClientQuota


@dataclass(frozen=True)
class Principal:
    """Who a connection authenticated as: an API key of a service account in a tenant."""

    tenant_id: int
    tenant_slug: str
    name: str  # "User:<service account>"
    key_id: str | None  # None for the optional unauthenticated listener
    # Millrace's own services (data_plane.internal_auth): read and describe only.
    internal: bool = False
    # Another broker (replication): no tenant; names topics by topic id.
    broker: bool = False
    # An operator acting in the tenant (internal_auth.operator_username): may place replicas.
    operator: bool = False
    # An internal principal's fixed rights, never widened by tenant ACLs; None means
    # internal_auth.ALLOWED. A console member's (internal_auth.console_username) depend on
    # the member's role.
    grants: frozenset[tuple[Operation, ResourceType]] | None = None
    # ... and, when set, only on these named topics and groups (the Connect fleet's).
    resources: frozenset[tuple[ResourceType, str]] | None = None

    @property
    def is_anonymous(self) -> bool:
        return self.key_id is None


@dataclass(frozen=True)
class PartitionInfo:
    index: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0


@dataclass(frozen=True)
class TopicInfo:
    tenant_id: int
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, Any]  # explicit overrides only

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True)
class TenantInfo:
    id: int
    slug: str
    produce_byte_rate: int
    fetch_byte_rate: int
    max_partitions: int
    max_storage_bytes: int
    default_partitions: int | None = None  # num.partitions; None: the broker's default
    # KIP-546 quotas on the tenant's users and client ids (a tenant setting: they change
    # with the tenant's metadata scope)
    client_quotas: tuple[ClientQuota, ...] = ()
    # Suspended by an operator: why (None: not suspended). Produce and new connections
    # are refused; connections open at the time may read until ``reads_until_ms`` (Unix
    # ms), then they are closed.
    suspended: str | None = None
    reads_until_ms: int = 0
    # The plan's limits brokers enforce besides the rates and storage above: authenticated
    # connections on each broker (0: only the broker's own limit), and the longest
    # retention its topics get (None: no ceiling).
    max_connections: int = 0
    max_retention_ms: int | None = None

    def suspension(self) -> str | None:
        """What a refused client is told, or None when the tenant is not suspended."""
        if self.suspended is None:
            return None
        reason = f": {self.suspended}" if self.suspended else ""
        return f"tenant {self.slug!r} is suspended{reason}"

    def reads_over(self, now_ms: int) -> bool:
        """Suspended, and the grace period for reading is over."""
        return self.suspended is not None and now_ms >= self.reads_until_ms


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: str | None
    tls_host: str | None = None
    tls_port: int | None = None

    def endpoint(self, tls: bool = False) -> tuple[str, int | None]:
        """(host, port) of the plain listener, or of the TLS one (port None: none)."""
        if tls:
            return self.tls_host or self.host, self.tls_port
        return self.host, self.port


# A tenant's usable API keys: key id -> when it expires (Unix seconds), None for never.
KeyExpiry = Mapping[str, float | None]


@dataclass(frozen=True)
class MetadataSnapshot:
    tenants: Mapping[int, TenantInfo] = field(default_factory=dict)
    # tenant id -> topic name -> topic
    topics: Mapping[int, Mapping[str, TopicInfo]] = field(default_factory=dict)
    acls: Mapping[int, tuple[AclBinding, ...]] = field(default_factory=dict)
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    # keys usable right now; a connection whose key drops out of this set is closed
    active_keys: frozenset[str] = frozenset()
    cluster_id: str = "millrace"
    # The store's metadata version this snapshot is at least as new as (0: unknown).
    version: int = 0
    # tenant id -> its usable keys and their expiry: what a per-tenant key delta replaces,
    # and how the cache drops a key at its expiry without asking the store.
    keys: Mapping[int, KeyExpiry] = field(default_factory=dict)
    # topic id -> topic; built from ``topics`` when not given (the cache passes the one it
    # updated incrementally), so ``topic_by_id`` is a dictionary lookup.
    topic_index: Mapping[uuid.UUID, TopicInfo] | None = field(
        default=None, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.topic_index is None:
            index = {t.topic_id: t for ts in self.topics.values() for t in ts.values()}
            object.__setattr__(self, "topic_index", index)

    def topic(self, tenant_id: int, name: str) -> TopicInfo | None:
        return self.topics.get(tenant_id, {}).get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        assert self.topic_index is not None  # set in __post_init__
        return self.topic_index.get(topic_id)

    def tenant_topics(self, tenant_id: int) -> Mapping[str, TopicInfo]:
        return self.topics.get(tenant_id, {})

    def tenant_acls(self, tenant_id: int) -> tuple[AclBinding, ...]:
        return self.acls.get(tenant_id, ())


@dataclass(frozen=True)
class MetadataDelta:
    """What changed after a metadata version: the re-read rows of the changed scopes only.

    Every mapping holds whole, current values for what it names (a tenant's row, a topic
    with all its partitions, all of a tenant's ACLs, all of a tenant's usable keys), so
    applying a delta twice, or a delta older than the snapshot, changes nothing wrong.
    """

    version: int  # the newest change this delta covers
    tenants: Mapping[int, TenantInfo | None] = field(default_factory=dict)  # None: gone
    topics: Mapping[uuid.UUID, TopicInfo | None] = field(default_factory=dict)  # None: deleted
    acls: Mapping[int, tuple[AclBinding, ...]] = field(default_factory=dict)
    keys: Mapping[int, KeyExpiry] = field(default_factory=dict)
    brokers: bool = False  # the broker list changed (registered, fenced, shutting down)

    @property
    def empty(self) -> bool:
        return not (self.tenants or self.topics or self.acls or self.keys or self.brokers)
