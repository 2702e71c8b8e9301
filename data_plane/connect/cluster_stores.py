"""A distributed Connect cluster's state in three compacted topics, in Kafka Connect's
formats (JSON values, as its JsonConverter writes them without schemas):

* configs: ``connector-<name>`` → ``{"properties": {...}}``; ``task-<name>-<n>`` →
  ``{"properties": {...}}``; ``commit-<name>`` → ``{"tasks": N}`` (the task configs
  written before it take effect together, only once it is read); ``target-state-<name>``
  → ``{"state": "STARTED" | "PAUSED" | "STOPPED"}``; a null value deletes.
* offsets: ``["<connector>", {partition}]`` → the source offset (``null``: reset).
* status: ``status-connector-<name>`` and ``status-task-<name>-<n>`` →
  ``{"state", "trace", "worker_id", "generation"}``.

Each store keeps its topic's current view in memory (:class:`~data_plane.connect.
kafka_log.KafkaBasedLog` feeds it) and writes through the topic, so every worker sees
the same history in the same order.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from data_plane.connect.kafka_log import KafkaBasedLog
from data_plane.connect.offsets import OffsetReads, offset_key

logger = logging.getLogger(__name__)

TARGET_STATES = ("STARTED", "PAUSED", "STOPPED")
_TASK_KEY = re.compile(r"^task-(.+)-(\d+)$")
_RESTART_TASK_KEY = re.compile(r"^restart-task-(.+)-(\d+)$")


def _json(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class RestartRequest:
    """``restart-connector-<name>`` (Kafka's KIP-745 record) or, Millrace's own,
    ``restart-task-<name>-<n>``: restart the connector (and with ``include_tasks`` its
    tasks; with ``only_failed`` only what failed), or one task."""

    connector: str
    task: int | None = None
    include_tasks: bool = False
    only_failed: bool = False


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """A snapshot of the configs topic as far as it was read (``offset``: records seen)."""

    offset: int
    connectors: dict[str, dict[str, str]]
    tasks: dict[str, list[dict[str, str]]]  # committed task configs per connector
    target_states: dict[str, str]

    def target_state(self, name: str) -> str:
        return self.target_states.get(name, "STARTED")


class ConfigStore:
    def __init__(self, log_factory: Callable[[Callable[..., None]], KafkaBasedLog]) -> None:
        self._lock = threading.Lock()
        self._connectors: dict[str, dict[str, str]] = {}
        self._pending_tasks: dict[str, dict[int, dict[str, str]]] = {}
        self._tasks: dict[str, list[dict[str, str]]] = {}
        self._targets: dict[str, str] = {}
        self._seen = 0
        self.listeners: list[Callable[[], None]] = []
        # Restart requests written after this store was read to its end (older ones are
        # history: they were acted on when they were new).
        self.restarts: list[RestartRequest] = []
        self._started = False
        self.log = log_factory(self._on_record)

    def start(self, timeout: float = 30.0) -> None:
        self.log.start(timeout)
        self._started = True

    def take_restarts(self) -> list[RestartRequest]:
        with self._lock:
            taken, self.restarts = self.restarts, []
            return taken

    def stop(self) -> None:
        self.log.stop()

    def _on_record(self, key: bytes | None, value: bytes | None, _p: int, _o: int) -> None:
        if key is None:
            return
        name = key.decode("utf-8", errors="replace")
        data = _json(value)
        with self._lock:
            self._seen += 1
            if name.startswith("connector-"):
                connector = name[len("connector-") :]
                if data is None:
                    self._connectors.pop(connector, None)
                    self._tasks.pop(connector, None)
                    self._pending_tasks.pop(connector, None)
                elif isinstance(data.get("properties"), dict):
                    self._connectors[connector] = {
                        str(k): str(v) for k, v in data["properties"].items()
                    }
            elif name.startswith("target-state-"):
                connector = name[len("target-state-") :]
                state = data.get("state") if isinstance(data, dict) else None
                if state in TARGET_STATES:
                    self._targets[connector] = state
                else:
                    self._targets.pop(connector, None)
            elif name.startswith("commit-"):
                connector = name[len("commit-") :]
                count = data.get("tasks") if isinstance(data, dict) else None
                pending = self._pending_tasks.pop(connector, {})
                if isinstance(count, int) and all(i in pending for i in range(count)):
                    self._tasks[connector] = [pending[i] for i in range(count)]
                else:
                    logger.warning("configs: commit of %s without its task configs", connector)
            elif name.startswith("restart-connector-"):
                if self._started and isinstance(data, dict):
                    self.restarts.append(
                        RestartRequest(
                            name[len("restart-connector-") :],
                            include_tasks=bool(data.get("include-tasks")),
                            only_failed=bool(data.get("only-failed")),
                        )
                    )
            elif (found := _RESTART_TASK_KEY.match(name)) is not None:
                if self._started:
                    self.restarts.append(RestartRequest(found.group(1), int(found.group(2))))
            elif (found := _TASK_KEY.match(name)) is not None:
                connector, index = found.group(1), int(found.group(2))
                if isinstance(data, dict) and isinstance(data.get("properties"), dict):
                    self._pending_tasks.setdefault(connector, {})[index] = {
                        str(k): str(v) for k, v in data["properties"].items()
                    }
        for listener in list(self.listeners):
            listener()

    def snapshot(self) -> ClusterConfig:
        with self._lock:
            return ClusterConfig(
                self._seen,
                {k: dict(v) for k, v in self._connectors.items()},
                {k: [dict(t) for t in v] for k, v in self._tasks.items()},
                dict(self._targets),
            )

    # --- writes (the REST API, the leader) --------------------------------------------------

    def put_connector(self, name: str, config: Mapping[str, str]) -> None:
        self.log.send(f"connector-{name}".encode(), _encode({"properties": dict(config)}))

    def remove_connector(self, name: str) -> None:
        self.log.send(f"connector-{name}".encode(), None)
        self.log.send(f"target-state-{name}".encode(), None)

    def put_target_state(self, name: str, state: str) -> None:
        if state not in TARGET_STATES:
            raise ValueError(f"target state {state!r}")
        self.log.send(f"target-state-{name}".encode(), _encode({"state": state}))

    def request_restart(self, request: RestartRequest) -> None:
        if request.task is None:
            value = {"include-tasks": request.include_tasks, "only-failed": request.only_failed}
            self.log.send(f"restart-connector-{request.connector}".encode(), _encode(value))
        else:
            key = f"restart-task-{request.connector}-{request.task}"
            self.log.send(key.encode(), _encode({}))

    def put_task_configs(self, name: str, configs: list[dict[str, str]]) -> None:
        """The task configs, then the commit that makes them one change."""
        for i, config in enumerate(configs):
            self.log.send(f"task-{name}-{i}".encode(), _encode({"properties": config}), wait=False)
        self.log.send(f"commit-{name}".encode(), _encode({"tasks": len(configs)}))


class _LatestPerKey:
    """A topic's latest JSON object per key, kept in memory (a null value removes it)."""

    def __init__(self, log_factory: Callable[[Callable[..., None]], KafkaBasedLog]) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        self.log = log_factory(self._on_record)

    def start(self, timeout: float = 30.0) -> None:
        self.log.start(timeout)

    def read_to_end(self, timeout: float = 30.0) -> None:
        """Everything written to the topic so far is in memory when this returns."""
        self.log.read_to_end(timeout)

    def stop(self) -> None:
        self.log.stop()

    def _key(self, key: bytes) -> str | None:
        """The key as stored (None: not one of this store's records)."""
        return key.decode("utf-8", errors="replace")

    def _on_record(self, key: bytes | None, value: bytes | None, _p: int, _o: int) -> None:
        name = self._key(key) if key is not None else None
        if name is None:
            return
        data = _json(value)
        with self._lock:
            if isinstance(data, dict):
                self._data[name] = data
            else:
                self._data.pop(name, None)


class TopicOffsetStore(OffsetReads, _LatestPerKey):
    """Source offsets in the offsets topic (the worker's :class:`OffsetStore`)."""

    def _key(self, key: bytes) -> str | None:
        parsed = _json(key)
        if not (isinstance(parsed, list) and len(parsed) == 2 and isinstance(parsed[1], dict)):
            return None
        return offset_key(str(parsed[0]), parsed[1])

    def put(self, connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> None:
        for key, offset in offsets.items():
            if json.loads(key)[0] != connector:
                raise ValueError(f"offset key {key} is not of connector {connector!r}")
            value = None if offset is None else _encode(dict(offset))
            self.log.send(key.encode(), value, wait=False)
        self.log.flush()  # durable when this returns


class StatusStore(_LatestPerKey):
    """Connector and task statuses in the status topic; the latest per key in memory."""

    def put(self, connector: str, task: int, state: str, worker_id: str, trace: str | None,
            generation: int) -> None:  # fmt: skip
        key = f"status-connector-{connector}" if task < 0 else f"status-task-{connector}-{task}"
        value = {"state": state, "trace": trace, "worker_id": worker_id, "generation": generation}
        self.log.send(key.encode(), _encode(value), wait=False)

    def remove(self, connector: str, tasks: int) -> None:
        self.log.send(f"status-connector-{connector}".encode(), None, wait=False)
        for i in range(tasks):
            self.log.send(f"status-task-{connector}-{i}".encode(), None, wait=False)

    # Active topics (KIP-558): ``topic-<topic>-connector-<connector>`` → {"topic": {"name",
    # "connector", "task", "discoverTimestamp"}}, as Kafka Connect keys and writes them.

    def put_topic(self, connector: str, topic: str, task: int) -> None:
        value = {"topic": {"name": topic, "connector": connector, "task": task,
                           "discoverTimestamp": int(time.time() * 1000)}}  # fmt: skip
        self.log.send(f"topic-{topic}-connector-{connector}".encode(), _encode(value), wait=False)

    def topics(self, connector: str) -> list[str]:
        """The topics the connector's tasks have used since the last reset, by name."""
        found = []
        with self._lock:
            for key, value in self._data.items():
                inner = value.get("topic")
                if (key.startswith("topic-") and isinstance(inner, dict)
                        and inner.get("connector") == connector):  # fmt: skip
                    found.append(str(inner.get("name")))
        return sorted(found)

    def reset_topics(self, connector: str) -> None:
        for topic in self.topics(connector):
            self.log.send(f"topic-{topic}-connector-{connector}".encode(), None, wait=False)
        self.log.flush()

    def connector(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._data.get(f"status-connector-{name}")
            return dict(found) if found is not None else None

    def tasks(self, name: str) -> dict[int, dict[str, Any]]:
        prefix = f"status-task-{name}-"
        with self._lock:
            found = {}
            for key, value in self._data.items():
                if key.startswith(prefix) and key[len(prefix) :].isdigit():
                    found[int(key[len(prefix) :])] = dict(value)
            return found


def ensure_cluster_topics(
    client: Mapping[str, Any], topics: Mapping[str, tuple[int, int]], timeout: float = 30.0
) -> list[str]:
    """Create the Connect cluster's topics that do not exist yet, compacted, as Kafka
    Connect does (``topics``: name → (partitions, replication factor, -1 for the
    cluster's default)); the names created. Losing a creation race to another worker is
    fine."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(dict[str, Any](client))
    existing = admin.list_topics(timeout=timeout).topics
    wanted = [
        NewTopic(name, partitions, replication, config={"cleanup.policy": "compact"})
        for name, (partitions, replication) in topics.items()
        if name not in existing
    ]
    created = []
    for topic, future in admin.create_topics(wanted).items() if wanted else ():
        try:
            future.result(timeout)
            created.append(topic)
            logger.info("created the Connect topic %s", topic)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    return created
