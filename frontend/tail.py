"""The console's live tail: the WebSocket stream protocol for a signed-in member.

``/ws/console/t/<tenant>/stream`` speaks the same frames as the data API's stream
(docs/streams.md) but authenticates with the console's session instead of an API key:

* the route sits behind Channels' session middleware and an Origin check
  (``AllowedHostsOriginValidator``), so a page on another site cannot open it with a
  visitor's cookie;
* the socket acts on the brokers as the member's console principal
  (``internal_auth.console_username``), whose rights the broker derives from the role;
* it reads topics from positions (no consumer group: tailing must not move anyone's
  offsets) and, for developers and up, produces;
* it closes when the membership ends, and when the session that opened it ends: at once
  on logout (a channel-layer message to the session's group), and at the next check
  (every ``MILLRACE_WS_KEY_CHECK_SECONDS``) when the session is gone or no longer valid
  for the user (a password change, the user deactivated).

A subscription may carry a ``filter`` (``{"key": ..., "text": ...}``, the message
browser's rules, :class:`~data_plane.records.filter.RecordFilter`): records that do not
match are not sent and need no acknowledgement. One partition is chosen with the
stream's ``partitions`` list.

Pausing is the stream's own flow control: a paused page stops acknowledging, so the
server stops after ``window`` records and holds no more than that for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from importlib import import_module
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.utils.crypto import constant_time_compare

from control_plane.core.request_context import bind_tenant, bind_user
from control_plane.streams.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED, StreamConsumer
from control_plane.streams.kafka import Delegation
from control_plane.streams.session import FrameError
from control_plane.tenancy.models import Membership, Role
from data_plane.acl import Operation, ResourceType
from data_plane.records.filter import RecordFilter

READS = (Operation.READ, Operation.DESCRIBE)
MAX_NEEDLE = 1_000


def _record_filter(raw: Any) -> RecordFilter | None:
    """The subscription's ``filter``: ``{"key": ..., "text": ...}``, the message browser's
    "key contains" and "value or header contains" (either may be left out)."""
    if raw is None:
        return None
    if (
        not isinstance(raw, dict)
        or not set(raw) <= {"key", "text"}
        or not all(isinstance(v, str) and len(v) <= MAX_NEEDLE for v in raw.values())
    ):
        raise FrameError(
            "bad_frame", f"filter is {{key, text}}: strings of at most {MAX_NEEDLE} characters"
        )
    flt = RecordFilter.of(raw.get("key", ""), raw.get("text", ""))
    return flt or None


@database_sync_to_async
def _membership(user_id: int, tenant_slug: str) -> Membership | None:
    return (
        Membership.objects.select_related("tenant", "user")
        .filter(user_id=user_id, tenant__slug=tenant_slug, user__is_active=True)
        .first()
    )


def session_group(session_key: str) -> str:
    """The channel-layer group of a console session's sockets (named by a digest: the
    session key itself is a credential)."""
    return "console-session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def end_session_sockets(session_key: str | None) -> None:
    """Close every live tail opened by this session (called on logout)."""
    layer = get_channel_layer()
    if layer is None or not session_key:
        return
    async_to_sync(layer.group_send)(session_group(session_key), {"type": "session.ended"})


@database_sync_to_async
def _session_valid(session_key: str | None, user_id: int) -> bool:
    """The session still exists, still signs in this user, and its password hash still
    matches (it changes with the password)."""
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    data = store.load()
    if str(data.get(SESSION_KEY)) != str(user_id):
        return False
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    return user is not None and constant_time_compare(
        data.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()
    )


class ConsoleTail(StreamConsumer):
    role = ""
    session_key: str | None = None

    async def identify(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.fail(CLOSE_UNAUTHENTICATED, "unauthenticated", "sign in to the console")
            return
        membership = await _membership(user.pk, self.tenant_slug)
        if membership is None:
            # As on every console page: another tenant does not exist for this user.
            await self.fail(CLOSE_NOT_FOUND, "not_found", f"tenant {self.tenant_slug!r} not found")
            return
        self.user_id = user.pk
        bind_tenant(self.tenant_slug)
        bind_user(user)
        self.role = membership.role
        self.who = Delegation.console(self.tenant_slug, user.pk)
        self.tenant_id = membership.tenant_id
        self.principal_name = f"{user.get_username()} ({membership.role})"
        session = self.scope.get("session")
        self.session_key = session.session_key if session is not None else None
        if self.session_key and self.channel_layer is not None:
            await self.channel_layer.group_add(session_group(self.session_key), self.channel_name)
        self.tasks.append(asyncio.create_task(self._watch_membership()))
        await self.send_json(
            {"type": "authenticated", "tenant": self.tenant_slug, "role": membership.role}
        )

    async def _watch_membership(self) -> None:
        while True:
            await asyncio.sleep(settings.MILLRACE_WS_KEY_CHECK_SECONDS)
            membership = await _membership(self.user_id, self.tenant_slug)
            if membership is None:
                await self.fail(
                    CLOSE_UNAUTHENTICATED, "membership_ended", "you are no longer a member"
                )
                return
            if not await _session_valid(self.session_key, self.user_id):
                await self.session_ended({})
                return
            self.role = membership.role

    async def session_ended(self, event: dict[str, Any]) -> None:
        """Channel-layer message ``session.ended`` (logout) or the periodic check."""
        await self.fail(CLOSE_UNAUTHENTICATED, "session_ended", "the console session ended")

    async def disconnect(self, code: int) -> None:
        if self.session_key and self.channel_layer is not None:
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(
                    session_group(self.session_key), self.channel_name
                )
        await super().disconnect(code)

    async def _may(self, operation: Operation, rtype: ResourceType, name: str) -> bool:
        if rtype is not ResourceType.TOPIC:
            return False
        if operation in READS:
            return True
        return operation is Operation.WRITE and Role.at_least(self.role, Role.DEVELOPER)

    async def subscribe(self, frame: dict[str, Any]) -> None:
        if frame.get("group") is not None:
            raise FrameError(
                "bad_frame", "the console tails from positions; consumer groups are for API keys"
            )
        self.record_filter = _record_filter(frame.get("filter"))
        await super().subscribe(frame)
