"""Client quotas (KIP-546): quota values set on ``user`` and ``client-id`` entities of a
tenant, how a request's (user, client id) resolves to one of them, and how a
DescribeClientQuotas filter matches them.

Pure: no I/O, no Django. The control plane validates and stores quotas with it; the
broker resolves and describes them with it.

An entity is a tuple of (entity type, name) pairs sorted by type, one pair per type, a
name of None meaning the type's *default* entity (Kafka's ``<default>``): ``(("user",
"alice"),)``, ``(("client-id", None), ("user", "alice"))``. Values are per key, Kafka's
units (bytes per second for the byte rates).

Millrace serves the byte-rate keys only. ``request_percentage`` and
``controller_mutation_rate`` are Kafka keys Millrace does not enforce, so they are refused
rather than stored to no effect; so is the ``ip`` entity (connection_creation_rate).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
# The quota key of a broker direction ("produce", "fetch"), and back.
KEY_OF_DIRECTION = {"produce": PRODUCER_BYTE_RATE, "fetch": CONSUMER_BYTE_RATE}
SERVED_KEYS = frozenset(KEY_OF_DIRECTION.values())
NOT_ENFORCED_KEYS = frozenset(
    {"request_percentage", "controller_mutation_rate", "connection_creation_rate"}
)
# How the control plane stores a default entity's name (Kafka's ZooKeeper spelling), so
# the name may not be used literally.
DEFAULT_NAME = "<default>"
MAX_NAME_LENGTH = 255

# DescribeClientQuotas match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]


class InvalidQuota(ValueError):
    """An entity, key or value Millrace cannot accept (Kafka's INVALID_REQUEST)."""


@dataclass(frozen=True)
class ClientQuota:
    """The quota values set on one entity of a tenant."""

    entity: Entity
    values: Mapping[str, float]

    def name(self, entity_type: str) -> str | None:
        return dict(self.entity)[entity_type]


def make_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of a request's (type, name) pairs, validated; raises :class:`InvalidQuota`."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type == IP:
            raise InvalidQuota("ip quotas (connection_creation_rate) are not supported")
        if entity_type not in (USER, CLIENT_ID):
            raise InvalidQuota(f"unknown entity type {entity_type!r}")
        if entity_type in seen:
            raise InvalidQuota(f"entity type {entity_type!r} is given twice")
        if name is not None and not name:
            raise InvalidQuota(f"an empty {entity_type} name is not allowed")
        if name is not None and (name == DEFAULT_NAME or len(name) > MAX_NAME_LENGTH):
            raise InvalidQuota(f"invalid {entity_type} name {name!r}")
        seen[entity_type] = name
    if not seen:
        raise InvalidQuota("the entity names no user or client-id")
    return tuple(sorted(seen.items()))


def check_value(key: str, value: float, ceiling: int | None) -> None:
    """Raise :class:`InvalidQuota` if ``key`` cannot be set to ``value``.

    ``ceiling`` is the tenant's byte rate for the key's direction; a value above it is a
    policy refusal and raises :class:`QuotaAboveCeiling`.
    """
    check_key(key)
    if not value > 0 or value != value or value == float("inf"):
        raise InvalidQuota(f"{key} must be a positive number, not {value}")
    if ceiling is not None and value > ceiling:
        raise QuotaAboveCeiling(f"{key} {value:g} exceeds the tenant's limit of {ceiling} bytes/s")


def check_key(key: str) -> None:
    if key in NOT_ENFORCED_KEYS:
        raise InvalidQuota(f"{key} is not enforced by Millrace, so it cannot be set")
    if key not in SERVED_KEYS:
        raise InvalidQuota(f"unknown quota key {key!r}")


class QuotaAboveCeiling(InvalidQuota):
    """A byte rate above the tenant's own limit (Kafka's POLICY_VIOLATION)."""


def ceilings(produce_byte_rate: int, fetch_byte_rate: int) -> dict[str, int]:
    """The highest value of each key a tenant with these limits may set."""
    return {PRODUCER_BYTE_RATE: produce_byte_rate, CONSUMER_BYTE_RATE: fetch_byte_rate}


def altered(
    current: Mapping[str, float],
    changes: Mapping[str, float | None],
    limits: Mapping[str, int],
) -> dict[str, float]:
    """An entity's values after ``changes`` (key -> new value, None to remove), every
    change checked against ``limits`` (:func:`ceilings`); raises :class:`InvalidQuota`."""
    values = dict(current)
    for key, value in changes.items():
        if value is None:
            check_key(key)
            values.pop(key, None)
        else:
            check_value(key, value, limits.get(key))
            values[key] = float(value)
    return values


def resolve(
    quotas: Sequence[ClientQuota], user: str, client_id: str, key: str
) -> tuple[float, Entity] | None:
    """The quota ``key`` that applies to a request of ``user`` with ``client_id``, and the
    entity it was set on with the request's own names filled in for defaults (the identity
    of the bucket it is counted in), or None when no quota applies.

    Kafka's precedence, most specific first: (user, client-id), (user, default client),
    user, (default user, client-id), (default user, default client), default user,
    client-id, default client.
    """
    if not quotas:
        return None
    by_entity = {q.entity: q.values for q in quotas}
    for u, c in _PRECEDENCE:
        entity: list[tuple[str, str | None]] = []
        if c is not None:
            entity.append((CLIENT_ID, client_id if c else None))
        if u is not None:
            entity.append((USER, user if u else None))
        values = by_entity.get(tuple(entity))
        if values is not None and key in values:
            bucket = tuple((t, user if t == USER else client_id) for t, _ in entity)
            return values[key], bucket
    return None


# (user, client-id) of each precedence step: True the request's name, False the default,
# None the type is not part of the entity.
_PRECEDENCE: tuple[tuple[bool | None, bool | None], ...] = (
    (True, True),
    (True, False),
    (True, None),
    (False, True),
    (False, False),
    (False, None),
    (None, True),
    (None, False),
)


@dataclass(frozen=True)
class Component:
    """One DescribeClientQuotas filter component."""

    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Sequence[Component]) -> None:
    """Raise :class:`InvalidQuota` for a filter Kafka would refuse."""
    seen: set[str] = set()
    for c in components:
        if c.entity_type == IP:
            raise InvalidQuota("ip quotas (connection_creation_rate) are not supported")
        if c.entity_type not in (USER, CLIENT_ID):
            raise InvalidQuota(f"unknown entity type {c.entity_type!r}")
        if c.entity_type in seen:
            raise InvalidQuota(f"entity type {c.entity_type!r} is given twice")
        seen.add(c.entity_type)
        if c.match_type == MATCH_EXACT and c.match is None:
            raise InvalidQuota(f"an exact match of {c.entity_type} needs a name")
        if c.match_type in (MATCH_DEFAULT, MATCH_ANY) and c.match is not None:
            raise InvalidQuota(f"match type {c.match_type} takes no name")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidQuota(f"unknown match type {c.match_type}")


def matches(quota: ClientQuota, components: Sequence[Component], strict: bool) -> bool:
    """Whether the quota's entity passes the filter: every component matches its type's
    name, and (strict) the entity has no other types."""
    names = dict(quota.entity)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or len(names) == len(components)
