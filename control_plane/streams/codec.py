"""Records as JSON: how the REST and WebSocket data APIs read and write keys, values, headers.

A key or value travels in one of three formats, chosen per request (or per stream):

* ``json`` (the default for producing): any JSON value; produced as its compact UTF-8 JSON
  text, and read back by parsing the bytes as JSON (bytes that are not JSON come back as a
  base64 string with ``"value_format": "binary"`` noted on the record, so nothing is lost);
* ``string``: a JSON string, produced as its UTF-8 bytes, read back as text (bytes that
  are not UTF-8 come back as base64, noted the same way);
* ``binary``: a base64 string (standard alphabet, padding required), byte-exact both ways.

Reading has a fourth, ``auto``, the default when a reader names no format: each key and
value comes back as JSON if its bytes are JSON, else as text if they are UTF-8, else as
base64, and the record names the format it chose (``"key_format": "string"``). A record
names a key's or value's format whenever it is not the one asked for, so under ``auto``
every non-null key and value is named.

JSON here is strict JSON: ``NaN`` and ``Infinity`` are not JSON (they could not be sent on
as JSON either), so such bytes read as text. ``null`` is a null key or value (a tombstone)
in every format and is never named. Header values are strings (``string``) or base64
(``binary``), chosen by ``header_format``.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

FORMATS = ("json", "string", "binary")
AUTO = "auto"
READ_FORMATS = (AUTO, *FORMATS)
HEADER_FORMATS = ("string", "binary")
MAX_TIMESTAMP = 2**63 - 1


class RecordError(ValueError):
    """One field of one record is invalid; ``field`` names it (``records[3].value``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class OutRecord:
    """A record to produce, fully decoded and validated."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int | None
    timestamp_ms: int | None

    @property
    def size(self) -> int:
        return (
            len(self.key or b"")
            + len(self.value or b"")
            + sum(len(k) + len(v) for k, v in self.headers)
        )


def check_format(value: Any, field: str, *, header: bool = False, reading: bool = False) -> str:
    """The format named ``value`` (the default for ``None``); RecordError if unknown."""
    allowed = HEADER_FORMATS if header else READ_FORMATS if reading else FORMATS
    if value is None:
        return allowed[0]
    if value not in allowed:
        raise RecordError(field, f"must be one of {', '.join(allowed)}")
    return str(value)


def formats(source: Any, *, reading: bool = False) -> dict[str, str]:
    """``key_format``, ``value_format`` and ``header_format`` of a request or frame.

    ``reading``: for records read back (``auto`` allowed, and the default); otherwise for
    records to produce (``json`` by default).
    """
    return {
        "key_format": check_format(source.get("key_format"), "key_format", reading=reading),
        "value_format": check_format(source.get("value_format"), "value_format", reading=reading),
        "header_format": check_format(source.get("header_format"), "header_format", header=True),
    }


# Built once: json.dumps with non-default options builds an encoder on every call.
_compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode(data: Any, fmt: str, field: str) -> bytes | None:
    """The bytes a JSON field stands for, in ``fmt``."""
    if data is None:
        return None
    if fmt == "json":
        return _compact_json(data).encode()
    if not isinstance(data, str):
        kind = "a base64 string" if fmt == "binary" else "a string"
        raise RecordError(field, f"must be {kind} (format {fmt})")
    if fmt == "string":
        return data.encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RecordError(field, "is not valid base64") from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def decode(data: bytes | None, fmt: str) -> tuple[Any, str]:
    """(JSON value, format it is in) for bytes read from a topic; falls back to binary.

    ``auto`` tries JSON, then UTF-8 text; the format returned is the one that worked.
    """
    if data is None:
        return None, fmt
    if fmt in ("json", AUTO):
        try:
            return json.loads(data, parse_constant=_not_json), "json"
        except (UnicodeDecodeError, ValueError):
            pass
    if fmt in ("string", AUTO):
        try:
            return data.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), "binary"


def _headers(raw: Any, fmt: str, field: str) -> list[tuple[str, bytes]]:
    if raw is None:
        return []
    items: list[tuple[Any, Any]]
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = []
        for i, h in enumerate(raw):
            if not isinstance(h, dict) or set(h) - {"key", "value"} or "key" not in h:
                raise RecordError(f"{field}[{i}]", 'must be {"key": ..., "value": ...}')
            items.append((h["key"], h.get("value")))
    else:
        raise RecordError(field, 'must be an object or a list of {"key", "value"}')
    out = []
    for name, value in items:
        if not isinstance(name, str) or not name:
            raise RecordError(field, "header keys must be non-empty strings")
        if value is None:
            out.append((name, b""))
            continue
        encoded = encode(value, fmt, f"{field}.{name}")
        out.append((name, encoded or b""))
    return out


RECORD_FIELDS = frozenset({"key", "value", "headers", "partition", "timestamp"})


def parse_record(
    raw: Any, field: str, *, key_format: str, value_format: str, header_format: str
) -> OutRecord:
    if not isinstance(raw, dict):
        raise RecordError(field, "must be an object")
    unknown = set(raw) - RECORD_FIELDS
    if unknown:
        raise RecordError(field, f"unknown fields {', '.join(sorted(unknown))}")
    partition = raw.get("partition")
    if partition is not None and (
        isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
    ):
        raise RecordError(f"{field}.partition", "must be a non-negative integer")
    timestamp = raw.get("timestamp")
    if timestamp is not None and (
        isinstance(timestamp, bool)
        or not isinstance(timestamp, int)
        or not 0 <= timestamp <= MAX_TIMESTAMP
    ):
        raise RecordError(f"{field}.timestamp", "must be milliseconds since the epoch")
    key = encode(raw.get("key"), key_format, f"{field}.key")
    value = encode(raw.get("value"), value_format, f"{field}.value")
    if key is None and value is None:
        raise RecordError(field, "needs a key or a value (a tombstone needs its key)")
    return OutRecord(
        key=key,
        value=value,
        headers=_headers(raw.get("headers"), header_format, f"{field}.headers"),
        partition=partition,
        timestamp_ms=timestamp,
    )


def render_record(
    *,
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    timestamp_type: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    key_format: str,
    value_format: str,
    header_format: str,
) -> dict[str, Any]:
    key_json, kf = decode(key, key_format)
    value_json, vf = decode(value, value_format)
    rendered_headers = []
    for name, raw in headers:
        hv, hf = decode(raw, header_format)
        header = {"key": name, "value": hv}
        if hf != header_format:
            header["format"] = hf
        rendered_headers.append(header)
    out: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp,
        "timestamp_type": timestamp_type,
        "key": key_json,
        "value": value_json,
        "headers": rendered_headers,
    }
    if kf != key_format:
        out["key_format"] = kf
    if vf != value_format:
        out["value_format"] = vf
    return out
