"""File source and sink, as Kafka's FileStream connectors (for demos and tests).

* ``FileStreamSource``: each line of ``file`` (UTF-8, without its newline) becomes a
  record of ``topic`` with a string value and no key; the source partition is
  ``{"filename": <file>}`` and the offset ``{"position": <byte after the line>}``, so a
  restarted task goes on after the last committed line. Lines are read as the file grows
  (a line counts once its newline is written). One task.
* ``FileStreamSink``: each record's value (a string as it is; a struct, map or array
  as JSON; ``null`` for a tombstone) is appended to ``file`` as a line; ``flush``
  fsyncs, so the group's offsets are committed only for lines on disk.

When the worker sets ``file.root`` (hosted workers do), ``file`` must resolve inside
that directory (relative names are taken from it); without it, any path the worker's
user may open (a standalone worker on one's own machine, as in Kafka).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from data_plane.connect.api import (
    SinkConnector,
    SinkTask,
    SourceConnector,
    SourceTask,
    TopicPartition,
)
from data_plane.connect.config import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConfigType,
    Importance,
    at_least,
    non_empty,
)
from data_plane.connect.data import STRING_SCHEMA, ConnectRecord, Struct

FILE_ROOT = "file.root"  # the worker config key


def resolve(path: str, root: str | None) -> str:
    """``path`` as the task will open it; inside ``root`` when one is set."""
    if not root:
        return path
    base = Path(root).resolve()
    full = (base / path).resolve()
    if full != base and base not in full.parents:
        raise ConfigException("file", f"{path!r} is outside the directory this worker allows")
    return str(full)


class _FileConnector:
    worker_config: Mapping[str, str]

    def _file_errors(self, config: Mapping[str, str], required: bool) -> dict[str, list[str]]:
        path = (config.get("file") or "").strip()
        if not path:
            return {"file": ["missing required configuration"]} if required else {}
        try:
            resolve(path, self.worker_config.get(FILE_ROOT))
        except ConfigException as exc:
            return {"file": [exc.message]}
        return {}


class FileStreamSourceConnector(_FileConnector, SourceConnector):
    version = "1.0"
    doc = "Reads the lines of a file into a topic."
    config_def = ConfigDef(
        [
            ConfigKey("file", ConfigType.STRING, importance=Importance.HIGH, doc="the file to read", validator=non_empty),  # noqa: E501
            ConfigKey("topic", ConfigType.STRING, importance=Importance.HIGH, doc="the topic to write", validator=non_empty),  # noqa: E501
            ConfigKey("batch.size", ConfigType.INT, 2000, doc="most lines per poll", validator=at_least(1)),  # noqa: E501
        ]
    )  # fmt: skip

    def validate(self, config: Mapping[str, str]) -> dict[str, list[str]]:
        errors = super().validate(config)
        for key, found in self._file_errors(config, required=True).items():
            errors[key] = found
        return errors

    def task_class(self) -> type[SourceTask]:
        return FileStreamSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        path = resolve(self.raw["file"].strip(), self.worker_config.get(FILE_ROOT))
        return [{**self.raw, "file": path}]


class FileStreamSourceTask(SourceTask):
    config_def = FileStreamSourceConnector.config_def

    def __init__(self) -> None:
        super().__init__()
        self._file: IO[bytes] | None = None
        self._position = 0
        self._partition: dict[str, Any] = {}

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        self._partition = {"filename": self.config["file"]}
        assert self.context is not None
        stored = self.context.offset(self._partition)
        self._position = int(stored["position"]) if stored else 0

    def _open(self) -> IO[bytes] | None:
        if self._file is None:
            try:
                self._file = open(self.config["file"], "rb")
            except FileNotFoundError:
                return None
            self._file.seek(self._position)
        return self._file

    def poll(self) -> Sequence[ConnectRecord]:
        f = self._open()
        if f is None:
            time.sleep(0.2)  # the file is not there yet
            return []
        records = []
        for _ in range(self.config["batch.size"]):
            line = f.readline()
            if not line.endswith(b"\n"):
                f.seek(self._position)  # a partial line: read it again once complete
                break
            self._position += len(line)
            records.append(
                ConnectRecord(
                    topic=self.config["topic"],
                    partition=None,
                    key_schema=None,
                    key=None,
                    value_schema=STRING_SCHEMA,
                    value=line[:-1].decode("utf-8", errors="replace").removesuffix("\r"),
                    source_partition=self._partition,
                    source_offset={"position": self._position},
                )
            )
        if not records:
            time.sleep(0.1)
        return records

    def stop(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class FileStreamSinkConnector(_FileConnector, SinkConnector):
    version = "1.0"
    doc = "Appends the values of a topic's records to a file, a line each."
    config_def = ConfigDef(
        [ConfigKey("file", ConfigType.STRING, "", importance=Importance.HIGH, doc="the file to append to (empty: standard output)")]  # noqa: E501
    )  # fmt: skip

    def validate(self, config: Mapping[str, str]) -> dict[str, list[str]]:
        errors = super().validate(config)
        hosted = bool(self.worker_config.get(FILE_ROOT))
        for key, found in self._file_errors(config, required=hosted).items():
            errors[key] = found
        return errors

    def task_class(self) -> type[SinkTask]:
        return FileStreamSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """``tasks.max`` tasks, as Kafka's: they share the topics' partitions through the
        connector's group and append to the same file, a whole line per write."""
        path = (self.raw.get("file") or "").strip()
        if path:
            path = resolve(path, self.worker_config.get(FILE_ROOT))
        return [{**self.raw, "file": path} for _ in range(max_tasks)]


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.as_dict()
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _line(value: Any) -> str:
    """A value as a line: strings as they are, structs, maps and arrays as JSON."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, Struct | dict | list):
        return json.dumps(_plain(value) if isinstance(value, Struct) else value,
                          default=_plain, ensure_ascii=False)  # fmt: skip
    return _plain(value) if isinstance(value, bytes | bytearray) else str(value)


class FileStreamSinkTask(SinkTask):
    """Appends with ``O_APPEND`` and one ``write`` per batch, so the tasks of one connector
    (or two workers) appending to the same file never split each other's lines."""

    config_def = FileStreamSinkConnector.config_def

    def __init__(self) -> None:
        super().__init__()
        self._fd: int | None = None  # None: standard output

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        path = self.config["file"]
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def put(self, records: Sequence[ConnectRecord]) -> None:
        data = "".join(_line(record.value) + "\n" for record in records)
        if self._fd is None:
            sys.stdout.write(data)
            sys.stdout.flush()
            return
        view = memoryview(data.encode("utf-8"))
        while view:  # readable at once (tail -f); durable at flush()
            view = view[os.write(self._fd, view) :]

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def stop(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
