"""What people type into the console's forms: whole numbers, times (UTC), and durations as
an amount and a unit, or "forever" (Kafka's -1)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime

from control_plane.core.errors import InvalidInput


def whole_number(raw: str, field: str, lo: int | None = None, hi: int | None = None) -> int:
    """``raw`` as an int within [lo, hi]; InvalidInput on ``field`` otherwise."""
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidInput("enter a whole number", field=field) from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InvalidInput(f"must be {bound}", field=field)
    return value


def utc_time(raw: str, field: str) -> datetime | None:
    """A ``datetime-local`` value (or any ISO 8601 time) as UTC; naive means UTC."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = parse_datetime(raw)
        if value is None:
            raise ValueError(raw)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidInput(
            "enter a date and time, such as 2026-11-21T09:30 (UTC)", field=field
        ) from None


def epoch_ms(raw: str, field: str) -> int:
    """A required time (see :func:`utc_time`) in milliseconds since the epoch."""
    stamp = utc_time(raw, field)
    if stamp is None:
        raise InvalidInput("enter a date and time, such as 2026-11-21T09:30 (UTC)", field=field)
    return int(stamp.timestamp() * 1000)


# Retention as people say it; the form sends an amount and one of these units.
DURATION_UNITS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(amount: str, unit: str, field: str) -> int:
    """Milliseconds for ``amount`` ``unit`` ("forever" is -1, Kafka's unlimited)."""
    if unit == "forever":
        return -1
    if unit not in DURATION_UNITS:
        raise InvalidInput(
            f"unit must be one of {', '.join(DURATION_UNITS)} or forever", field=field
        )
    try:
        value = int(amount.strip())
    except ValueError:
        raise InvalidInput("enter a whole number", field=field) from None
    if value < 0:
        raise InvalidInput("enter a number of 0 or more", field=field)
    return value * DURATION_UNITS[unit]


def split_duration(ms: int) -> tuple[str, str]:
    """(amount, unit) in the largest unit that divides ``ms`` exactly."""
    if ms < 0:
        return "", "forever"
    for unit in ("d", "h", "min", "s"):
        size = DURATION_UNITS[unit]
        if ms and ms % size == 0:
            return str(ms // size), unit
    return str(ms), "ms"
