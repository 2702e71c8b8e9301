"""Small display filters for the console."""

from __future__ import annotations

from django import template

from frontend.units import split_duration

register = template.Library()


@register.filter
def duration_ms(value: int | None) -> str:
    """7 d for 604800000; 'forever' for -1."""
    if value is None:
        return "forever"
    amount, unit = split_duration(value)
    return "forever" if unit == "forever" else f"{amount} {unit}"
