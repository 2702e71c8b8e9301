"""The WebSocket stream's protocol (docs/streams.md) as plain state: no I/O.

:class:`StreamSession` holds what one socket's stream knows — the subscription, the
records delivered and not yet acknowledged per partition, the acknowledged and committed
offsets, the produce frames in flight, the count of malformed frames — and decides: is a
frame valid, how many records may be sent now (the window), what an ack frees, which
offsets are due for a commit. It takes plain data (decoded JSON frames, offsets, partition
counts) and returns values or raises :class:`FrameError`; it never awaits, sends or reads
a clock, and imports no Channels, asyncio or Kafka client.

``control_plane.streams.consumers`` is the adapter: it owns the socket, the aiokafka
clients, authentication and authorization, and asks the session before and after each
step. It runs on one event loop, and the session is only touched from that loop's tasks,
between awaits, so it needs no locks. Nothing in it survives the socket.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from control_plane.streams import codec

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


class TopicPartition(NamedTuple):
    """A partition, as the session keys its state (equal to aiokafka's of the same name)."""

    topic: str
    partition: int


# (topic, partition, where to start: {"offset"}, {"timestamp"} or {"position"}).
Start = tuple[str, int, dict[str, Any]]


# --- the connection --------------------------------------------------------------------------


def credentials_in_url(query_string: bytes) -> bool:
    """Whether the upgrade URL's query names a credential (refused: URLs end up in logs)."""
    query = parse_qs(query_string.decode("latin-1"))
    return any(word in name.lower() for name in query for word in SECRET_WORDS)


def auth_header(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str, str] | None:
    """(key_id, secret) from an ``Authorization`` header (Basic or Bearer, as the REST
    API); ("", "") for one that cannot be read; None without the header."""
    for name, value in headers:
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


# --- frames ----------------------------------------------------------------------------------


def parse_frame(text_data: str | None) -> dict[str, Any]:
    """A client frame: a JSON text object with a string ``type``."""
    if text_data is None:
        raise FrameError("bad_frame", "frames must be JSON text")
    try:
        frame = json.loads(text_data)
    except ValueError:
        raise FrameError("bad_frame", "the frame is not valid JSON") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise FrameError("bad_frame", 'a frame is an object with a "type"')
    return frame


def error_frame(error: FrameError, frame: Any = None) -> dict[str, Any]:
    """The error frame answering ``frame`` (it carries the frame's ``id`` if it had one)."""
    reply: dict[str, Any] = {"type": "error", "code": error.code, "message": error.message}
    if isinstance(frame, dict) and "id" in frame:
        reply["id"] = frame["id"]
    return reply


def route(frame: dict[str, Any], *, authenticated: bool) -> str:
    """What to do with a parsed frame: ``auth``, ``ping``, ``subscribe``, ``ack``,
    ``produce``, or ``unauthenticated`` (any other frame before authenticating: close)."""
    kind = str(frame["type"])
    if kind == "auth":
        if authenticated:
            raise FrameError("bad_frame", "already authenticated")
        return kind
    if not authenticated:
        return "unauthenticated"
    if kind in ("ping", "subscribe", "ack", "produce"):
        return kind
    raise FrameError("bad_frame", f"unknown frame type {kind!r}")


def parse_auth(frame: dict[str, Any]) -> tuple[str, str]:
    """(key_id, secret) of an auth frame."""
    key_id, secret = frame.get("key_id"), frame.get("secret")
    if not isinstance(key_id, str) or not isinstance(secret, str):
        raise FrameError("bad_frame", "an auth frame needs key_id and secret strings")
    return key_id, secret


def check_topic_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise FrameError("bad_frame", "topic names are non-empty strings")
    return name


# --- subscribing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """A validated subscription: its topics (and where to start, without a group)."""

    topics: list[str]
    group: str | None
    mode: str
    window: int
    # Where a group starts without a committed offset: "earliest" or "latest".
    start: str
    positions: list[Start]
    formats: dict[str, str]

    @property
    def commits_before_delivery(self) -> bool:
        """at-most-once in a group: a batch's offsets are committed before it is sent."""
        return bool(self.group) and self.mode == "at-most-once"

    @property
    def commits_acknowledged(self) -> bool:
        """at-least-once in a group: acknowledged offsets are committed as they come."""
        return bool(self.group) and self.mode == "at-least-once"


@dataclass(frozen=True)
class SubscribeRequest:
    """A subscribe frame whose shape is valid; :meth:`resolve` completes it once the
    adapter has checked each topic (and its partition count)."""

    topics: list[str]
    group: str | None
    mode: str
    window: int
    start: str | dict[str, Any]
    positions: list[Start]
    formats: dict[str, str]

    def resolve(self, partitions: Mapping[str, int]) -> Subscription:
        """The subscription, given each topic's partition count: explicit partitions must
        exist; without a group or explicit partitions, every partition from ``start``."""
        for t, p, _ in self.positions:
            if not 0 <= p < partitions[t]:
                raise FrameError(
                    "not_found", f"topic {t!r} has partitions 0 to {partitions[t] - 1}"
                )
        positions = self.positions
        if not positions and not self.group:
            positions = [
                (t, p, {"position": self.start}) for t in self.topics for p in range(partitions[t])
            ]
        return Subscription(
            topics=self.topics,
            group=self.group,
            mode=self.mode,
            window=self.window,
            start=self.start if isinstance(self.start, str) else "latest",
            positions=positions,
            formats=self.formats,
        )


def parse_subscribe(frame: dict[str, Any], *, max_window: int) -> SubscribeRequest:
    """Check a subscribe frame's fields (not yet whether its topics exist or are allowed)."""
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
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= max_window:
        raise FrameError("bad_frame", f"window must be an integer from 1 to {max_window}")
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
    positions: list[Start] = []
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
    return SubscribeRequest(
        topics=topics,
        group=group,
        mode=mode,
        window=window,
        start=start,
        positions=positions,
        formats=formats,
    )


def subscribed_frame(subscription: Subscription) -> dict[str, Any]:
    return {
        "type": "subscribed",
        "topics": subscription.topics,
        "group": subscription.group,
        "mode": subscription.mode,
        "window": subscription.window,
        # Streams read committed transactions only (markers and aborted records never
        # reach a socket), as librdkafka's consumers do by default.
        "isolation_level": "read_committed",
    }


def partitions_frame(kind: str, tps: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """An ``assigned`` or ``revoked`` frame, its partitions in the order given."""
    return {"type": kind, "partitions": [{"topic": t, "partition": p} for t, p in tps]}


# --- acknowledging ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AckOutcome:
    """What an ack frame did: partitions it named that have nothing unacknowledged (each
    gets a ``not_assigned`` error frame), and the error that stopped it, if one did (the
    items before it took effect)."""

    not_assigned: list[TopicPartition] = field(default_factory=list)
    error: FrameError | None = None


def not_assigned_frame(tp: TopicPartition) -> dict[str, Any]:
    return {
        "type": "error",
        "code": "not_assigned",
        "message": f"{tp.topic}[{tp.partition}] has no unacknowledged records",
    }


# --- producing -------------------------------------------------------------------------------


def parse_produce(frame: dict[str, Any], partitions: int) -> codec.OutRecord:
    """The record of a produce frame for a topic of ``partitions`` partitions."""
    try:
        formats = codec.formats(frame)
        raw = {k: v for k, v in frame.items() if k in codec.RECORD_FIELDS}
        record = codec.parse_record(raw, "record", **formats)
    except codec.RecordError as exc:
        raise FrameError("bad_frame", str(exc)) from None
    if record.partition is not None and record.partition >= partitions:
        topic = frame.get("topic")
        raise FrameError("not_found", f"topic {topic!r} has partitions 0 to {partitions - 1}")
    return record


# --- the session -----------------------------------------------------------------------------


class StreamSession:
    """One socket's stream state. See the module docstring."""

    def __init__(self) -> None:
        self.subscription: Subscription | None = None
        self.bad_frames = 0
        self.producing = 0  # produce frames sent to the broker and not yet answered
        self.delivered: dict[TopicPartition, deque[int]] = {}  # offsets not yet acked
        self.unacked = 0
        self.acked: dict[TopicPartition, int] = {}  # next offset to commit
        self.committed: dict[TopicPartition, int] = {}

    # -- frames -------------------------------------------------------------------------

    def rejected(self, error: FrameError, *, max_bad_frames: int) -> bool:
        """Count a refused frame; True when the socket should close (too many bad ones).
        Only malformed frames count as abuse; a denied or failed request does not."""
        self.bad_frames += error.code == "bad_frame"
        return self.bad_frames >= max_bad_frames

    # -- subscribing --------------------------------------------------------------------

    def subscribe(self, frame: dict[str, Any], *, max_window: int) -> SubscribeRequest:
        if self.subscription is not None:
            raise FrameError("bad_frame", "this socket is already subscribed")
        return parse_subscribe(frame, max_window=max_window)

    # -- the window ---------------------------------------------------------------------

    @property
    def window_open(self) -> bool:
        """Whether more records may be delivered now (fewer than ``window`` unacked)."""
        assert self.subscription is not None
        return self.unacked < self.subscription.window

    def room(self) -> int:
        """How many records the next ``records`` frame may carry."""
        assert self.subscription is not None
        return min(self.subscription.window - self.unacked, MAX_RECORDS_PER_FRAME)

    def commit_before_delivery(self, tp: TopicPartition, last_offset: int) -> int | None:
        """The offset to commit before delivering a batch of ``tp`` ending at
        ``last_offset`` (at-most-once in a group), or None."""
        assert self.subscription is not None
        return last_offset + 1 if self.subscription.commits_before_delivery else None

    def deliver(self, tp: TopicPartition, offsets: Iterable[int]) -> None:
        """``offsets`` of ``tp`` are being sent: they now await acknowledgement."""
        sent = list(offsets)
        self.delivered.setdefault(tp, deque()).extend(sent)
        self.unacked += len(sent)

    def ack(self, frame: dict[str, Any]) -> AckOutcome:
        """Acknowledge cumulatively per partition: an offset frees every delivered record
        of its partition up to it, and makes the next one the offset to commit."""
        if self.subscription is None:
            return AckOutcome(
                error=FrameError("bad_frame", "nothing to acknowledge: subscribe first")
            )
        items = frame.get("offsets")
        if items is None:
            items = [{k: frame.get(k) for k in ("topic", "partition", "offset")}]
        if not isinstance(items, list):
            return AckOutcome(error=FrameError("bad_frame", "offsets must be a list"))
        not_assigned: list[TopicPartition] = []
        for item in items:
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("topic"), str)
                or not isinstance(item.get("partition"), int)
                or not isinstance(item.get("offset"), int)
            ):
                error = FrameError("bad_frame", "an ack names topic, partition and offset")
                return AckOutcome(not_assigned, error)
            tp = TopicPartition(item["topic"], item["partition"])
            offsets = self.delivered.get(tp)
            if offsets is None:
                # Revoked by a rebalance (or never delivered): nothing to do, say so.
                not_assigned.append(tp)
                continue
            freed = 0
            while offsets and offsets[0] <= item["offset"]:
                offsets.popleft()
                freed += 1
            if freed:
                self.unacked -= freed
                self.acked[tp] = item["offset"] + 1
        return AckOutcome(not_assigned)

    # -- commits ------------------------------------------------------------------------

    def commits_due(
        self, only: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Acknowledged offsets not yet committed (of the partitions ``only``, if given)."""
        wanted = None if only is None else set(only)
        return {
            tp: off
            for tp, off in self.acked.items()
            if self.committed.get(tp) != off and (wanted is None or tp in wanted)
        }

    def commit_succeeded(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.committed.update(offsets)

    @property
    def commits_on_revoke(self) -> bool:
        """Whether revoked partitions' acknowledged offsets are committed before they go."""
        return self.subscription is not None and self.subscription.mode == "at-least-once"

    def revoke(self, tps: Iterable[TopicPartition]) -> None:
        """A rebalance took ``tps``: forget their deliveries; their records free the window."""
        for tp in tps:
            pending = self.delivered.pop(tp, None)
            if pending:
                self.unacked -= len(pending)
            self.acked.pop(tp, None)
            self.committed.pop(tp, None)

    # -- producing ----------------------------------------------------------------------

    def check_produce_room(self) -> None:
        if self.producing >= MAX_PRODUCE_IN_FLIGHT:
            raise FrameError(
                "too_many_in_flight",
                f"{MAX_PRODUCE_IN_FLIGHT} produce frames await acknowledgement; wait for them",
            )

    def produce_sent(self) -> None:
        self.producing += 1

    def produce_answered(self) -> None:
        self.producing -= 1
