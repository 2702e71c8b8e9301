"""Small display filters for the console."""

from __future__ import annotations

from django import template

register = template.Library()

_UNITS = [("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)]


@register.filter
def duration_ms(value: int) -> str:
    """7 days for 604800000; 'forever' for -1."""
    if value is None or value < 0:
        return "forever"
    for unit, size in _UNITS:
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} ms"
