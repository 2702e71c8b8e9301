"""Where source connectors' offsets are kept between runs.

Kafka Connect keys a source offset by the connector's name and the source partition (a
map the connector chooses, e.g. ``{"filename": "/var/log/app.log"}``) and stores the
offset map for it. Standalone workers keep them in a local file
(``offset.storage.file.filename``); distributed workers in the tenant's compacted offsets
topic (Step 14, later). Keys are serialised as Kafka Connect's JSON converter would:
``["<connector>", {partition map}]`` with the map's keys sorted, so a partition map
compares by value.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol


def offset_key(connector: str, partition: Mapping[str, Any]) -> str:
    """The offsets topic's key of a source partition (Kafka Connect's JSON array)."""
    last = _last_key.get(connector)
    if last is not None and last[0] is partition:
        return last[1]  # a source sends many records of one partition object
    key = json.dumps([connector, dict(partition)], sort_keys=True, separators=(",", ":"))
    if not isinstance(partition, dict):
        return key  # may be mutable in ways we cannot see; not cached
    _last_key[connector] = (partition, key)
    return key


# The last partition object seen per connector and its key. A connector must not mutate a
# partition map it has handed out (Kafka Connect's rule too: the worker keeps them).
_last_key: dict[str, tuple[Mapping[str, Any], str]] = {}


class OffsetStore(Protocol):
    def get(self, connector: str, partition: Mapping[str, Any]) -> dict[str, Any] | None: ...

    def put(self, connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> None:
        """``offsets``: partition key (:func:`offset_key`) to offset (None removes it);
        durable when it returns."""

    def connector_offsets(self, connector: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(partition, offset) pairs of a connector (REST ``GET .../offsets``)."""


class OffsetReads:
    """Reads of offsets kept in ``_data`` (offset key → offset) under ``_lock``."""

    _lock: threading.Lock
    _data: dict[str, dict[str, Any]]

    def get(self, connector: str, partition: Mapping[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            found = self._data.get(offset_key(connector, partition))
            return dict(found) if found is not None else None

    def connector_offsets(self, connector: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        with self._lock:
            found = []
            for key, offset in sorted(self._data.items()):
                name, partition = json.loads(key)
                if name == connector:
                    found.append((partition, dict(offset)))
            return found


class FileOffsetStore(OffsetReads):
    """A JSON file, rewritten whole through a temporary file, fsync and rename, so a
    crash leaves either the old offsets or the new ones. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        if path.exists():
            loaded = json.loads(path.read_text() or "{}")
            if not isinstance(loaded, dict):
                raise ValueError(f"{path}: not an offsets file")
            self._data = loaded

    def put(self, connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> None:
        if not offsets:
            return
        with self._lock:
            for key, offset in offsets.items():
                if json.loads(key)[0] != connector:
                    raise ValueError(f"offset key {key} is not of connector {connector!r}")
                if offset is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = dict(offset)
            self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self._data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
