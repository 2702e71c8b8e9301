"""The "consumer" protocol type's member metadata and assignments (classic encoding).

Kafka clients put these bytes in JoinGroup (subscription) and SyncGroup (assignment); the
broker passes them through untouched, but the control plane decodes them to show what each
member subscribes to and owns, and OffsetDelete needs the subscribed topics.

Subscription v0: version int16, topics [string], user_data bytes; v1 adds owned partitions
[(topic, [int32])]; v2 adds generation_id int32; v3 adds rack_id string. Assignment v0+:
version int16, partitions [(topic, [int32])], user_data bytes. Later versions only append
fields, so a decoder reads what it knows and ignores the rest.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field


class ConsumerProtocolError(ValueError):
    pass


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    version: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...] = field(default_factory=tuple)
    user_data: bytes | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ConsumerProtocolError("truncated consumer protocol bytes")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError("string is not UTF-8") from exc

    def bytes_(self) -> bytes | None:
        n = self.int32()
        return None if n == -1 else self._take(n)

    def count(self) -> int:
        n = self.int32()
        if n < -1 or n > len(self.data) - self.pos:
            raise ConsumerProtocolError(f"array of {n} elements cannot fit")
        return max(n, 0)

    def partitions(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        out = []
        for _ in range(self.count()):
            topic = self.string() or ""
            out.append((topic, tuple(self.int32() for _ in range(self.count()))))
        return tuple(out)

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def decode_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise ConsumerProtocolError(f"subscription version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    user_data = r.bytes_()
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation, rack = -1, None
    if version >= 1 and not r.at_end:
        owned = r.partitions()
    if version >= 2 and not r.at_end:
        generation = r.int32()
    if version >= 3 and not r.at_end:
        rack = r.string()
    return Subscription(version, topics, user_data, owned, generation, rack)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment(0)
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise ConsumerProtocolError(f"assignment version {version}")
    partitions = r.partitions()
    user_data = None if r.at_end else r.bytes_()
    return Assignment(version, partitions, user_data)


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _partitions(parts: tuple[tuple[str, tuple[int, ...]], ...]) -> bytes:
    out = struct.pack(">i", len(parts))
    for topic, indexes in parts:
        out += _string(topic) + struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
    return out


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """A v0 subscription (tests and tools)."""
    out = struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics)
    return out + (
        struct.pack(">i", -1)
        if user_data is None
        else struct.pack(">i", len(user_data)) + user_data
    )


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """An assignment (v0-3 share one layout; the coordinator answers a classic member of a
    consumer group in the version of its subscription, as Kafka does)."""
    parts = tuple((t, tuple(p)) for t, p in partitions.items())
    return struct.pack(">h", version) + _partitions(parts) + struct.pack(">i", -1)
