"""Telling brokers that metadata changed (topics, and the keys and ACLs they enforce).

On Postgres a change is announced with ``pg_notify`` on the ``millrace_metadata``
channel after the transaction commits; brokers LISTEN and refresh their cache (Step 3).
Where LISTEN/NOTIFY is missing (the embedded SQLite default) brokers poll instead, so
this is a documented no-op there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction

CHANNEL = "millrace_metadata"
logger = logging.getLogger("millrace.notify")


def key_group(key_id: str) -> str:
    """The channel-layer group the WebSocket streams of an API key join."""
    return f"apikey.{key_id}"


def _send(payload: dict[str, Any]) -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, json.dumps(payload)])


def notify_metadata_changed(kind: str, **fields: Any) -> None:
    """Announce ``kind`` (e.g. ``topic.created``) once the current transaction commits."""
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
