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
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import time
from collections import deque
from typing import Any
from urllib.parse import parse_qs

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
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
from control_plane.streams import codec
from control_plane.streams.kafka import (
    ASSIGNORS,
    Delegation,
    bootstrap_servers,
    client_options,
    error_info,
    spoils_sequence,
    stop_quietly,
)
from data_plane.acl import Operation, ResourceType
from data_plane.records.filter import RecordFilter

logger = logging.getLogger("millrace.streams.ws")

# Close codes (docs/streams.md).
CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_POLICY = 1008
CLOSE_INTERNAL = 1011

MODES = ("at-least-once", "at-most-once")
DEFAULT_WINDOW = 1000
MAX_RECORDS_PER_FRAME = 500
MAX_PRODUCE_IN_FLIGHT = 1000
SECRET_WORDS = ("secret", "password", "token", "key", "authorization")


class FrameError(Exception):
    """A client frame is invalid; ``code`` and the message go back in an error frame."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _auth_header(scope: dict[str, Any]) -> tuple[str, str] | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            credentials = credentials.strip()
            if scheme.lower() == "basic":
                try:
                    decoded = base64.b64decode(credentials, validate=True).decode()
                except (binascii.Error, UnicodeDecodeError):
                    return ("", "")
                key_id, _, secret = decoded.partition(":")
                return key_id, secret
            if scheme.lower() == "bearer":
                key_id, _, secret = credentials.partition(".")
                return key_id, secret
            return ("", "")
    return None


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


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, stream: StreamConsumer) -> None:
        self.stream = stream

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.stream.partitions_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.stream.partitions_assigned(list(assigned))


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
        self.bad_frames = 0
        self.tasks: list[asyncio.Task[Any]] = []
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self.producing = 0
        self.subscription: dict[str, Any] | None = None
        self.delivered: dict[TopicPartition, deque[int]] = {}
        self.unacked = 0
        self.acked: dict[TopicPartition, int] = {}  # next offset to commit
        self.committed: dict[TopicPartition, int] = {}
        self.window_open = asyncio.Event()
        self.topic_cache: dict[tuple[str, Operation], tuple[float, str | None]] = {}
        self.closed = False
        await self.accept()
        await self.identify()

    async def identify(self) -> None:
        """Learn who the caller is: an API key from the header or a first auth frame."""
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        if any(word in name.lower() for name in query for word in SECRET_WORDS):
            await self.fail(
                CLOSE_BAD_REQUEST,
                "credentials_in_url",
                "credentials in the URL are refused (URLs end up in logs): use the "
                "Authorization header or an auth frame",
            )
            return
        header = _auth_header(self.scope)
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
            if self.subscription and self.subscription.get("group"):
                await self._commit_acked()
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
            if text_data is None:
                raise FrameError("bad_frame", "frames must be JSON text")
            try:
                frame = json.loads(text_data)
            except ValueError:
                raise FrameError("bad_frame", "the frame is not valid JSON") from None
            if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
                raise FrameError("bad_frame", 'a frame is an object with a "type"')
            await self.dispatch_frame(frame)
        except FrameError as exc:
            # Only malformed frames count as abuse; a denied or failed request does not.
            self.bad_frames += exc.code == "bad_frame"
            reply: dict[str, Any] = {"type": "error", "code": exc.code, "message": exc.message}
            if isinstance(frame, dict) and "id" in frame:
                reply["id"] = frame["id"]
            await self.send_json(reply)
            if self.bad_frames >= settings.MILLRACE_WS_MAX_BAD_FRAMES:
                await self.fail(
                    CLOSE_POLICY, "too_many_bad_frames", "too many invalid frames; closing"
                )

    async def dispatch_frame(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "auth":
            if self.who is not None:
                raise FrameError("bad_frame", "already authenticated")
            key_id, secret = frame.get("key_id"), frame.get("secret")
            if not isinstance(key_id, str) or not isinstance(secret, str):
                raise FrameError("bad_frame", "an auth frame needs key_id and secret strings")
            await self.authenticate(key_id, secret)
            return
        if self.who is None:
            await self.fail(CLOSE_UNAUTHENTICATED, "unauthenticated", "authenticate first")
            return
        if kind == "ping":
            await self.send_json({"type": "pong", "id": frame.get("id")})
        elif kind == "subscribe":
            await self.subscribe(frame)
        elif kind == "ack":
            await self.ack(frame)
        elif kind == "produce":
            await self.produce(frame)
        else:
            raise FrameError("bad_frame", f"unknown frame type {kind!r}")

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
        """Partitions of ``name`` if the key may ``operation`` it; FrameError otherwise."""
        if not isinstance(name, str) or not name:
            raise FrameError("bad_frame", "topic names are non-empty strings")
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

    # -- consuming ------------------------------------------------------------------------

    async def subscribe(self, frame: dict[str, Any]) -> None:
        if self.subscription is not None:
            raise FrameError("bad_frame", "this socket is already subscribed")
        spec = await self._subscription(frame)
        try:
            bootstrap = await database_sync_to_async(bootstrap_servers)()
        except ServiceError as exc:
            raise FrameError("unavailable", exc.message) from None
        assert self.who is not None
        options = client_options(self.who, bootstrap)
        common = {
            "enable_auto_commit": False,
            "fetch_max_bytes": 4 * 2**20,
            "max_partition_fetch_bytes": 2**20,
        }
        group = spec["group"]
        if group:
            consumer = AIOKafkaConsumer(
                **options,
                **common,
                group_id=group,
                partition_assignment_strategy=ASSIGNORS,
                auto_offset_reset=spec["from"]
                if spec["from"] in ("earliest", "latest")
                else "latest",
                session_timeout_ms=10_000,
                heartbeat_interval_ms=1_000,
            )
        else:
            consumer = AIOKafkaConsumer(**options, **common, auto_offset_reset="latest")
        self.subscription = spec
        try:
            await consumer.start()
            if group:
                consumer.subscribe(spec["topics"], listener=_Listener(self))
            else:
                await self._assign(consumer, spec)
        except Exception as exc:  # noqa: BLE001 - told to the client
            self.subscription = None
            await stop_quietly(consumer.stop())
            info = error_info(exc)
            raise FrameError(info["code"], f"cannot subscribe: {info['message']}") from None
        self.consumer = consumer
        self._update_window()
        self.tasks.append(asyncio.create_task(self._pump()))
        if group and spec["mode"] == "at-least-once":
            self.tasks.append(asyncio.create_task(self._commit_loop()))
        await self.send_json(
            {
                "type": "subscribed",
                "topics": spec["topics"],
                "group": group,
                "mode": spec["mode"],
                "window": spec["window"],
            }
        )

    async def _subscription(self, frame: dict[str, Any]) -> dict[str, Any]:
        try:
            formats = codec.formats(frame, reading=True)
        except codec.RecordError as exc:
            raise FrameError("bad_frame", str(exc)) from None
        group = frame.get("group")
        if group is not None and (not isinstance(group, str) or not group):
            raise FrameError("bad_frame", "group must be a non-empty string")
        mode = frame.get("mode", MODES[0])
        if mode not in MODES:
            raise FrameError("bad_frame", f"mode must be one of {', '.join(MODES)}")
        window = frame.get("window", DEFAULT_WINDOW)
        limit = settings.MILLRACE_WS_MAX_WINDOW
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= limit:
            raise FrameError("bad_frame", f"window must be an integer from 1 to {limit}")
        start = frame.get("from", "latest")
        if not (
            start in ("earliest", "latest")
            or (
                isinstance(start, dict)
                and set(start) == {"timestamp"}
                and isinstance(start["timestamp"], int)
            )
        ):
            raise FrameError("bad_frame", 'from must be "earliest", "latest" or {"timestamp": ms}')
        partitions = frame.get("partitions")
        topics = frame.get("topics")
        positions: list[tuple[str, int, Any]] = []
        if partitions is not None:
            if group:
                raise FrameError("bad_frame", "partitions are for streams without a group")
            if not isinstance(partitions, list) or not partitions:
                raise FrameError("bad_frame", "partitions must be a non-empty list")
            for i, p in enumerate(partitions):
                if (
                    not isinstance(p, dict)
                    or not isinstance(p.get("topic"), str)
                    or not isinstance(p.get("partition"), int)
                    or isinstance(p.get("partition"), bool)
                ):
                    raise FrameError("bad_frame", f"partitions[{i}] needs topic and partition")
                where = {k: p[k] for k in ("offset", "timestamp", "position") if k in p}
                if len(where) > 1:
                    raise FrameError(
                        "bad_frame", f"partitions[{i}]: one of offset, timestamp, position"
                    )
                positions.append((p["topic"], p["partition"], where or {"position": start}))
            topics = list(dict.fromkeys(t for t, _, _ in positions))
        if not isinstance(topics, list) or not topics or len(topics) > 100:
            raise FrameError("bad_frame", "topics must be a list of 1 to 100 topic names")
        counts = {}
        for name in topics:
            counts[name] = await self._check_topic(name, Operation.READ)
        for t, p, _ in positions:
            if not 0 <= p < counts[t]:
                raise FrameError("not_found", f"topic {t!r} has partitions 0 to {counts[t] - 1}")
        if group and not await self._may(Operation.READ, ResourceType.GROUP, group):
            raise FrameError(
                "permission_denied",
                f"{self.principal_name} is not authorized to READ group {group!r}",
            )
        if not positions and not group:
            positions = [(t, p, {"position": start}) for t in topics for p in range(counts[t])]
        return {
            "topics": topics,
            "group": group,
            "mode": mode,
            "window": window,
            "from": start if isinstance(start, str) else "latest",
            "positions": positions,
            "formats": formats,
        }

    async def _assign(self, consumer: AIOKafkaConsumer, spec: dict[str, Any]) -> None:
        tps = [TopicPartition(t, p) for t, p, _ in spec["positions"]]
        consumer.assign(tps)
        by_time: dict[TopicPartition, int] = {}
        for (_, _, where), tp in zip(spec["positions"], tps, strict=True):
            if "offset" in where:
                consumer.seek(tp, int(where["offset"]))
            elif "timestamp" in where:
                by_time[tp] = int(where["timestamp"])
            else:
                position = where["position"]
                if isinstance(position, dict):
                    by_time[tp] = int(position["timestamp"])
                elif position == "earliest":
                    await consumer.seek_to_beginning(tp)
                else:
                    await consumer.seek_to_end(tp)
        if by_time:
            found = await consumer.offsets_for_times(by_time)
            for tp, answer in found.items():
                if answer is None:
                    await consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, answer.offset)

    def _update_window(self) -> None:
        assert self.subscription is not None
        if self.unacked < self.subscription["window"]:
            self.window_open.set()
        else:
            self.window_open.clear()

    async def _pump(self) -> None:
        assert self.subscription is not None and self.consumer is not None
        spec = self.subscription
        formats = spec["formats"]
        try:
            while not self.closed:
                await self.window_open.wait()
                room = min(spec["window"] - self.unacked, MAX_RECORDS_PER_FRAME)
                batches = await self.consumer.getmany(timeout_ms=500, max_records=room)
                if not batches or self.closed:
                    continue
                records = []
                for tp, messages in batches.items():
                    if not messages:
                        continue
                    if spec["group"] and spec["mode"] == "at-most-once":
                        await self.consumer.commit({tp: messages[-1].offset + 1})
                    offsets = self.delivered.setdefault(tp, deque())
                    flt = self.record_filter
                    for m in messages:
                        if flt is not None and not flt.matches(m.key, m.value, m.headers):
                            continue
                        offsets.append(m.offset)
                        records.append(
                            codec.render_record(
                                topic=m.topic,
                                partition=m.partition,
                                offset=m.offset,
                                timestamp=m.timestamp,
                                timestamp_type="log_append_time"
                                if m.timestamp_type
                                else "create_time",
                                key=m.key,
                                value=m.value,
                                headers=list(m.headers),
                                **formats,
                            )
                        )
                if not records:
                    continue
                self.unacked += len(records)
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
        if self.subscription is None:
            raise FrameError("bad_frame", "nothing to acknowledge: subscribe first")
        items = frame.get("offsets")
        if items is None:
            items = [{k: frame.get(k) for k in ("topic", "partition", "offset")}]
        if not isinstance(items, list):
            raise FrameError("bad_frame", "offsets must be a list")
        for item in items:
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("topic"), str)
                or not isinstance(item.get("partition"), int)
                or not isinstance(item.get("offset"), int)
            ):
                raise FrameError("bad_frame", "an ack names topic, partition and offset")
            tp = TopicPartition(item["topic"], item["partition"])
            offsets = self.delivered.get(tp)
            if offsets is None:
                # Revoked by a rebalance (or never delivered): nothing to do, say so.
                await self.send_json(
                    {
                        "type": "error",
                        "code": "not_assigned",
                        "message": f"{tp.topic}[{tp.partition}] has no unacknowledged records",
                    }
                )
                continue
            freed = 0
            while offsets and offsets[0] <= item["offset"]:
                offsets.popleft()
                freed += 1
            if freed:
                self.unacked -= freed
                self.acked[tp] = item["offset"] + 1
        self._update_window()

    async def _commit_acked(self, only: list[TopicPartition] | None = None) -> None:
        if self.consumer is None:
            return
        due = {
            tp: off
            for tp, off in self.acked.items()
            if self.committed.get(tp) != off and (only is None or tp in only)
        }
        if not due:
            return
        try:
            await self.consumer.commit(due)
            self.committed.update(due)
        except Exception as exc:  # noqa: BLE001 - retried at the next tick
            logger.info("commit for %s failed: %s", self.who, exc)

    async def _commit_loop(self) -> None:
        while not self.closed:
            await asyncio.sleep(0.5)
            await self._commit_acked()

    async def partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.subscription and self.subscription["mode"] == "at-least-once":
            await self._commit_acked(only=revoked)
        for tp in revoked:
            pending = self.delivered.pop(tp, None)
            if pending:
                self.unacked -= len(pending)
            self.acked.pop(tp, None)
            self.committed.pop(tp, None)
        if self.subscription:
            self._update_window()
        if revoked and not self.closed:
            await self.send_json(
                {
                    "type": "revoked",
                    "partitions": [{"topic": t.topic, "partition": t.partition} for t in revoked],
                }
            )

    async def partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if not self.closed:
            await self.send_json(
                {
                    "type": "assigned",
                    "partitions": [
                        {"topic": t.topic, "partition": t.partition}
                        for t in sorted(assigned, key=lambda t: (t.topic, t.partition))
                    ],
                }
            )

    # -- producing ------------------------------------------------------------------------

    async def produce(self, frame: dict[str, Any]) -> None:
        frame_id = frame.get("id")
        topic = frame.get("topic")
        partitions = await self._check_topic(topic, Operation.WRITE)
        try:
            formats = codec.formats(frame)
            raw = {k: v for k, v in frame.items() if k in codec.RECORD_FIELDS}
            record = codec.parse_record(raw, "record", **formats)
        except codec.RecordError as exc:
            raise FrameError("bad_frame", str(exc)) from None
        if record.partition is not None and record.partition >= partitions:
            raise FrameError("not_found", f"topic {topic!r} has partitions 0 to {partitions - 1}")
        if self.producing >= MAX_PRODUCE_IN_FLIGHT:
            raise FrameError(
                "too_many_in_flight",
                f"{MAX_PRODUCE_IN_FLIGHT} produce frames await acknowledgement; wait for them",
            )
        if self.producer is None:
            await self._start_producer()
        assert self.producer is not None
        stamp = record.timestamp_ms if record.timestamp_ms is not None else int(time.time() * 1000)
        self.producing += 1
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
            self.producing -= 1
            await self.send_json({"type": "error", "id": frame_id, **error_info(exc)})
            return
        self.tasks.append(
            asyncio.create_task(self._produced(frame_id, future, stamp, self.producer))
        )
        if len(self.tasks) > 2 * MAX_PRODUCE_IN_FLIGHT:
            self.tasks = [t for t in self.tasks if not t.done()]

    async def _start_producer(self) -> None:
        assert self.who is not None
        try:
            bootstrap = await database_sync_to_async(bootstrap_servers)()
        except ServiceError as exc:
            raise FrameError("unavailable", exc.message) from None
        producer = AIOKafkaProducer(
            **client_options(self.who, bootstrap),
            acks="all",
            enable_idempotence=True,
            linger_ms=1,
        )
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
            self.producing -= 1
        if not self.closed:
            await self.send_json(reply)
