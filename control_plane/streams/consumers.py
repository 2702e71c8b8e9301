"""WebSocket streams (``/ws/v1/tenants/<tenant>/stream``): consume and produce over one socket.

The protocol is JSON text frames, documented with examples in docs/streams.md:

* authenticate with the ``Authorization`` header of the upgrade request (Basic or Bearer,
  as the REST API) or with a first ``{"type": "auth", ...}`` frame; credentials in the URL
  are refused, since URLs end up in logs;
* ``subscribe`` once: in a consumer ``group`` (the socket is a group member like any
  Kafka client and rebalances with them) or from explicit positions with no group;
* the server pushes ``records`` frames while the client has window left: at most
  ``window`` records are delivered and not yet acknowledged, so a client that stops
  acknowledging stops receiving and the server holds a bounded amount for it;
* ``ack`` frames acknowledge records (cumulatively per partition); in a group, commits
  follow acknowledgements (``at-least-once``, the default) or precede delivery
  (``at-most-once``);
* ``produce`` frames produce one record each and are answered by ``produced`` or ``error``.

The socket acts on the brokers as the caller's API key (``kafka.client_options``), so the
broker enforces the key's ACLs as well. A revoked or expired key closes the socket within
``MILLRACE_WS_KEY_CHECK_SECONDS`` (at once when the revocation is broadcast over the
channel layer).

This module is the adapter between Channels, aiokafka and the database on one side and
the protocol's state on the other (:mod:`control_plane.streams.session`, which validates
frames, keeps the window and decides commits): it does the I/O and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTopicPartition
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from control_plane.access.models import ApiKey
from control_plane.access.services import KeyRejected, authenticate_api_key, authorize_key
from control_plane.access.services import tenant_bindings as load_bindings
from control_plane.catalog.models import Topic
from control_plane.core.errors import ServiceError
from control_plane.core.notify import key_group
from control_plane.core.request_context import bind_connection, bind_tenant, bind_user
from control_plane.streams import session
from control_plane.streams.kafka import (
    Delegation,
    assign_positions,
    bootstrap_servers,
    error_info,
    spoils_sequence,
    stop_quietly,
    stream_consumer,
    stream_producer,
)
from control_plane.streams.services import render_consumed
from control_plane.streams.session import (
    FrameError,
    StreamSession,
    TopicPartition,
)
from data_plane.acl import Operation, ResourceType
from data_plane.records.filter import RecordFilter

__all__ = ["CLOSE_NOT_FOUND", "CLOSE_UNAUTHENTICATED", "FrameError", "StreamConsumer"]

logger = logging.getLogger("millrace.streams.ws")

# at-least-once in a group: acknowledged offsets are committed this often (and on
# revocation and on close).
COMMIT_INTERVAL_S = 0.5
# Bound on the commit a closing socket makes before it leaves the group.
CLOSE_COMMIT_TIMEOUT_S = 5.0

# Close codes (docs/streams.md).
CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_POLICY = 1008
CLOSE_INTERNAL = 1011


@database_sync_to_async
def _authenticate(tenant_slug: str, key_id: str, secret: str) -> ApiKey:
    key = authenticate_api_key(key_id, secret)
    if key.tenant.slug != tenant_slug:
        # As over REST: another tenant does not exist for this key.
        raise KeyRejected(f"tenant {tenant_slug!r} not found")
    return key


@database_sync_to_async
def _key_active(key_id: str) -> bool:
    return ApiKey.objects.active().filter(key_id=key_id).exists()


def _tp(tp: Any) -> TopicPartition:
    return TopicPartition(tp.topic, tp.partition)


def _kafka_offsets(offsets: dict[TopicPartition, int]) -> dict[KafkaTopicPartition, int]:
    return {KafkaTopicPartition(*tp): off for tp, off in offsets.items()}


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, stream: StreamConsumer) -> None:
        self.stream = stream

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.stream.partitions_revoked([_tp(tp) for tp in revoked])

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.stream.partitions_assigned([_tp(tp) for tp in assigned])


class StreamConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """A stream for an API key (the data API). :class:`ConsoleTail` is the console's."""

    key: ApiKey | None = None
    # Set once the caller is known: whom the socket acts as on the brokers, the tenant, and
    # the principal named in permission errors.
    who: Delegation | None = None
    tenant_id: int | None = None
    # Records that do not match are not delivered (the console's tail sets one).
    record_filter: RecordFilter | None = None
    principal_name = "?"

    # -- connection lifecycle -------------------------------------------------------------

    async def connect(self) -> None:
        self.tenant_slug = self.scope["url_route"]["kwargs"]["tenant_slug"]
        # Log lines of this socket (its task and the tasks it starts) carry the id.
        self.connection_id = bind_connection(self.scope)
        self.source_ip = (self.scope.get("client") or ["", 0])[0]
        self.session = StreamSession()
        self.tasks: list[asyncio.Task[Any]] = []
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self.window_open = asyncio.Event()
        self.closed = False
        await self.accept()
        await self.identify()

    async def identify(self) -> None:
        """Learn who the caller is: an API key from the header or a first auth frame."""
        if session.credentials_in_url(self.scope.get("query_string", b"")):
            await self.fail(
                CLOSE_BAD_REQUEST,
                "credentials_in_url",
                "credentials in the URL are refused (URLs end up in logs): use the "
                "Authorization header or an auth frame",
            )
            return
        header = session.auth_header(self.scope.get("headers", []))
        if header is not None:
            await self.authenticate(*header)
        else:
            self.tasks.append(asyncio.create_task(self._auth_deadline()))

    async def disconnect(self, code: int) -> None:
        self.closed = True
        for task in self.tasks:
            task.cancel()
        if self.key is not None and self.channel_layer is not None:
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(
                    key_group(self.key.key_id), self.channel_name
                )
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            spec = self.session.subscription
            if spec is not None and spec.commits_acknowledged:
                # What was acknowledged since the last tick, before the group moves on.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._commit(consumer, self.session.commits_due()),
                        CLOSE_COMMIT_TIMEOUT_S,
                    )
            await stop_quietly(consumer.stop())  # leaves the group: the others rebalance now
        producer, self.producer = self.producer, None
        if producer is not None:
            await stop_quietly(producer.stop())

    async def fail(self, close_code: int, code: str, message: str) -> None:
        """Send an error frame and close the socket with ``close_code``."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            await self.send_json({"type": "error", "code": code, "message": message})
        await self.close(code=close_code)

    async def send_json(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame, separators=(",", ":"), ensure_ascii=False))

    # -- authentication and revocation ----------------------------------------------------

    async def _auth_deadline(self) -> None:
        await asyncio.sleep(settings.MILLRACE_WS_AUTH_TIMEOUT_SECONDS)
        if self.who is None:
            await self.fail(CLOSE_UNAUTHENTICATED, "unauthenticated", "no auth frame in time")

    async def authenticate(self, key_id: str, secret: str) -> None:
        if not key_id or not secret:
            await self.fail(
                CLOSE_UNAUTHENTICATED,
                "unauthenticated",
                "API key credentials must be 'key_id:secret' (Basic) or 'key_id.secret' "
                "(Bearer), or an auth frame with key_id and secret",
            )
            return
        try:
            key = await _authenticate(self.tenant_slug, key_id, secret)
        except KeyRejected as exc:
            close = CLOSE_NOT_FOUND if "not found" in exc.reason else CLOSE_UNAUTHENTICATED
            await self.fail(close, "unauthenticated", exc.reason)
            return
        self.key = key
        bind_tenant(key.tenant.slug)
        bind_user(None, api_key=key)
        self.who = Delegation(key.tenant.slug, key.key_id)
        self.tenant_id = key.tenant_id
        self.principal_name = key.service_account.principal
        self.bindings = await database_sync_to_async(load_bindings)(key.tenant_id)
        self.bindings_at = time.monotonic()
        if self.channel_layer is not None:
            try:
                await self.channel_layer.group_add(key_group(key.key_id), self.channel_name)
            except Exception:  # noqa: BLE001 - the periodic check still closes revoked keys
                logger.warning("channel layer unavailable; revocation by polling only")
        self.tasks.append(asyncio.create_task(self._watch_key()))
        await self.send_json(
            {
                "type": "authenticated",
                "tenant": self.tenant_slug,
                "principal": key.service_account.principal,
                "key_id": key.key_id,
            }
        )

    async def _watch_key(self) -> None:
        while True:
            await asyncio.sleep(settings.MILLRACE_WS_KEY_CHECK_SECONDS)
            assert self.key is not None
            if not await _key_active(self.key.key_id):
                await self.key_revoked({})
                return

    async def key_revoked(self, event: dict[str, Any]) -> None:
        """Channel-layer message ``key.revoked`` (or the periodic check): close now."""
        await self.fail(
            CLOSE_UNAUTHENTICATED, "key_revoked", "the API key was revoked, expired or deleted"
        )

    # -- frames ---------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.closed:
            return
        frame: Any = None
        try:
            frame = session.parse_frame(text_data)
            await self.dispatch_frame(frame)
        except FrameError as exc:
            await self.send_json(session.error_frame(exc, frame))
            if self.session.rejected(exc, max_bad_frames=settings.MILLRACE_WS_MAX_BAD_FRAMES):
                await self.fail(
                    CLOSE_POLICY, "too_many_bad_frames", "too many invalid frames; closing"
                )

    async def dispatch_frame(self, frame: dict[str, Any]) -> None:
        kind = session.route(frame, authenticated=self.who is not None)
        if kind == "auth":
            await self.authenticate(*session.parse_auth(frame))
        elif kind == "unauthenticated":
            await self.fail(CLOSE_UNAUTHENTICATED, "unauthenticated", "authenticate first")
        elif kind == "ping":
            await self.send_json({"type": "pong", "id": frame.get("id")})
        elif kind == "subscribe":
            await self.subscribe(frame)
        elif kind == "ack":
            await self.ack(frame)
        elif kind == "produce":
            await self.produce(frame)

    # -- authorization --------------------------------------------------------------------

    async def _may(self, operation: Operation, rtype: ResourceType, name: str) -> bool:
        assert self.key is not None
        if time.monotonic() - self.bindings_at > settings.MILLRACE_WS_KEY_CHECK_SECONDS:
            self.bindings = await database_sync_to_async(load_bindings)(self.key.tenant_id)
            self.bindings_at = time.monotonic()
        return bool(
            authorize_key(
                self.key,
                host=self.source_ip,
                operation=operation,
                resource_type=rtype,
                resource_name=name,
                bindings=self.bindings,
            ).allowed
        )

    async def _check_topic(self, name: Any, operation: Operation) -> int:
        """Partitions of ``name`` if the caller may ``operation`` it; FrameError otherwise."""
        name = session.check_topic_name(name)
        if not await self._may(operation, ResourceType.TOPIC, name):
            raise FrameError(
                "permission_denied",
                f"{self.principal_name} is not authorized to {operation.value} topic {name!r}",
            )
        partitions = await database_sync_to_async(
            lambda: (
                Topic.objects.filter(tenant_id=self.tenant_id, name=name)
                .values_list("partition_count", flat=True)
                .first()
            )
        )()
        if partitions is None:
            raise FrameError("not_found", f"topic {name!r} not found")
        return int(partitions)

    async def _bootstrap(self) -> list[str]:
        try:
            return await database_sync_to_async(bootstrap_servers)()
        except ServiceError as exc:
            raise FrameError("unavailable", exc.message) from None

    # -- consuming ------------------------------------------------------------------------

    async def subscribe(self, frame: dict[str, Any]) -> None:
        request = self.session.subscribe(frame, max_window=settings.MILLRACE_WS_MAX_WINDOW)
        counts = {}
        for name in request.topics:
            counts[name] = await self._check_topic(name, Operation.READ)
        group = request.group
        if group and not await self._may(Operation.READ, ResourceType.GROUP, group):
            raise FrameError(
                "permission_denied",
                f"{self.principal_name} is not authorized to READ group {group!r}",
            )
        spec = request.resolve(counts)
        bootstrap = await self._bootstrap()
        assert self.who is not None
        consumer = stream_consumer(self.who, bootstrap, group=group, start=spec.start)
        # Set before starting: the rebalance listener may run as soon as it starts.
        self.session.subscription = spec
        try:
            await consumer.start()
            if group:
                consumer.subscribe(spec.topics, listener=_Listener(self))
            else:
                await assign_positions(consumer, spec.positions)
        except Exception as exc:  # noqa: BLE001 - told to the client
            self.session.subscription = None
            await stop_quietly(consumer.stop())
            info = error_info(exc)
            raise FrameError(info["code"], f"cannot subscribe: {info['message']}") from None
        self.consumer = consumer
        self._update_window()
        self.tasks.append(asyncio.create_task(self._pump()))
        if spec.commits_acknowledged:
            self.tasks.append(asyncio.create_task(self._commit_loop()))
        await self.send_json(session.subscribed_frame(spec))

    def _update_window(self) -> None:
        if self.session.window_open:
            self.window_open.set()
        else:
            self.window_open.clear()

    async def _pump(self) -> None:
        assert self.session.subscription is not None and self.consumer is not None
        formats = self.session.subscription.formats
        try:
            while not self.closed:
                await self.window_open.wait()
                batches = await self.consumer.getmany(
                    timeout_ms=500, max_records=self.session.room()
                )
                if not batches or self.closed:
                    continue
                records = []
                for ktp, messages in batches.items():
                    if not messages:
                        continue
                    tp = _tp(ktp)
                    commit = self.session.commit_before_delivery(tp, messages[-1].offset)
                    if commit is not None:
                        await self.consumer.commit({ktp: commit})
                    flt = self.record_filter
                    kept = [
                        m for m in messages if flt is None or flt.matches(m.key, m.value, m.headers)
                    ]
                    self.session.deliver(tp, [m.offset for m in kept])
                    records += [render_consumed(m, formats) for m in kept]
                if not records:
                    continue
                self._update_window()
                await self.send_json({"type": "records", "records": records})
                # Nothing above need suspend when records are buffered: let the loop run
                # the other sockets, the acks and the channel layer between frames.
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the stream ends with a reason
            info = error_info(exc)
            logger.info("stream of %s ended: %s", self.who, info["message"])
            code = "permission_denied" if "authorization" in info["code"] else info["code"]
            await self.fail(CLOSE_INTERNAL, code, f"consuming failed: {info['message']}")

    async def ack(self, frame: dict[str, Any]) -> None:
        outcome = self.session.ack(frame)
        for tp in outcome.not_assigned:
            await self.send_json(session.not_assigned_frame(tp))
        if outcome.error is not None:
            raise outcome.error
        self._update_window()

    async def _commit(self, consumer: AIOKafkaConsumer, due: dict[TopicPartition, int]) -> None:
        if not due:
            return
        try:
            await consumer.commit(_kafka_offsets(due))
            self.session.commit_succeeded(due)
        except Exception as exc:  # noqa: BLE001 - retried at the next tick
            logger.info("commit for %s failed: %s", self.who, exc)

    async def _commit_loop(self) -> None:
        while not self.closed:
            await asyncio.sleep(COMMIT_INTERVAL_S)
            if self.consumer is not None:
                await self._commit(self.consumer, self.session.commits_due())

    async def partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.session.commits_on_revoke and self.consumer is not None:
            await self._commit(self.consumer, self.session.commits_due(only=revoked))
        self.session.revoke(revoked)
        if self.session.subscription:
            self._update_window()
        if revoked and not self.closed:
            await self.send_json(session.partitions_frame("revoked", revoked))

    async def partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if not self.closed:
            await self.send_json(session.partitions_frame("assigned", sorted(assigned)))

    # -- producing ------------------------------------------------------------------------

    async def produce(self, frame: dict[str, Any]) -> None:
        frame_id = frame.get("id")
        topic = frame.get("topic")
        partitions = await self._check_topic(topic, Operation.WRITE)
        record = session.parse_produce(frame, partitions)
        self.session.check_produce_room()
        if self.producer is None:
            await self._start_producer()
        assert self.producer is not None
        stamp = record.timestamp_ms if record.timestamp_ms is not None else int(time.time() * 1000)
        self.session.produce_sent()
        try:
            future = await self.producer.send(
                str(topic),
                value=record.value,
                key=record.key,
                partition=record.partition,
                timestamp_ms=stamp,
                headers=record.headers,
            )
        except Exception as exc:  # noqa: BLE001 - reported for this frame
            self.session.produce_answered()
            await self.send_json({"type": "error", "id": frame_id, **error_info(exc)})
            return
        self.tasks.append(
            asyncio.create_task(self._produced(frame_id, future, stamp, self.producer))
        )
        if len(self.tasks) > 2 * session.MAX_PRODUCE_IN_FLIGHT:
            self.tasks = [t for t in self.tasks if not t.done()]

    async def _start_producer(self) -> None:
        assert self.who is not None
        bootstrap = await self._bootstrap()
        producer = stream_producer(self.who, bootstrap)
        try:
            await producer.start()
        except Exception as exc:  # noqa: BLE001 - told to the client
            await stop_quietly(producer.stop())
            raise FrameError("unavailable", f"cannot reach the brokers: {exc}") from None
        self.producer = producer

    async def _produced(
        self, frame_id: Any, future: Any, stamp: int, producer: AIOKafkaProducer
    ) -> None:
        try:
            meta = await future
            reply = {
                "type": "produced",
                "id": frame_id,
                "topic": meta.topic,
                "partition": meta.partition,
                "offset": meta.offset,
                "timestamp": meta.timestamp if meta.timestamp_type == 1 else stamp,
            }
        except Exception as exc:  # noqa: BLE001 - reported for this frame
            reply = {"type": "error", "id": frame_id, **error_info(exc)}
            if spoils_sequence(exc) and self.producer is producer:
                # The refused batch used sequence numbers the broker never took: a new
                # producer (new id) for the next frame, or every later one would fail.
                logger.warning(
                    "replacing the socket's idempotent producer after %s: %s",
                    reply["code"],
                    exc,
                )
                self.producer = None
                self.tasks.append(asyncio.create_task(stop_quietly(producer.stop())))
        finally:
            self.session.produce_answered()
        if not self.closed:
            await self.send_json(reply)
