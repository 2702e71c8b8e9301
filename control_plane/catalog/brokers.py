"""The control plane as a Kafka client of its own brokers (the internal principal).

Used where only a broker knows the answer: log end offsets, the offset for a timestamp,
the timestamp of the next record a group will read. Every connection acts inside one
tenant (``data_plane.internal_auth``), so the broker scopes names exactly as it does for
that tenant's keys.
"""

from __future__ import annotations

from django.conf import settings

from control_plane.catalog.models import Broker
from control_plane.core.errors import Unavailable
from control_plane.tenancy.models import Tenant
from data_plane import internal_auth
from data_plane.client import ClusterClient, KafkaClientError

__all__ = ["KafkaClientError", "broker_client"]


def broker_client(tenant: Tenant, *, timeout: float = 5.0) -> ClusterClient:
    """A client for ``tenant`` bootstrapped from the live brokers; Unavailable if none."""
    brokers = list(
        Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).values_list("host", "port")
    )
    if not brokers:
        raise Unavailable("no broker is running, so offsets cannot be read from the logs")
    return ClusterClient(
        brokers,
        username=internal_auth.username(tenant.slug),
        password=internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
        mechanism=internal_auth.MECHANISM,
        client_id="millrace-control-plane",
        timeout=timeout,
    )
