"""What brokers see, read from the Django models: snapshots, and changes after a version.

A snapshot reads every tenant, topic, partition, ACL, usable key and live broker (at
start, and when a broker's version fell out of the change log). ``changes_since`` reads the
change log (``core.MetadataChange``) after a version and re-reads only the scopes its rows
name: the topics (with their partitions), and for each tenant named its row, its ACLs or
its usable keys. The live broker list depends on the clock (leases lapse without a commit),
so ``live_brokers`` reads it on its own; it is a handful of rows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, QuerySet

from control_plane.access.models import Acl, ApiKey
from control_plane.brokerlink.connections import fresh_connection
from control_plane.catalog.models import Broker, Partition, Topic
from control_plane.core.models import MetadataChange, MetadataScope
from control_plane.core.notify import CHANNEL
from control_plane.tenancy.models import Tenant
from control_plane.tenancy.services import tenant_client_quotas
from data_plane.acl import AclBinding
from data_plane.metadata.model import (
    BrokerInfo,
    KeyExpiry,
    MetadataDelta,
    MetadataSnapshot,
    PartitionInfo,
    TenantInfo,
    TopicInfo,
)

logger = logging.getLogger(__name__)

# A delta naming more topics than this is read as a full snapshot instead (one query per
# table beats an IN list of that many ids).
MAX_DELTA_TOPICS = 5_000


def tenant_info(t: Tenant) -> TenantInfo:
    """The tenant as brokers see it; ``t`` comes with its client quotas prefetched
    (:func:`_tenants_with_quotas`), so many tenants cost one more query, not one each."""
    return TenantInfo(
        t.pk,
        t.slug,
        t.produce_byte_rate,
        t.fetch_byte_rate,
        t.max_partitions,
        t.max_storage_bytes,
        t.default_partitions,
        tenant_client_quotas(t.client_quotas.all()),
        suspended=t.suspension_reason if t.suspended_at is not None else None,
        reads_until_ms=int(t.reads_until.timestamp() * 1000) if t.reads_until else 0,
        max_connections=t.max_connections,
        max_retention_ms=t.max_retention_ms,
    )


def _tenants_with_quotas() -> QuerySet[Tenant]:
    return Tenant.objects.prefetch_related("client_quotas")


def _partition_info(p: Partition) -> PartitionInfo:
    return PartitionInfo(
        p.index, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr), p.partition_epoch
    )


def _topic_infos(topics: Iterable[Topic], partitions: Iterable[Partition]) -> list[TopicInfo]:
    by_topic: dict[int, list[PartitionInfo]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic_id, []).append(_partition_info(p))
    return [
        TopicInfo(t.tenant_id, t.name, t.topic_id, tuple(by_topic.get(t.pk, ())), dict(t.configs))
        for t in topics
    ]


def _acls(rows: Iterable[Acl]) -> dict[int, list[AclBinding]]:
    acls: dict[int, list[AclBinding]] = {}
    for acl in rows:
        acls.setdefault(acl.tenant_id, []).append(acl.to_binding())
    return acls


def _keys(tenant_ids: Iterable[int] | None = None) -> dict[int, dict[str, float | None]]:
    """Usable keys (not revoked, not expired) by tenant, with their expiry."""
    rows = ApiKey.objects.active()
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=list(tenant_ids))
    keys: dict[int, dict[str, float | None]] = {}
    for tenant_id, key_id, expires_at in rows.values_list("tenant_id", "key_id", "expires_at"):
        keys.setdefault(tenant_id, {})[key_id] = expires_at.timestamp() if expires_at else None
    return keys


class DjangoMetadataSource:
    """:class:`data_plane.broker.ports.MetadataSource` over the Django models."""

    def __init__(self) -> None:
        self._listener: Any = None
        self._listen_lock = threading.Lock()

    @staticmethod
    def _newest() -> int:
        return MetadataChange.objects.aggregate(v=Max("version"))["v"] or 0

    def metadata_version(self) -> int:
        fresh_connection()
        return self._newest()

    def live_brokers(self) -> Mapping[int, BrokerInfo]:
        fresh_connection()
        return self._live_brokers()

    @staticmethod
    def _live_brokers() -> dict[int, BrokerInfo]:
        lease = settings.MILLRACE_BROKER_LEASE_SECONDS
        return {
            b.id: BrokerInfo(b.id, b.host, b.port, b.rack or None, b.tls_host or None, b.tls_port)
            for b in Broker.objects.live(lease)
        }

    def snapshot(self) -> MetadataSnapshot:
        fresh_connection()
        with transaction.atomic():
            # The version first: what is read after it is at least as new.
            version = self._newest()
            tenants = {t.pk: tenant_info(t) for t in _tenants_with_quotas()}
            topics: dict[int, dict[str, TopicInfo]] = {}
            for info in _topic_infos(
                Topic.objects.all(), Partition.objects.order_by("topic_id", "index")
            ):
                topics.setdefault(info.tenant_id, {})[info.name] = info
            acls = _acls(Acl.objects.select_related("service_account"))
            keys = _keys()
            brokers = self._live_brokers()
        return MetadataSnapshot(
            tenants=tenants,
            topics=topics,
            acls={k: tuple(v) for k, v in acls.items()},
            brokers=brokers,
            active_keys=frozenset(k for ks in keys.values() for k in ks),
            cluster_id=settings.MILLRACE_CLUSTER_ID,
            version=version,
            keys=keys,
        )

    def changes_since(self, version: int) -> MetadataDelta | None:
        fresh_connection()
        with transaction.atomic():
            span = MetadataChange.objects.aggregate(oldest=Min("version"), newest=Max("version"))
            oldest, newest = span["oldest"], span["newest"] or 0
            if version > newest or (oldest is not None and version < oldest - 1):
                return None  # another store, or pruned past it: read a snapshot
            rows = MetadataChange.objects.filter(version__gt=version, version__lte=newest)
            topic_ids: set[uuid.UUID] = set()
            scopes: dict[str, set[int]] = {
                MetadataScope.TENANT: set(),
                MetadataScope.ACLS: set(),
                MetadataScope.KEYS: set(),
            }
            brokers = False
            for scope, tenant_id, topic_id in rows.values_list("scope", "tenant_id", "topic_id"):
                if scope == MetadataScope.TOPIC and topic_id is not None:
                    topic_ids.add(topic_id)
                elif scope in scopes and tenant_id is not None:
                    scopes[scope].add(tenant_id)
                elif scope == MetadataScope.BROKERS:
                    brokers = True
                else:
                    return None
            if len(topic_ids) > MAX_DELTA_TOPICS:
                return None
            return MetadataDelta(
                version=newest,
                tenants=self._tenants(scopes[MetadataScope.TENANT]),
                topics=self._topics(topic_ids),
                acls=self._tenant_acls(scopes[MetadataScope.ACLS]),
                keys=self._tenant_keys(scopes[MetadataScope.KEYS]),
                brokers=brokers,
            )

    @staticmethod
    def _tenants(ids: set[int]) -> dict[int, TenantInfo | None]:
        found = (
            {t.pk: tenant_info(t) for t in _tenants_with_quotas().filter(pk__in=ids)} if ids else {}
        )
        return {tenant_id: found.get(tenant_id) for tenant_id in ids}

    @staticmethod
    def _topics(ids: set[uuid.UUID]) -> dict[uuid.UUID, TopicInfo | None]:
        if not ids:
            return {}
        infos = _topic_infos(
            Topic.objects.filter(topic_id__in=ids),
            Partition.objects.filter(topic__topic_id__in=ids).order_by("topic_id", "index"),
        )
        found = {t.topic_id: t for t in infos}
        return {topic_id: found.get(topic_id) for topic_id in ids}

    @staticmethod
    def _tenant_acls(ids: set[int]) -> dict[int, tuple[AclBinding, ...]]:
        if not ids:
            return {}
        acls = _acls(Acl.objects.filter(tenant_id__in=ids).select_related("service_account"))
        return {tenant_id: tuple(acls.get(tenant_id, ())) for tenant_id in ids}

    @staticmethod
    def _tenant_keys(ids: set[int]) -> dict[int, KeyExpiry]:
        keys = _keys(ids) if ids else {}
        return {tenant_id: keys.get(tenant_id, {}) for tenant_id in ids}

    def stop_listening(self) -> None:
        with self._listen_lock:
            if self._listener is not None:
                with contextlib.suppress(Exception):
                    self._listener.close()
                self._listener = None

    def wait_for_change(self, timeout: float) -> bool:
        """LISTEN on Postgres; elsewhere just wait (the caller polls)."""
        if connection.vendor != "postgresql":
            time.sleep(timeout)
            return False
        with self._listen_lock:
            if self._listener is None:
                import psycopg

                params = connection.get_connection_params()
                params.pop("cursor_factory", None)
                params.pop("context", None)
                self._listener = psycopg.connect(**params, autocommit=True)
                self._listener.execute(f"LISTEN {CHANNEL}")
            try:
                got = any(True for _ in self._listener.notifies(timeout=timeout, stop_after=1))
            except Exception:
                logger.warning("metadata LISTEN connection failed; polling", exc_info=True)
                with contextlib.suppress(Exception):
                    self._listener.close()
                self._listener = None
                time.sleep(timeout)
                return False
            if got:  # drain a burst of notifications into one refresh
                for _ in self._listener.notifies(timeout=0.05):
                    pass
            return got
