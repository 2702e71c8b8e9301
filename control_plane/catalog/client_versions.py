"""What the console and the API show of ``ClientVersion`` rows: one entry per client
identity (principal, client id, software) with the request versions it used, those this
broker refused, and those Kafka 4 no longer serves (KIP-896), so operators see who must
upgrade; and the pruning of rows not seen for a while."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from control_plane.catalog.models import ClientVersion
from control_plane.tenancy.models import Tenant
from data_plane.protocol.compat import KAFKA4_MIN_VERSION
from data_plane.protocol.messages import APIS


def api_name(key: int) -> str:
    api = APIS.get(key)
    return api.name if api is not None else f"API {key}"


@dataclass
class ApiUse:
    api_key: int
    api: str
    min_version: int
    max_version: int
    requests: int


@dataclass
class VersionUse:
    api_key: int
    api: str
    version: int
    requests: int


@dataclass
class ClientIdentity:
    tenant_slug: str
    principal: str
    client_id: str
    software_name: str
    software_version: str
    first_seen: datetime
    last_seen: datetime
    requests: int = 0
    apis: list[ApiUse] = field(default_factory=list)  # served, by API: the versions used
    unserved: list[VersionUse] = field(default_factory=list)  # answered UNSUPPORTED_VERSION
    kafka4_refuses: list[VersionUse] = field(default_factory=list)  # served here, not by 4.0

    @property
    def must_upgrade(self) -> bool:
        return bool(self.unserved or self.kafka4_refuses)


def identities(tenant: Tenant) -> list[ClientIdentity]:
    """The tenant's client identities, most recently seen first."""
    return _grouped(ClientVersion.objects.filter(tenant=tenant).select_related("tenant"))


def to_upgrade(limit: int = 200) -> list[ClientIdentity]:
    """Every tenant's identities that must upgrade, for operators: only the versions
    refused here or refused by Kafka 4 (KIP-896) are read, most recently seen first."""
    old = Q(served=False)
    for api_key, first in KAFKA4_MIN_VERSION.items():
        old |= Q(api_key=api_key, api_version__lt=first)
    return _grouped(ClientVersion.objects.filter(old).select_related("tenant"))[:limit]


def _grouped(rows: QuerySet[ClientVersion]) -> list[ClientIdentity]:
    found: dict[tuple[int, str, str, str, str], ClientIdentity] = {}
    for row in rows.order_by("api_key", "api_version"):
        key = (row.tenant_id, row.principal, row.client_id, row.software_name, row.software_version)
        who = found.get(key)
        if who is None:
            who = found[key] = ClientIdentity(
                row.tenant.slug, *key[1:], row.first_seen, row.last_seen
            )
        who.first_seen = min(who.first_seen, row.first_seen)
        who.last_seen = max(who.last_seen, row.last_seen)
        who.requests += row.requests
        name = api_name(row.api_key)
        if not row.served:
            who.unserved.append(VersionUse(row.api_key, name, row.api_version, row.requests))
            continue
        if row.api_version < KAFKA4_MIN_VERSION.get(row.api_key, 0):
            who.kafka4_refuses.append(VersionUse(row.api_key, name, row.api_version, row.requests))
        last = who.apis[-1] if who.apis else None
        if last is not None and last.api_key == row.api_key:
            last.min_version = min(last.min_version, row.api_version)
            last.max_version = max(last.max_version, row.api_version)
            last.requests += row.requests
        else:
            who.apis.append(
                ApiUse(row.api_key, name, row.api_version, row.api_version, row.requests)
            )
    return sorted(found.values(), key=lambda w: w.last_seen, reverse=True)


def prune(now: datetime | None = None) -> int:
    """Delete rows not seen for ``MILLRACE_CLIENT_VERSIONS_KEEP_DAYS``; how many."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.MILLRACE_CLIENT_VERSIONS_KEEP_DAYS)
    deleted, _ = ClientVersion.objects.filter(last_seen__lt=cutoff).delete()
    return deleted
