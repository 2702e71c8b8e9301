"""Postgres logical replication, read as the built-in ``pgoutput`` plugin writes it.

Two layers, written from PostgreSQL's "Streaming Replication Protocol" and "Logical
Replication Message Formats" chapters:

* :class:`ReplicationStream` runs ``START_REPLICATION ... LOGICAL`` on a replication
  connection (``replication=database``) through psycopg's libpq wrapper and hands out
  the CopyBoth messages: ``XLogData`` (``w``) payloads with their WAL positions, and
  primary keepalives (``k``) answered with standby status updates (``r``) that carry
  the flushed position, the one the slot may forget WAL up to.
* :func:`decode` turns a ``pgoutput`` payload (protocol version 1, text values) into
  :class:`Begin`, :class:`Commit`, :class:`Relation`, :class:`Change` and
  :class:`Truncate` tuples. Column values stay in Postgres's text output form (``None``
  for SQL NULL, :data:`UNCHANGED` for an unchanged TOASTed value); the connector turns
  them into Connect values with the column's type.
"""

from __future__ import annotations

import select
import struct
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01
UNCHANGED = object()  # an unchanged TOASTed value ('u')

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_Q = struct.Struct("!Q")
_BEGIN = struct.Struct("!QqI")
_COMMIT = struct.Struct("!BQQq")
_XLOG = struct.Struct("!QQq")
_KEEPALIVE = struct.Struct("!Qq?")
_STATUS = struct.Struct("!cQQQq?")


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def pg_now_us() -> int:
    """Now in microseconds since 2000-01-01 (the protocol's clock)."""
    return time.time_ns() // 1000 - PG_EPOCH_US


class Column(NamedTuple):
    name: str
    type_oid: int
    type_modifier: int
    key: bool  # part of the replica identity (the primary key by default)


class Relation(NamedTuple):
    relation_id: int
    schema: str
    table: str
    replica_identity: str
    columns: tuple[Column, ...]


class Begin(NamedTuple):
    final_lsn: int
    commit_time_us: int  # since 1970-01-01
    xid: int


class Commit(NamedTuple):
    commit_lsn: int
    end_lsn: int
    commit_time_us: int


class Change(NamedTuple):
    op: str  # "I", "U" or "D"
    relation_id: int
    old: tuple[Any, ...] | None  # the old key ('K') or old row ('O'); None if not sent
    old_is_key: bool
    new: tuple[Any, ...] | None


class Truncate(NamedTuple):
    relation_ids: tuple[int, ...]


class Other(NamedTuple):
    kind: str


Message = Begin | Commit | Relation | Change | Truncate | Other


def _string(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(b"\0", at)
    return data[at:end].decode("utf-8"), end + 1


def _tuple(data: bytes, at: int) -> tuple[tuple[Any, ...], int]:
    (count,) = _I16.unpack_from(data, at)
    at += 2
    values: list[Any] = []
    append = values.append
    for _ in range(count):
        kind = data[at]
        at += 1
        if kind == 0x74:  # 't'
            (length,) = _I32.unpack_from(data, at)
            at += 4
            append(data[at : at + length].decode("utf-8"))
            at += length
        elif kind == 0x6E:  # 'n'
            append(None)
        elif kind == 0x75:  # 'u'
            append(UNCHANGED)
        elif kind == 0x62:  # 'b' (binary; only with the binary option, which we do not ask)
            (length,) = _I32.unpack_from(data, at)
            at += 4
            append(bytes(data[at : at + length]))
            at += length
        else:
            raise ValueError(f"pgoutput: unknown tuple column kind {kind!r}")
    return tuple(values), at


def decode(data: bytes) -> Message:
    """One ``pgoutput`` message (protocol version 1)."""
    kind = data[0]
    if kind == 0x49:  # 'I'
        (relation_id,) = _U32.unpack_from(data, 1)
        if data[5] != 0x4E:
            raise ValueError("pgoutput: an insert without its new tuple")
        new, _ = _tuple(data, 6)
        return Change("I", relation_id, None, False, new)
    if kind == 0x55:  # 'U'
        (relation_id,) = _U32.unpack_from(data, 1)
        at, old, old_is_key = 5, None, False
        if data[at] in (0x4B, 0x4F):  # 'K' / 'O'
            old_is_key = data[at] == 0x4B
            old, at = _tuple(data, at + 1)
        if data[at] != 0x4E:
            raise ValueError("pgoutput: an update without its new tuple")
        new, _ = _tuple(data, at + 1)
        return Change("U", relation_id, old, old_is_key, new)
    if kind == 0x44:  # 'D'
        (relation_id,) = _U32.unpack_from(data, 1)
        old_is_key = data[5] == 0x4B
        old, _ = _tuple(data, 6)
        return Change("D", relation_id, old, old_is_key, None)
    if kind == 0x42:  # 'B'
        final_lsn, ts, xid = _BEGIN.unpack_from(data, 1)
        return Begin(final_lsn, ts + PG_EPOCH_US, xid)
    if kind == 0x43:  # 'C'
        _flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(data, 1)
        return Commit(commit_lsn, end_lsn, ts + PG_EPOCH_US)
    if kind == 0x52:  # 'R'
        (relation_id,) = _U32.unpack_from(data, 1)
        schema, at = _string(data, 5)
        table, at = _string(data, at)
        identity = chr(data[at])
        (count,) = _I16.unpack_from(data, at + 1)
        at += 3
        columns = []
        for _ in range(count):
            flags = data[at]
            name, at = _string(data, at + 1)
            type_oid, modifier = struct.unpack_from("!Ii", data, at)
            at += 8
            columns.append(Column(name, type_oid, modifier, bool(flags & 1)))
        return Relation(relation_id, schema, table, identity, tuple(columns))
    if kind == 0x54:  # 'T'
        (count,) = _I32.unpack_from(data, 1)
        ids = struct.unpack_from(f"!{count}I", data, 6)
        return Truncate(tuple(ids))
    return Other(chr(kind))  # 'O' origin, 'Y' type, 'M' message: nothing to emit


class XLogData(NamedTuple):
    wal_start: int
    wal_end: int
    payload: bytes


class ReplicationStream:
    """``START_REPLICATION`` on a psycopg replication connection, read without blocking
    longer than asked, keepalives answered."""

    STATUS_INTERVAL = 10.0  # seconds between unasked standby status updates

    def __init__(self, conn: Any, slot: str, start_lsn: int, publications: list[str]) -> None:
        self.conn = conn
        self.pgconn = conn.pgconn
        self.received = start_lsn  # the furthest WAL position seen
        self.flushed = start_lsn  # what the slot may forget up to (set by the connector)
        self._last_status = 0.0
        names = ",".join(publications).replace("'", "''")
        command = (
            f"START_REPLICATION SLOT {quote_slot(slot)} LOGICAL {format_lsn(start_lsn)} "
            f"(proto_version '1', publication_names '{names}')"
        )
        self.pgconn.send_query(command.encode())
        result = self.pgconn.get_result()
        if result is None or result.status != 8:  # COPY_BOTH
            message = result.error_message.decode(errors="replace") if result else "no result"
            raise ConnectionError(f"START_REPLICATION failed: {message.strip()}")

    def messages(self, timeout: float, limit: int) -> Iterator[XLogData]:
        """XLogData messages that arrive within ``timeout`` seconds (at most ``limit``)."""
        deadline = time.monotonic() + timeout
        count = 0
        pgconn = self.pgconn
        while count < limit:
            size, data = pgconn.get_copy_data(1)
            if size == 0:
                self._status_if_due()
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                readable, _, _ = select.select([pgconn.socket], [], [], min(left, 1.0))
                if readable:
                    pgconn.consume_input()
                continue
            if size < 0:
                raise ConnectionError(
                    "the replication stream ended: "
                    + pgconn.error_message.decode(errors="replace").strip()
                )
            payload = bytes(data)
            if payload[0] == 0x77:  # 'w'
                wal_start, wal_end, _clock = _XLOG.unpack_from(payload, 1)
                self.received = max(self.received, wal_start)
                count += 1
                yield XLogData(wal_start, wal_end, payload[25:])
            elif payload[0] == 0x6B:  # 'k'
                _wal_end, _clock, reply = _KEEPALIVE.unpack_from(payload, 1)
                if reply:
                    self.send_status()
        self._status_if_due()

    def _status_if_due(self) -> None:
        if time.monotonic() - self._last_status >= self.STATUS_INTERVAL:
            self.send_status()

    def send_status(self) -> None:
        """A standby status update: written = received; flushed and applied = ``flushed``."""
        message = _STATUS.pack(b"r", self.received, self.flushed, self.flushed, pg_now_us(), False)
        if self.pgconn.put_copy_data(message) != 1 or self.pgconn.flush() != 0:
            raise ConnectionError(
                "could not send a status update: "
                + self.pgconn.error_message.decode(errors="replace").strip()
            )
        self._last_status = time.monotonic()


def quote_slot(name: str) -> str:
    """A slot name is ``[a-z0-9_]+``; anything else is refused before it gets here."""
    if not name or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in name):
        raise ValueError(f"invalid replication slot name {name!r}")
    return name
