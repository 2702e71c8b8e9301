"""What the platform's Connect fleet (``data_plane.connect.fleet``) asks the control
plane: which tenants use Connect, whether a connector may run as a key, and how to reach
the brokers."""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from django.db import close_old_connections

from control_plane.access.models import ApiKey
from control_plane.catalog.models import Topic
from control_plane.streams.kafka import bootstrap_servers
from data_plane import internal_auth


def tenants_using_connect() -> list[str]:
    """Tenants whose Connect cluster exists: its config topic was made (the REST API and
    the console make it with the first connector)."""
    close_old_connections()  # a long-lived thread: a dropped connection is replaced
    configs = internal_auth.CONNECT_TOPICS[0]
    return sorted(
        Topic.objects.filter(name=configs).values_list("tenant__slug", flat=True).distinct()
    )


def key_error(tenant_slug: str, key_id: str) -> str | None:
    """Why a connector of ``tenant_slug`` may not run as ``key_id`` (None: it may)."""
    close_old_connections()  # a long-lived thread: a dropped connection is replaced
    key = ApiKey.objects.select_related("tenant").filter(key_id=key_id).first()
    if key is None or key.tenant.slug != tenant_slug:
        return f"{key_id!r} is not an API key of this tenant"
    if key.state != "active":
        return f"API key {key_id} is {key.state}"
    return None


def fleet_base(extra: Mapping[str, str]) -> dict[str, str]:
    """The fleet's client settings: the live brokers, the internal secret's password
    (proved with SCRAM, never sent), and the operator's extra worker settings."""
    servers = extra.get("bootstrap.servers") or ",".join(bootstrap_servers())
    return {
        "file.root": settings.MILLRACE_CONNECT_FILE_ROOT,
        **{k: v for k, v in extra.items() if not k.startswith(("sasl.", "fleet."))},
        "bootstrap.servers": servers,
        "security.protocol": extra.get("security.protocol", "SASL_PLAINTEXT"),
        "sasl.password": internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
    }
