"""Brokers' usage reports (``data_plane.broker.usage``), stored by ``control_plane.usage``."""

from __future__ import annotations

from control_plane.brokerlink.connections import fresh_connection
from control_plane.usage import services
from data_plane.broker.usage import UsageReport


class DjangoUsageReports:
    """:class:`data_plane.broker.ports.UsageReports` over ``usage.UsageRaw`` rows."""

    def report_usage(self, broker_id: int, report: UsageReport) -> None:
        fresh_connection()
        services.ingest(broker_id, report)

    def usage_totals(self, tenant_id: int) -> dict[str, int]:
        fresh_connection()
        return services.raw_totals(tenant_id)
