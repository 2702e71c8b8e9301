"""Connector, task and worker configuration: Kafka's ``ConfigDef`` in small.

Configs arrive as string maps (REST bodies, properties files), as in Kafka Connect. A
:class:`ConfigDef` names each key's type, default, importance, documentation and
validator; :meth:`ConfigDef.parse` turns the strings into typed values or raises
:class:`ConfigException` naming the first bad key, and :meth:`ConfigDef.validate` reports
every key's errors at once in the shape of Kafka Connect's
``PUT /connector-plugins/{plugin}/config/validate`` answer.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class ConfigException(ValueError):
    """A configuration value is missing or invalid; ``name`` is the key."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class ConfigType(enum.Enum):
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"
    CLASS = "CLASS"
    PASSWORD = "PASSWORD"


class Importance(enum.Enum):
    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"


NO_DEFAULT = object()
Validator = Callable[[str, Any], None]  # raises ConfigException


def parse_value(name: str, kind: ConfigType, raw: Any) -> Any:
    """A string (or already typed) value as ``kind``."""
    if raw is None:
        return None
    text = raw.strip() if isinstance(raw, str) else raw
    try:
        if kind is ConfigType.BOOLEAN:
            if isinstance(text, bool):
                return text
            if str(text).lower() in ("true", "false"):
                return str(text).lower() == "true"
            raise ValueError
        if kind in (ConfigType.INT, ConfigType.LONG):
            if isinstance(text, bool):
                raise ValueError
            value = int(text)
            if kind is ConfigType.INT and not -(2**31) <= value < 2**31:
                raise ValueError
            return value
        if kind is ConfigType.DOUBLE:
            return float(text)
        if kind is ConfigType.LIST:
            if isinstance(text, list | tuple):
                return [str(v).strip() for v in text]
            return [part.strip() for part in str(text).split(",") if part.strip()]
        return str(raw) if kind is ConfigType.PASSWORD else str(text)
    except (TypeError, ValueError):
        expected = {
            ConfigType.BOOLEAN: "true or false",
            ConfigType.INT: "a 32-bit integer",
            ConfigType.LONG: "an integer",
            ConfigType.DOUBLE: "a number",
        }.get(kind, kind.value)
        raise ConfigException(name, f"invalid value {raw!r}: expected {expected}") from None


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any = NO_DEFAULT
    importance: Importance = Importance.MEDIUM
    doc: str = ""
    validator: Validator | None = None
    group: str | None = None
    display_name: str | None = None

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    def definition(self) -> dict[str, Any]:
        """The key as Kafka Connect's validation answer describes it."""
        default = None if self.default is NO_DEFAULT else self.default
        if isinstance(default, list):
            default = ",".join(default)
        return {
            "name": self.name,
            "type": self.type.value,
            "required": self.required,
            "default_value": None
            if default is None
            else str(default).lower()
            if isinstance(default, bool)
            else str(default),
            "importance": self.importance.value,
            "documentation": self.doc,
            "group": self.group,
            "width": "NONE",
            "display_name": self.display_name or self.name,
            "dependents": [],
            "order": -1,
        }


class ConfigDef:
    def __init__(self, keys: Iterable[ConfigKey] = ()) -> None:
        self.keys: dict[str, ConfigKey] = {}
        for key in keys:
            self.define(key)

    def define(self, key: ConfigKey) -> ConfigDef:
        if key.name in self.keys:
            raise ValueError(f"config {key.name!r} defined twice")
        self.keys[key.name] = key
        return self

    def merged(self, other: ConfigDef) -> ConfigDef:
        return ConfigDef([*self.keys.values(), *other.keys.values()])

    def parse_key(self, key: ConfigKey, raw: Mapping[str, Any]) -> Any:
        if key.name not in raw or raw[key.name] is None:
            if key.required:
                raise ConfigException(key.name, "missing required configuration")
            value = key.default
        else:
            value = parse_value(key.name, key.type, raw[key.name])
        if key.validator is not None and value is not None:
            key.validator(key.name, value)
        return value

    def parse(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Typed values of every defined key (unknown keys are left to the caller)."""
        return {name: self.parse_key(key, raw) for name, key in self.keys.items()}

    def errors(self, raw: Mapping[str, Any]) -> dict[str, list[str]]:
        """Every defined key's errors (empty lists where it is fine)."""
        found: dict[str, list[str]] = {}
        for name, key in self.keys.items():
            try:
                self.parse_key(key, raw)
                found[name] = []
            except ConfigException as exc:
                found[name] = [exc.message]
        return found

    def validate(self, raw: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Kafka Connect's ``configs`` entries: each key's definition and its value."""
        errors = self.errors(raw)
        entries = []
        for name, key in self.keys.items():
            value = raw.get(name)
            if value is not None and key.type is ConfigType.PASSWORD:
                value = "[hidden]"
            elif value is None and not key.required:
                value = key.definition()["default_value"]
            entries.append(
                {
                    "definition": key.definition(),
                    "value": {
                        "name": name,
                        "value": value,
                        "recommended_values": [],
                        "errors": errors[name],
                        "visible": True,
                    },
                }
            )
        return entries


# --- validators ---------------------------------------------------------------------------


def at_least(minimum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise ConfigException(name, f"must be at least {minimum}, not {value}")

    return check


def in_range(minimum: float, maximum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if not minimum <= value <= maximum:
            raise ConfigException(name, f"must be between {minimum} and {maximum}, not {value}")

    return check


def one_of(*choices: str, case_sensitive: bool = False) -> Validator:
    def check(name: str, value: Any) -> None:
        ok = (
            value in choices
            if case_sensitive
            else str(value).lower() in {c.lower() for c in choices}
        )
        if not ok:
            raise ConfigException(name, f"must be one of {', '.join(choices)}, not {value!r}")

    return check


def non_empty(name: str, value: Any) -> None:
    if value == "" or value == []:
        raise ConfigException(name, "must not be empty")
