"""Durations as people say them: an amount and a unit, or "forever" (Kafka's -1)."""

from __future__ import annotations

from control_plane.core.errors import InvalidInput

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
