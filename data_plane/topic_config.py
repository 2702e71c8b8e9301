"""Topic names and the typed schema of per-topic configs.

The schema is the single source of truth for which configs a tenant may set, their
types, ranges and defaults; the control plane validates REST input with it and the
broker (Step 3) reads effective values through it. Values are kept typed (int, bool,
str); Kafka's wire protocol carries them as strings, which :func:`parse_config_value`
accepts as well.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

ConfigValue = int | bool | str


class InvalidTopicName(ValueError):
    """The name breaks Kafka's topic naming rule."""


class InvalidConfig(ValueError):
    """A config key is unknown or its value is out of range; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def validate_topic_name(name: str) -> None:
    """Kafka's rule: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``.

    Names starting with ``__`` are reserved for internal topics (``__consumer_offsets``).
    """
    if not name:
        raise InvalidTopicName("topic name must not be empty")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(
            f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if name in {".", ".."}:
        raise InvalidTopicName("topic name cannot be '.' or '..'")
    if not _LEGAL_TOPIC_CHARS.fullmatch(name):  # "$" would let a trailing newline through
        raise InvalidTopicName(
            "topic name may contain only ASCII letters, digits, '.', '_' and '-'"
        )
    if name.startswith("__"):
        raise InvalidTopicName("topic names starting with '__' are reserved for internal topics")


def topic_collision_key(name: str) -> str:
    """Kafka forbids two topics differing only in '.' vs '_' (their metric names collide)."""
    return name.replace(".", "_")


@dataclass(frozen=True)
class ConfigDef:
    """One topic config: its type, default and the rule a value must satisfy."""

    name: str
    kind: type  # int, bool or str
    default: ConfigValue
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] | None = None
    normalize: Callable[[str], str] | None = None

    def parse(self, raw: object) -> ConfigValue:
        """Validate ``raw`` (a JSON value or Kafka's string form) into a typed value."""
        if self.kind is bool:
            return self._parse_bool(raw)
        if self.kind is int:
            return self._parse_int(raw)
        return self._parse_str(raw)

    def _parse_bool(self, raw: object) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in {"true", "false"}:
            return raw.lower() == "true"
        raise InvalidConfig(self.name, f"{self.name} must be true or false")

    def _parse_int(self, raw: object) -> int:
        if isinstance(raw, bool):
            raise InvalidConfig(self.name, f"{self.name} must be an integer")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and re.fullmatch(r"-?\d+", raw.strip()):
            value = int(raw.strip())
        else:
            raise InvalidConfig(self.name, f"{self.name} must be an integer")
        if self.minimum is not None and value < self.minimum:
            raise InvalidConfig(self.name, f"{self.name} must be at least {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise InvalidConfig(self.name, f"{self.name} must be at most {self.maximum}")
        return value

    def _parse_str(self, raw: object) -> str:
        if not isinstance(raw, str):
            raise InvalidConfig(self.name, f"{self.name} must be a string")
        value = self.normalize(raw) if self.normalize else raw
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(self.choices)
            raise InvalidConfig(self.name, f"{self.name} must be one of: {allowed}")
        return value

    def to_kafka_string(self, value: ConfigValue) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def _normalize_cleanup_policy(raw: str) -> str:
    parts = {part.strip() for part in raw.split(",") if part.strip()}
    if not parts or not parts <= {"delete", "compact"}:
        return raw
    return ",".join(p for p in ("delete", "compact") if p in parts)


def _normalize_ratio(raw: str) -> str:
    try:
        value = float(raw)
    except ValueError:
        raise InvalidConfig(
            "min.cleanable.dirty.ratio", "min.cleanable.dirty.ratio must be a number"
        ) from None
    if not 0.0 <= value <= 1.0:
        raise InvalidConfig(
            "min.cleanable.dirty.ratio", "min.cleanable.dirty.ratio must be between 0 and 1"
        )
    return repr(value)


_WEEK_MS = 7 * 24 * 3600 * 1000

TOPIC_CONFIGS: Mapping[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "retention.ms",
            int,
            _WEEK_MS,
            "How long to keep records before deleting them, in ms; -1 keeps them forever.",
            minimum=-1,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "retention.bytes",
            int,
            -1,
            "Largest size of a partition before its oldest segments are deleted; -1 means "
            "no size limit.",
            minimum=-1,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "cleanup.policy",
            str,
            "delete",
            "delete (by retention), compact (keep the latest record per key), or both.",
            choices=("delete", "compact", "delete,compact"),
            normalize=_normalize_cleanup_policy,
        ),
        ConfigDef(
            "segment.bytes",
            int,
            2**30,
            "Size at which a partition rolls to a new segment file.",
            minimum=2**20,
            maximum=2**30,
        ),
        ConfigDef(
            "segment.ms",
            int,
            _WEEK_MS,
            "Time after which a partition rolls to a new segment even if it is not full.",
            minimum=60_000,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "max.message.bytes",
            int,
            1_048_588,
            "Largest record batch the broker accepts for this topic, in bytes.",
            minimum=1,
            maximum=8 * 2**20,
        ),
        ConfigDef(
            "min.insync.replicas",
            int,
            1,
            "Replicas that must have a write before acks=all succeeds.",
            minimum=1,
            maximum=INT32_MAX,
        ),
        ConfigDef(
            "message.timestamp.type",
            str,
            "CreateTime",
            "Whether record timestamps come from the producer or the broker's append time.",
            choices=("CreateTime", "LogAppendTime"),
        ),
        ConfigDef(
            "unclean.leader.election.enable",
            bool,
            False,
            "Allow an out-of-sync replica to become leader (may lose committed records).",
        ),
        ConfigDef(
            "min.compaction.lag.ms",
            int,
            0,
            "On compacted topics: records younger than this (by timestamp) are never "
            "compacted away, so consumers can see every update for at least this long.",
            minimum=0,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "max.compaction.lag.ms",
            int,
            INT64_MAX,
            "On compacted topics: the longest a record may stay uncompacted; the active "
            "segment is rolled once its first record is this old, so it can be cleaned.",
            minimum=1,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "min.cleanable.dirty.ratio",
            str,
            "0.5",
            "On compacted topics: the cleaner runs only when at least this share (0 to 1) "
            "of the cleanable log has not been compacted yet (max.compaction.lag.ms "
            "overrides it).",
            normalize=_normalize_ratio,
        ),
        ConfigDef(
            "delete.retention.ms",
            int,
            86_400_000,
            "On compacted topics: how long a tombstone (a record with a null value) is kept "
            "after its segment was cleaned, so that consumers can see the deletion.",
            minimum=0,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "segment.index.bytes",
            int,
            10 * 2**20,
            "Size of each segment's offset and time index files; a full index rolls the segment.",
            minimum=4096,
            maximum=INT32_MAX,
        ),
        ConfigDef(
            "file.delete.delay.ms",
            int,
            60_000,
            "How long the files of a deleted segment stay on disk (renamed *.deleted) "
            "before they are removed.",
            minimum=0,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "compression.type",
            str,
            "producer",
            "The codec batches are stored with: producer (as the producer sent them), or "
            "uncompressed, gzip, snappy, lz4 or zstd, to which the broker recompresses "
            "batches that arrive with another codec.",
            choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        ),
        ConfigDef(
            "message.timestamp.before.max.ms",
            int,
            INT64_MAX,
            "With CreateTime: how far a record's timestamp may lie before the broker's "
            "clock, in ms; a batch with an older record is refused (INVALID_TIMESTAMP).",
            minimum=0,
            maximum=INT64_MAX,
        ),
        ConfigDef(
            "message.timestamp.after.max.ms",
            int,
            INT64_MAX,
            "With CreateTime: how far a record's timestamp may lie after the broker's "
            "clock, in ms; a batch with a later record is refused (INVALID_TIMESTAMP).",
            minimum=0,
            maximum=INT64_MAX,
        ),
    )
}


def parse_config_value(key: str, raw: object) -> ConfigValue:
    try:
        definition = TOPIC_CONFIGS[key]
    except KeyError:
        raise InvalidConfig(key, f"unknown topic config {key!r}") from None
    return definition.parse(raw)


def validate_topic_configs(
    overrides: Mapping[str, object], *, replication_factor: int
) -> dict[str, ConfigValue]:
    """Validate every override and the cross-field rules; return typed values.

    Raises :class:`InvalidConfig` naming the first offending key.
    """
    parsed = {key: parse_config_value(key, raw) for key, raw in overrides.items()}
    min_isr = parsed.get("min.insync.replicas", TOPIC_CONFIGS["min.insync.replicas"].default)
    assert isinstance(min_isr, int)
    if min_isr > replication_factor:
        raise InvalidConfig(
            "min.insync.replicas",
            f"min.insync.replicas ({min_isr}) cannot exceed the replication factor "
            f"({replication_factor})",
        )
    return parsed


def effective_configs(overrides: Mapping[str, Any]) -> dict[str, ConfigValue]:
    """Every config's value for a topic: its override, else the default."""
    return {name: overrides.get(name, d.default) for name, d in TOPIC_CONFIGS.items()}
