"""Telling brokers that metadata changed (tenants, topics, the keys and ACLs they enforce,
the broker list).

Every change is recorded twice:

* in the change log (:class:`control_plane.core.models.MetadataChange`), in the same
  transaction, one row per scope it touches: the metadata version brokers compare and the
  list of what to re-read (``control_plane.brokerlink``). This works on every database.
* on Postgres, announced with ``pg_notify`` on the ``millrace_metadata`` channel after the
  transaction commits, so brokers LISTENing wake at once. Where LISTEN/NOTIFY is missing
  (the embedded SQLite default) brokers poll the version instead.

Every service that changes what brokers see calls ``notify_metadata_changed``; the kind
names the scope (``topic.*`` and ``partition.*`` a topic, ``access.acls_changed`` a
tenant's ACLs, ``access.api_key*`` its keys, ``tenant.*`` its settings, ``broker.*`` the
broker list). An unknown kind makes brokers re-read everything, which is slow, never wrong.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from control_plane.core.models import MetadataChange, MetadataScope

CHANNEL = "millrace_metadata"
logger = logging.getLogger("millrace.notify")
# Prune the change log on one write in this many (rows older than the retention go).
PRUNE_EVERY = 256


def key_group(key_id: str) -> str:
    """The channel-layer group the WebSocket streams of an API key join."""
    return f"apikey.{key_id}"


def _send(payload: dict[str, Any]) -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, json.dumps(payload)])


def scopes_of(kind: str) -> tuple[str, ...]:
    """The change-log scopes a change of this kind touches."""
    if kind.startswith(("topic.", "partition.")):
        return (MetadataScope.TOPIC,)
    if kind == "access.acls_changed":
        return (MetadataScope.ACLS,)
    if kind.startswith("access.api_key"):
        return (MetadataScope.KEYS,)
    if kind == "access.service_account_deleted":  # its keys and its ACLs go with it
        return (MetadataScope.KEYS, MetadataScope.ACLS)
    if kind.startswith("tenant."):
        return (MetadataScope.TENANT,)
    if kind.startswith("broker."):
        return (MetadataScope.BROKERS,)
    return (MetadataScope.ALL,)


def record_metadata_change(kind: str, **fields: Any) -> None:
    """Write the change-log rows of ``kind`` in the current transaction.

    ``tenant`` (an id) is needed for tenant scopes, ``topic_id`` for topic ones; a scope
    missing what it needs is recorded as ``all`` (correct, only slower for brokers).
    """
    tenant = fields.get("tenant")
    topic_id = fields.get("topic_id")
    with transaction.atomic():
        for scope in scopes_of(kind):
            if scope == MetadataScope.TOPIC and topic_id is None:
                scope = MetadataScope.ALL
            elif scope in (MetadataScope.ACLS, MetadataScope.KEYS, MetadataScope.TENANT):
                if tenant is None:
                    scope = MetadataScope.ALL
            row = MetadataChange.objects.create(
                kind=kind[:64], scope=scope, tenant_id=tenant, topic_id=topic_id
            )
            if connection.vendor != "postgresql":
                # Writers are serialized here (SQLite holds its write lock from the insert
                # to the commit): the next version now is the next in commit order. On
                # Postgres the commit-time trigger stamps it (models.py).
                newest = MetadataChange.objects.aggregate(v=Max("version"))["v"] or 0
                MetadataChange.objects.filter(pk=row.pk).update(version=newest + 1)
            if row.pk % PRUNE_EVERY == 0:
                prune_metadata_changes()


def prune_metadata_changes() -> int:
    """Delete change-log rows older than ``MILLRACE_METADATA_CHANGE_RETENTION_SECONDS``,
    keeping the newest (the current version). A broker behind the oldest row left reads a
    full snapshot instead."""
    cutoff = timezone.now() - timedelta(seconds=settings.MILLRACE_METADATA_CHANGE_RETENTION_SECONDS)
    newest = MetadataChange.objects.aggregate(newest=Max("version"))["newest"]
    if newest is None:
        return 0
    deleted, _ = MetadataChange.objects.filter(created_at__lt=cutoff, version__lt=newest).delete()
    return deleted


def notify_metadata_changed(kind: str, **fields: Any) -> None:
    """Record ``kind`` (e.g. ``topic.created``) in the change log in the current
    transaction, and announce it once the transaction commits."""
    record_metadata_change(kind, **fields)
    payload = {"kind": kind, **fields}
    transaction.on_commit(lambda: _send(payload))


def _close_streams(key_ids: list[str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for key_id in key_ids:
        try:
            async_to_sync(layer.group_send)(key_group(key_id), {"type": "key.revoked"})
        except Exception:
            logger.warning("could not broadcast the revocation of %s", key_id, exc_info=True)


def announce_keys_closed(key_ids: Iterable[str]) -> None:
    """Once the transaction commits, close the open WebSocket streams of these keys.

    Over the channel layer (Redis in production, so every web process hears it); streams
    also re-check their key every few seconds, which covers expiry and a lost message.
    """
    ids = list(key_ids)
    if ids:
        transaction.on_commit(lambda: _close_streams(ids))
