"""Java ``.properties`` files (worker and connector configs, as Kafka Connect reads them)
and connector configs in JSON (``{"name": ..., "config": {...}}`` or a flat map)."""

from __future__ import annotations

import json
from pathlib import Path

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if current == "" and (not line or line[0] in "#!"):
            continue
        # A line ending in an odd number of backslashes continues on the next one.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            current += line[:-1]
            continue
        lines.append(current + line)
        current = ""
    if current:
        lines.append(current)
    return lines


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """``key=value``, ``key: value`` or ``key value`` lines; ``#``/``!`` comments;
    backslash continuations and escapes, as ``java.util.Properties.load``."""
    found: dict[str, str] = {}
    for line in _logical_lines(text):
        i, key_end = 0, None
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                key_end = i
                break
            i += 1
        if key_end is None:
            found[_unescape(line)] = ""
            continue
        key = line[:key_end]
        rest = line[key_end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":") and line[key_end] in " \t\f":
            rest = rest[1:].lstrip(" \t\f")
        elif line[key_end] in "=:":
            rest = line[key_end + 1 :].lstrip(" \t\f")
        found[_unescape(key)] = _unescape(rest)
    return found


def load_config(path: Path) -> dict[str, str]:
    """A properties file, or a JSON connector config (``.json``)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() != ".json":
        return parse_properties(text)
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a connector config is a JSON object")
    if isinstance(data.get("config"), dict):
        config = {str(k): str(v) for k, v in data["config"].items()}
        if "name" in data:
            config.setdefault("name", str(data["name"]))
        return config
    return {str(k): str(v) for k, v in data.items()}
