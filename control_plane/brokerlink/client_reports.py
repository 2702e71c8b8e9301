"""Brokers' reports of the client software and request versions tenants use, kept in
``catalog.ClientVersion`` for the console (``data_plane.broker.client_versions``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from django.db import transaction

from control_plane.brokerlink.connections import fresh_connection
from control_plane.catalog.models import CLIENT_VERSION_IDENTITY as _IDENTITY
from control_plane.catalog.models import ClientVersion
from control_plane.tenancy.models import Tenant
from data_plane.broker.client_versions import ClientUse


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


class DjangoClientReports:
    """:class:`data_plane.broker.ports.ClientReports` over ``ClientVersion`` rows."""

    def report_clients(self, broker_id: int, uses: Sequence[ClientUse]) -> None:
        fresh_connection()
        if not uses:
            return
        with transaction.atomic():
            # The tenants' rows locked: brokers reporting at once add up one at a time
            # (a deleted tenant's uses are dropped).
            tenants = set(
                Tenant.objects.select_for_update()
                .filter(pk__in={u.tenant_id for u in uses})
                .values_list("pk", flat=True)
            )
            wanted = [u for u in uses if u.tenant_id in tenants]
            if not wanted:
                return
            existing = {
                (row.tenant_id, *(getattr(row, f) for f in _IDENTITY)): row
                for row in ClientVersion.objects.filter(
                    tenant_id__in={u.tenant_id for u in wanted},
                    principal__in={u.principal for u in wanted},
                    client_id__in={u.client_id for u in wanted},
                )
            }
            changed, created = [], []
            for use in wanted:
                key = use.identity
                row = existing.get(key)
                if row is None:
                    row = ClientVersion(
                        tenant_id=use.tenant_id,
                        **{f: getattr(use, f) for f in _IDENTITY},
                        requests=use.requests,
                        first_seen=_at(use.first_seen),
                        last_seen=_at(use.last_seen),
                        last_broker=broker_id,
                    )
                    existing[key] = row
                    created.append(row)
                    continue
                row.requests += use.requests
                row.first_seen = min(row.first_seen, _at(use.first_seen))
                row.last_seen = max(row.last_seen, _at(use.last_seen))
                row.last_broker = broker_id
                if row.pk is not None:
                    changed.append(row)
            ClientVersion.objects.bulk_create(created)
            ClientVersion.objects.bulk_update(
                changed, ["requests", "first_seen", "last_seen", "last_broker"]
            )

    def reported_clients(self, tenant_id: int) -> list[ClientUse]:
        fresh_connection()
        rows = ClientVersion.objects.filter(tenant_id=tenant_id).order_by(
            "principal",
            "client_id",
            "software_name",
            "software_version",
            "api_key",
            "api_version",
            "served",
        )
        return [
            ClientUse(
                tenant_id=row.tenant_id,
                **{f: getattr(row, f) for f in _IDENTITY},
                requests=row.requests,
                first_seen=row.first_seen.timestamp(),
                last_seen=row.last_seen.timestamp(),
            )
            for row in rows
        ]
