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


@register.filter
def seconds(value: float | None) -> str:
    """A lag in seconds, readably: 0 s, 4.2 s, 3 min 20 s, 2 h 5 min."""
    if value is None:
        return "\u2013"
    if value < 60:
        return f"{value:.1f} s".replace(".0 s", " s")
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


@register.filter
def filesize(value: int | None) -> str:
    """Bytes in binary units: 512 B, 1.5 KiB, 20.0 MiB."""
    if value is None:
        return "\u2013"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


@register.filter
def get(mapping: dict[str, object] | None, key: str) -> object:
    """``mapping[key]``, or None: for keys a template cannot spell (``retention.ms``)."""
    return (mapping or {}).get(key)
