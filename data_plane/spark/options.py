"""The `millrace` data source's options, read once and checked with clear messages.

Spark hands options over lower-cased (a case-insensitive dict), so every name here is
looked up in lower case. Credentials come from the ``api.key``/``api.secret`` options, a
``credentials.file`` (JSON ``{"key_id": ..., "secret": ...}`` or ``key_id:secret``), or the
``MILLRACE_API_KEY``/``MILLRACE_API_SECRET`` environment variables of the Spark driver and
executors; the secret is never part of a message or of ``repr``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EARLIEST, LATEST = -2, -1
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


class OptionError(ValueError):
    """An option is missing or wrong; the message says which and how to fix it."""


@dataclass(frozen=True)
class Credentials:
    key_id: str
    secret: str = field(repr=False)


@dataclass(frozen=True)
class Settings:
    bootstrap: tuple[tuple[str, int], ...]
    credentials: Credentials
    mechanism: str
    topics: tuple[str, ...]
    # Per topic, the partitions to read (None: every partition).
    partitions: dict[str, tuple[int, ...] | None]
    starting: Any  # "earliest" / "latest" / {"topic": {"0": offset}} / {"timestamp": ms}
    ending: Any
    max_records_per_trigger: int | None
    timeout: float
    # isolation.level (also Spark's Kafka name kafka.isolation.level): read_committed by
    # default, committed transactions' records only, up to the last stable offset.
    read_committed: bool = True


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    return None if value is None or value == "" else str(value)


def _bootstrap(raw: str | None) -> tuple[tuple[str, int], ...]:
    if not raw:
        raise OptionError(
            "option 'bootstrap.servers' is required: the brokers, such as "
            "'broker1:9092,broker2:9092'"
        )
    out = []
    for part in raw.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"bootstrap.servers: {part.strip()!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return tuple(out)


def credentials(options: Mapping[str, str]) -> Credentials:
    key, secret = _get(options, "api.key"), _get(options, "api.secret")
    path = _get(options, "credentials.file")
    if (key is None) != (secret is None):
        raise OptionError("give both 'api.key' and 'api.secret', or neither")
    if key is None and path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
        except OSError as exc:
            raise OptionError(f"credentials.file {path!r} cannot be read: {exc.strerror}") from None
        if text.startswith("{"):
            try:
                data = json.loads(text)
                key, secret = str(data["key_id"]), str(data["secret"])
            except (ValueError, KeyError, TypeError):
                raise OptionError(
                    f'credentials.file {path!r}: expected {{"key_id": ..., "secret": ...}}'
                ) from None
        else:
            key, _, secret = text.partition(":")
            if not key or not secret:
                raise OptionError(f"credentials.file {path!r}: expected key_id:secret")
    if key is None:
        key, secret = os.environ.get("MILLRACE_API_KEY"), os.environ.get("MILLRACE_API_SECRET")
    if not key or not secret:
        raise OptionError(
            "no API key: set the options 'api.key' and 'api.secret', the option "
            "'credentials.file', or MILLRACE_API_KEY and MILLRACE_API_SECRET"
        )
    return Credentials(key, secret)


def _positions(raw: str | None, name: str, default: str) -> Any:
    value = raw or default
    if value in ("earliest", "latest"):
        return value
    try:
        data = json.loads(value)
    except ValueError:
        raise OptionError(
            f"{name} is 'earliest', 'latest' or JSON such as "
            '{"orders": {"0": 42, "1": -2}} (-2 earliest, -1 latest)'
        ) from None
    if not isinstance(data, dict) or not all(
        isinstance(t, str)
        and isinstance(ps, dict)
        and all(str(p).isdigit() and isinstance(o, int) for p, o in ps.items())
        for t, ps in data.items()
    ):
        raise OptionError(f"{name}: expected {{topic: {{partition: offset}}}}")
    return {t: {int(p): o for p, o in ps.items()} for t, ps in data.items()}


def _timestamp(raw: str | None, name: str) -> int | None:
    if raw is None:
        return None
    if not raw.lstrip("-").isdigit() or int(raw) < 0:
        raise OptionError(f"{name} is milliseconds since the epoch, such as 1767225600000")
    return int(raw)


def _topics(options: Mapping[str, str]) -> dict[str, tuple[int, ...] | None]:
    subscribe, assign = (
        _get(options, "subscribe") or _get(options, "topic"),
        _get(options, "assign"),
    )
    if (subscribe is None) == (assign is None):
        raise OptionError(
            "give one of 'subscribe' (topic names separated by commas) or 'assign' "
            '(JSON such as {"orders": [0, 1]})'
        )
    if subscribe is not None:
        names = [t.strip() for t in subscribe.split(",") if t.strip()]
        if not names:
            raise OptionError("subscribe: name at least one topic")
        return dict.fromkeys(names)
    try:
        data = json.loads(assign or "")
    except ValueError:
        data = None
    if (
        not isinstance(data, dict)
        or not data
        or not all(
            isinstance(ps, list) and ps and all(isinstance(p, int) and p >= 0 for p in ps)
            for ps in data.values()
        )
    ):
        raise OptionError('assign: expected JSON such as {"orders": [0, 1]}')
    return {str(t): tuple(sorted(set(ps))) for t, ps in data.items()}


@dataclass(frozen=True)
class WriteSettings:
    bootstrap: tuple[tuple[str, int], ...]
    credentials: Credentials
    mechanism: str
    topic: str | None  # None: each row's 'topic' column
    timeout: float


def _connection(options: Mapping[str, str]) -> tuple[str, float]:
    mechanism = (_get(options, "sasl.mechanism") or MECHANISMS[0]).upper()
    if mechanism not in MECHANISMS:
        raise OptionError(f"sasl.mechanism is one of {', '.join(MECHANISMS)}")
    timeout = _get(options, "timeout.seconds") or "30"
    try:
        seconds = float(timeout)
    except ValueError:
        raise OptionError("timeout.seconds is a number of seconds") from None
    if seconds <= 0:
        raise OptionError("timeout.seconds must be more than 0")
    return mechanism, seconds


def write_settings(options: Mapping[str, str]) -> WriteSettings:
    """Every option of a write, checked; OptionError says what is wrong."""
    mechanism, timeout = _connection(options)
    return WriteSettings(
        bootstrap=_bootstrap(_get(options, "bootstrap.servers")),
        credentials=credentials(options),
        mechanism=mechanism,
        topic=_get(options, "topic"),
        timeout=timeout,
    )


def settings(options: Mapping[str, str], *, streaming: bool = False) -> Settings:
    """Every option of a read, checked; OptionError says what is wrong."""
    partitions = _topics(options)
    starting: Any = _positions(
        _get(options, "startingoffsets"), "startingOffsets", "latest" if streaming else "earliest"
    )
    ending: Any = _positions(_get(options, "endingoffsets"), "endingOffsets", "latest")
    start_ts = _timestamp(_get(options, "startingtimestamp"), "startingTimestamp")
    end_ts = _timestamp(_get(options, "endingtimestamp"), "endingTimestamp")
    if start_ts is not None:
        starting = {"timestamp": start_ts}
    if end_ts is not None:
        if streaming:
            raise OptionError("endingTimestamp is for batch reads; a stream has no end")
        ending = {"timestamp": end_ts}
    if streaming and _get(options, "endingoffsets"):
        raise OptionError("endingOffsets is for batch reads; a stream has no end")
    limit = _get(options, "maxrecordspertrigger") or _get(options, "maxoffsetspertrigger")
    if limit is not None and (not limit.isdigit() or int(limit) < 1):
        raise OptionError("maxRecordsPerTrigger is a whole number of at least 1")
    mechanism, seconds = _connection(options)
    isolation = (
        _get(options, "isolation.level")
        or _get(options, "kafka.isolation.level")
        or "read_committed"
    )
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError(
            f"isolation.level is read_committed (the default) or read_uncommitted, not "
            f"{isolation!r}"
        )
    return Settings(
        bootstrap=_bootstrap(_get(options, "bootstrap.servers")),
        credentials=credentials(options),
        mechanism=mechanism,
        topics=tuple(partitions),
        partitions=partitions,
        starting=starting,
        ending=ending,
        max_records_per_trigger=int(limit) if limit else None,
        timeout=seconds,
        read_committed=isolation == "read_committed",
    )
