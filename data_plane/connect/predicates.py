"""Kafka Connect's transform predicates, and Java regular expressions in Python.

A predicate decides whether a transform applies to a record (KIP-585): a connector config
names it under ``predicates`` and a transform refers to it with
``transforms.<alias>.predicate`` (optionally ``negate=true``); see
:func:`data_plane.connect.transforms.build_chain`. The three predicates are Kafka's
``org.apache.kafka.connect.transforms.predicates.*`` with the same config keys.

Kafka's configs hold ``java.util.regex`` patterns; :func:`java_regex` compiles one with
Python's :mod:`re` after translating the syntax that differs (named groups ``(?<n>…)``,
back-references ``\\k<n>`` and ``\\Q…\\E`` quoting).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from data_plane.connect.config import (
    NO_DEFAULT,
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConfigType,
    Importance,
    non_empty,
)
from data_plane.connect.data import ConnectRecord

__all__ = [
    "PREDICATES",
    "HasHeaderKey",
    "Predicate",
    "RecordIsTombstone",
    "TopicNameMatches",
    "java_regex",
    "regex_validator",
]

PREDICATE_PACKAGE = "org.apache.kafka.connect.transforms.predicates."


def _translate_java_regex(pattern: str) -> str:
    """``pattern`` with Java-only syntax rewritten for Python's :mod:`re`."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("\\Q", i):  # quoted up to \E (or the end)
            end = pattern.find("\\E", i + 2)
            end = n if end < 0 else end
            out.append(re.escape(pattern[i + 2 : end]))
            i = end + 2
        elif pattern.startswith("\\k<", i) and (close := pattern.find(">", i + 3)) > 0:
            out.append(f"(?P={pattern[i + 3 : close]})")
            i = close + 1
        elif pattern[i] == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        elif pattern.startswith("(?<", i) and i + 3 < n and pattern[i + 3].isalpha():
            out.append("(?P<")  # a named group; (?<= and (?<! are lookbehinds in both
            i += 3
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def java_regex(name: str, pattern: str) -> re.Pattern[str]:
    """Compile a Java regular expression; a :class:`ConfigException` on ``name`` if invalid."""
    try:
        return re.compile(_translate_java_regex(pattern))
    except re.error as exc:
        raise ConfigException(name, f"invalid regular expression {pattern!r}: {exc}") from None


def regex_validator(name: str, value: Any) -> None:
    """A :class:`ConfigKey` validator: ``value`` is a valid (Java) regular expression."""
    java_regex(name, str(value))


def _non_empty_regex(name: str, value: Any) -> None:
    non_empty(name, value)
    regex_validator(name, value)


class Predicate:
    """A condition on records (Kafka's ``Predicate``): configure, test, close."""

    config_def: ClassVar[ConfigDef] = ConfigDef()

    def configure(self, config: Mapping[str, Any]) -> None:
        """Parse ``config`` (keys without the ``predicates.<alias>.`` prefix)."""
        self._configure(self.config_def.parse(config))

    def _configure(self, parsed: dict[str, Any]) -> None:
        """Take the typed config values (subclasses)."""

    def test(self, record: ConnectRecord) -> bool:
        """Whether ``record`` satisfies the predicate."""
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (none by default)."""


class TopicNameMatches(Predicate):
    """True for records whose topic matches ``pattern`` in full (Java ``matches()``)."""

    config_def = ConfigDef(
        [
            ConfigKey(
                "pattern", ConfigType.STRING, NO_DEFAULT, Importance.MEDIUM,
                "A Java regular expression for matching against the name of a record's topic.",
                validator=_non_empty_regex,
            ),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.pattern = java_regex("pattern", parsed["pattern"])

    def test(self, record: ConnectRecord) -> bool:
        return self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    """True for records with at least one header called ``name``."""

    config_def = ConfigDef(
        [
            ConfigKey(
                "name", ConfigType.STRING, NO_DEFAULT, Importance.MEDIUM,
                "The header name.", validator=non_empty,
            ),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.name: str = parsed["name"]

    def test(self, record: ConnectRecord) -> bool:
        return any(key == self.name for key, _ in record.headers)


class RecordIsTombstone(Predicate):
    """True for tombstones: records whose value is null."""

    def test(self, record: ConnectRecord) -> bool:
        return record.value is None


#: Every predicate by its Kafka class name and by its short name.
PREDICATES: dict[str, type[Predicate]] = {}
for _cls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone):
    PREDICATES[_cls.__name__] = PREDICATES[PREDICATE_PACKAGE + _cls.__name__] = _cls
