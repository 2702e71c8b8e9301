"""The broker's current metadata, kept up to date by versions and deltas (pure: no I/O of
its own, no asyncio, no Django).

``refresh(source)`` asks the store for its metadata version (one cheap read) and:

* does nothing to tenants and topics when the version has not moved;
* otherwise applies ``changes_since(version)``: a new :class:`MetadataSnapshot` is built
  copy-on-write, the changed topics, tenants, ACLs and keys replaced and every other
  tenant's maps shared with the previous snapshot (the outer per-tenant dictionaries are
  copied, a pointer per tenant; nothing of an untouched tenant is re-read or rebuilt);
* reads a full snapshot at the start, when the store can no longer give the changes (its
  change log was pruned past our version, or it is another store), on ``full=True``, and
  every ``full_refresh_seconds`` as a safety net against writes that bypassed the
  services (a shell, a restore).

Two things change without any commit, so the version cannot tell of them:

* **broker liveness**: a lease lapses when heartbeats stop. ``live_brokers()`` (a handful
  of rows) is read on every refresh and the broker map replaced when it differs;
* **key expiry**: a key's expiry time is in the snapshot, so the cache drops the key from
  ``active_keys`` itself when its time comes (a heap of expiry times; no store read).

Thread-safety: ``refresh`` is called by one task or thread at a time (the broker's refresh
lock); ``snapshot`` may be read from anywhere (one reference, replaced whole).
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from data_plane.broker.ports import MetadataSource
from data_plane.metadata.model import KeyExpiry, MetadataDelta, MetadataSnapshot, TopicInfo


@dataclass(frozen=True)
class Refresh:
    """What one refresh changed (for the broker to reconcile only that)."""

    full: bool = False  # a whole snapshot was read: anything may have changed
    topics: frozenset[uuid.UUID] = frozenset()  # created, changed or deleted
    tenants: frozenset[int] = frozenset()  # their settings, ACLs or keys changed (or gone)
    brokers: bool = False  # the live broker list changed
    keys: bool = False  # active_keys changed (a key delta, or a key expired)

    @property
    def changed(self) -> bool:
        return self.full or bool(self.topics or self.tenants) or self.brokers or self.keys


@dataclass
class _Build:
    """A snapshot under construction: copies of the outer maps, made on first write."""

    base: MetadataSnapshot
    copied: dict[str, dict[Any, Any]] = field(default_factory=dict)
    inner: dict[int, dict[str, TopicInfo]] = field(default_factory=dict)

    def outer(self, name: str) -> dict[Any, Any]:
        if name not in self.copied:
            self.copied[name] = dict(getattr(self.base, name))
        return self.copied[name]

    def tenant_topics(self, tenant_id: int) -> dict[str, TopicInfo]:
        """The tenant's topic map, copied once (other tenants' maps stay shared)."""
        if tenant_id not in self.inner:
            topics = self.outer("topics")
            self.inner[tenant_id] = dict(topics.get(tenant_id, {}))
            topics[tenant_id] = self.inner[tenant_id]
        return self.inner[tenant_id]


def apply_delta(
    snapshot: MetadataSnapshot, delta: MetadataDelta, now: float | None = None
) -> MetadataSnapshot:
    """The snapshot with the delta applied; untouched tenants' maps are shared.

    ``now`` (Unix seconds): keys of the delta already expired then are not active.
    """
    b = _Build(snapshot)
    index: dict[uuid.UUID, TopicInfo] | None = None
    if delta.topics:
        assert snapshot.topic_index is not None
        index = dict(snapshot.topic_index)
        for topic_id, info in delta.topics.items():
            old = index.pop(topic_id, None)
            if old is not None:
                b.tenant_topics(old.tenant_id).pop(old.name, None)
            if info is not None:
                replaced = b.tenant_topics(info.tenant_id).get(info.name)
                if replaced is not None:  # a name reused by a new topic id
                    index.pop(replaced.topic_id, None)
                b.tenant_topics(info.tenant_id)[info.name] = info
                index[topic_id] = info
    for tenant_id, bindings in delta.acls.items():
        acls = b.outer("acls")
        if bindings:
            acls[tenant_id] = bindings
        else:
            acls.pop(tenant_id, None)
    gone_keys: set[str] = set()
    new_keys: set[str] = set()
    for tenant_id, tenant_keys in delta.keys.items():
        keys = b.outer("keys")
        gone_keys.update(keys.get(tenant_id, {}))
        usable = {k: e for k, e in tenant_keys.items() if e is None or now is None or e > now}
        new_keys.update(usable)
        if usable:
            keys[tenant_id] = usable
        else:
            keys.pop(tenant_id, None)
    for tenant_id, tenant in delta.tenants.items():
        tenants = b.outer("tenants")
        if tenant is not None:
            tenants[tenant_id] = tenant
            continue
        # The tenant is gone, and everything in it.
        tenants.pop(tenant_id, None)
        dropped = b.outer("topics").pop(tenant_id, None) or {}
        b.inner.pop(tenant_id, None)
        if dropped:
            if index is None:
                assert snapshot.topic_index is not None
                index = dict(snapshot.topic_index)
            for topic in dropped.values():
                index.pop(topic.topic_id, None)
        b.outer("acls").pop(tenant_id, None)
        gone_keys.update(b.outer("keys").pop(tenant_id, None) or {})
    for tenant_id, topics in b.inner.items():
        if not topics:
            b.outer("topics").pop(tenant_id, None)
    active = snapshot.active_keys
    if gone_keys or new_keys:
        active = (active - gone_keys) | new_keys
    return replace(
        snapshot,
        tenants=b.copied.get("tenants", snapshot.tenants),
        topics=b.copied.get("topics", snapshot.topics),
        acls=b.copied.get("acls", snapshot.acls),
        keys=b.copied.get("keys", snapshot.keys),
        version=max(snapshot.version, delta.version),
        active_keys=active,
        topic_index=index if index is not None else snapshot.topic_index,
    )


def _unassigned(topic: TopicInfo) -> bool:
    return any(not p.replicas for p in topic.partitions)


class MetadataCache:
    """The current :class:`MetadataSnapshot` and how to bring it up to date."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        full_refresh_seconds: float | None = 300.0,
    ) -> None:
        self._clock = clock
        self.full_refresh_seconds = full_refresh_seconds
        self._snapshot = MetadataSnapshot()
        self._loaded_at: float | None = None
        self._unassigned: set[uuid.UUID] = set()
        self._expiries: list[tuple[float, int, str]] = []  # (expires at, tenant, key id)

    @property
    def snapshot(self) -> MetadataSnapshot:
        return self._snapshot

    @property
    def unassigned_topics(self) -> frozenset[uuid.UUID]:
        """Topics with partitions not placed on brokers yet (kept up to date by deltas, so
        the broker need not scan every partition to know)."""
        return frozenset(self._unassigned)

    def refresh(self, source: MetadataSource, *, full: bool = False) -> Refresh:
        now = self._clock()
        stale = (
            self.full_refresh_seconds is not None
            and self._loaded_at is not None
            and now - self._loaded_at >= self.full_refresh_seconds
        )
        if full or stale or self._loaded_at is None:
            return self._load(source, now)
        snapshot = self._snapshot
        result = Refresh()
        version = source.metadata_version()
        if version != snapshot.version:
            delta = source.changes_since(snapshot.version)
            if delta is None:
                return self._load(source, now)
            snapshot = apply_delta(snapshot, delta, now)
            self._note_topics(snapshot, delta.topics)
            self._note_keys(delta.keys)
            result = Refresh(
                topics=frozenset(delta.topics),
                tenants=frozenset(delta.tenants) | frozenset(delta.acls) | frozenset(delta.keys),
                keys=snapshot.active_keys is not self._snapshot.active_keys,
            )
        brokers = source.live_brokers()
        if brokers != snapshot.brokers:
            snapshot = replace(snapshot, brokers=dict(brokers))
            result = replace(result, brokers=True)
        expired, snapshot = self._expire(snapshot, now)
        if expired:
            result = replace(result, keys=True, tenants=result.tenants | expired)
        self._snapshot = snapshot
        return result

    def _load(self, source: MetadataSource, now: float) -> Refresh:
        snapshot = source.snapshot()
        self._unassigned = {
            t.topic_id for ts in snapshot.topics.values() for t in ts.values() if _unassigned(t)
        }
        self._expiries = []
        self._note_keys(snapshot.keys)
        _, snapshot = self._expire(snapshot, now)
        self._snapshot = snapshot
        self._loaded_at = now
        return Refresh(full=True)

    def _note_topics(self, snapshot: MetadataSnapshot, changed: Mapping[uuid.UUID, object]) -> None:
        for topic_id in changed:
            topic = snapshot.topic_by_id(topic_id)
            if topic is not None and _unassigned(topic):
                self._unassigned.add(topic_id)
            else:
                self._unassigned.discard(topic_id)

    def _note_keys(self, keys: Mapping[int, KeyExpiry]) -> None:
        for tenant_id, tenant_keys in keys.items():
            for key_id, expires_at in tenant_keys.items():
                if expires_at is not None:
                    heapq.heappush(self._expiries, (expires_at, tenant_id, key_id))

    def _expire(
        self, snapshot: MetadataSnapshot, now: float
    ) -> tuple[frozenset[int], MetadataSnapshot]:
        """Drop keys whose expiry has come; (tenants that lost keys, the snapshot)."""
        due: dict[int, set[str]] = {}
        while self._expiries and self._expiries[0][0] <= now:
            expires_at, tenant_id, key_id = heapq.heappop(self._expiries)
            # Still that key with that expiry (not revoked or renewed since)?
            if snapshot.keys.get(tenant_id, {}).get(key_id, None) == expires_at:
                due.setdefault(tenant_id, set()).add(key_id)
        if not due:
            return frozenset(), snapshot
        keys = dict(snapshot.keys)
        for tenant_id, key_ids in due.items():
            left = {k: e for k, e in keys[tenant_id].items() if k not in key_ids}
            if left:
                keys[tenant_id] = left
            else:
                del keys[tenant_id]
        gone = {k for key_ids in due.values() for k in key_ids}
        return frozenset(due), replace(snapshot, keys=keys, active_keys=snapshot.active_keys - gone)
