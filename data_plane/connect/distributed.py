"""A distributed worker: Kafka Connect's ``DistributedHerder``.

Workers with the same ``group.id`` form a group (protocol type ``connect``) on the
group coordinator and share the connectors and tasks of that Connect cluster. Its state
is in three compacted topics (:mod:`data_plane.connect.cluster_stores`): connector and
task configs and target states (``config.storage.topic``), source offsets
(``offset.storage.topic``) and statuses (``status.storage.topic``).

Each round (a rebalance): the worker reads the configs to their end and joins with what
it runs; the leader computes the assignment (:mod:`data_plane.connect.assignor`); each
worker stops what was revoked, starts what is new, and, if anything was revoked, joins
again at once so that it can go elsewhere. Between rounds it heartbeats, and reacts to
config changes:

* a connector it runs whose config changed is restarted, and its task configs are
  generated again and written (with a commit record) if they differ;
* a task whose committed config changed is restarted with the new one;
* target states pause, resume or stop (a STOPPED connector gets no tasks);
* the leader starts a new round when the work wanted (connectors, task counts) is no
  longer what it assigned.

The worker protocol's metadata and assignments are JSON (protocol ``millrace-v1``):
Millrace workers only meet each other in a group, so Kafka's binary Connect protocol
would buy nothing.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from data_plane.client.connection import KafkaClientError
from data_plane.connect.assignor import (
    CONNECTOR,
    Assignment,
    IncrementalAssignor,
    Item,
    Member,
    wanted_items,
)
from data_plane.connect.cluster_stores import (
    ClusterConfig,
    ConfigStore,
    RestartRequest,
    StatusStore,
    TopicOffsetStore,
    ensure_cluster_topics,
)
from data_plane.connect.config import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConfigType,
    Importance,
    at_least,
    non_empty,
    one_of,
)
from data_plane.connect.kafka_log import KafkaBasedLog
from data_plane.connect.membership import (
    Credentials,
    GroupError,
    GroupMember,
    RebalanceNeeded,
)
from data_plane.connect.tasks import State, Status, client_config
from data_plane.connect.worker import Worker

logger = logging.getLogger(__name__)

PROTOCOL = "millrace-v1"

DISTRIBUTED_CONFIG = ConfigDef(
    [
        ConfigKey("group.id", ConfigType.STRING, importance=Importance.HIGH, doc="the Connect cluster's group", validator=non_empty),  # noqa: E501
        ConfigKey("config.storage.topic", ConfigType.STRING, importance=Importance.HIGH, doc="connector configs (compacted, one partition)", validator=non_empty),  # noqa: E501
        ConfigKey("offset.storage.topic", ConfigType.STRING, importance=Importance.HIGH, doc="source offsets (compacted)", validator=non_empty),  # noqa: E501
        ConfigKey("exactly.once.source.support", ConfigType.STRING, "disabled", doc="enabled: source tasks write their records and offsets in one transaction per poll (KIP-618)", validator=one_of("disabled", "preparing", "enabled")),  # noqa: E501
        ConfigKey("status.storage.topic", ConfigType.STRING, importance=Importance.HIGH, doc="statuses (compacted)", validator=non_empty),  # noqa: E501
        ConfigKey("heartbeat.interval.ms", ConfigType.INT, 3_000, validator=at_least(1)),
        ConfigKey("session.timeout.ms", ConfigType.INT, 10_000, validator=at_least(1)),
        ConfigKey("rebalance.timeout.ms", ConfigType.INT, 60_000, validator=at_least(1)),
        ConfigKey("config.storage.replication.factor", ConfigType.INT, -1, doc="when the worker creates the topic (-1: the cluster's default)", validator=at_least(-1)),  # noqa: E501
        ConfigKey("offset.storage.replication.factor", ConfigType.INT, -1, validator=at_least(-1)),
        ConfigKey("status.storage.replication.factor", ConfigType.INT, -1, validator=at_least(-1)),
        ConfigKey("offset.storage.partitions", ConfigType.INT, 25, validator=at_least(1)),
        ConfigKey("status.storage.partitions", ConfigType.INT, 5, validator=at_least(1)),
        ConfigKey("scheduled.rebalance.max.delay.ms", ConfigType.INT, 300_000, doc="how long a departed worker's work waits for it", validator=at_least(0)),  # noqa: E501
    ]
)  # fmt: skip


def _items(raw: Any) -> frozenset[Item]:
    return frozenset((str(c), int(i)) for c, i in raw or ())


def _bootstrap(servers: str) -> list[tuple[str, int]]:
    found = []
    for entry in servers.split(","):
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigException("bootstrap.servers", f"{entry!r} is not host:port")
        found.append((host.strip("[]"), int(port)))
    return found


class DistributedHerder:
    def __init__(
        self,
        worker_config: Mapping[str, str],
        worker_id: str | None = None,
        identity: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None,
    ) -> None:
        self.config = DISTRIBUTED_CONFIG.parse(worker_config)
        # Unique per process and start (an object's address repeats across processes).
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}-{secrets.token_hex(2)}"
        client = self.client = client_config(worker_config, None)

        def log(topic_key: str) -> Any:
            def factory(callback: Any) -> KafkaBasedLog:
                return KafkaBasedLog(self.config[topic_key], client, callback, name="connect")

            return factory

        self.configs = ConfigStore(log("config.storage.topic"))
        self.offsets = TopicOffsetStore(log("offset.storage.topic"))
        self.statuses = StatusStore(log("status.storage.topic"))
        self.worker = Worker(worker_config, self.offsets, self.worker_id, on_status=self._status,
                             on_topic=self._topic, identity=identity)  # fmt: skip
        credentials = None
        if client.get("sasl.username"):
            mechanism = client.get("sasl.mechanism") or client.get("sasl.mechanisms") or "PLAIN"
            credentials = Credentials(mechanism, client["sasl.username"], client["sasl.password"])
        self.member = GroupMember(
            _bootstrap(worker_config["bootstrap.servers"]),
            self.config["group.id"],
            "connect",
            credentials,
            session_timeout_ms=self.config["session.timeout.ms"],
            rebalance_timeout_ms=self.config["rebalance.timeout.ms"],
            client_id=f"connect-{self.worker_id}",
        )
        self.assignor = IncrementalAssignor(
            self.config["scheduled.rebalance.max.delay.ms"], time.monotonic
        )
        self.owned: set[Item] = set()
        self.generation = -1
        self.leader = False
        self._assigned_wanted: set[Item] = set()  # what the wanted work was at the last round
        self._running: dict[str, dict[str, str]] = {}  # connector -> config it started with
        self._task_configs: dict[Item, dict[str, str]] = {}  # task -> config it started with
        self._targets: dict[str, str] = {}
        self._wake = threading.Event()
        self.configs.listeners.append(self._wake.set)
        self.ready = threading.Event()  # set after the first round (tests, logs)

    # --- the loop ---------------------------------------------------------------------------

    def ensure_topics(self, timeout: float = 30.0) -> None:
        ensure_cluster_topics(
            self.client,
            {
                self.config["config.storage.topic"]: (
                    1,
                    self.config["config.storage.replication.factor"],
                ),
                self.config["offset.storage.topic"]: (
                    self.config["offset.storage.partitions"],
                    self.config["offset.storage.replication.factor"],
                ),
                self.config["status.storage.topic"]: (
                    self.config["status.storage.partitions"],
                    self.config["status.storage.replication.factor"],
                ),
            },
            timeout,
        )

    def run(self, stop: threading.Event) -> None:
        self.ensure_topics()
        for store in (self.configs, self.offsets, self.statuses):
            store.start()
        attempt = 0
        try:
            while not stop.is_set():
                try:
                    self._round(stop)
                    attempt = 0
                except RebalanceNeeded as exc:
                    logger.info("worker %s: joining again (%s)", self.worker_id, exc)
                except (KafkaClientError, GroupError) as exc:
                    attempt += 1
                    delay = min(5.0, 0.2 * 2 ** min(attempt, 5))
                    logger.warning("worker %s: %s; again in %.1f s", self.worker_id, exc, delay)
                    self.member.close_connection()
                    stop.wait(delay)
        finally:
            self.worker.stop()
            self.member.leave()
            for store in (self.statuses, self.offsets, self.configs):
                store.stop()

    def _round(self, stop: threading.Event) -> None:
        self.configs.log.read_to_end()
        snapshot = self.configs.snapshot()
        metadata = {
            "worker_id": self.worker_id,
            "config_offset": snapshot.offset,
            "owned": sorted(self.owned),
        }
        joined = self.member.join([(PROTOCOL, json.dumps(metadata).encode())])
        self.generation, self.leader = joined.generation, joined.leader
        assignments: dict[str, bytes] = {}
        if joined.leader:
            assignments = self._assign(joined.members, snapshot)
        mine = json.loads(self.member.sync(PROTOCOL, assignments) or b"{}")
        assigned = _items(mine.get("assigned"))
        revoked = _items(mine.get("revoked"))
        self._apply(assigned, revoked)
        self.ready.set()
        if revoked:
            return  # join again at once so that the revoked work can go elsewhere
        delay_ms = int(mine.get("delay_ms", 0))
        rejoin_at = time.monotonic() + delay_ms / 1000 if delay_ms else None
        interval = self.config["heartbeat.interval.ms"] / 1000
        next_heartbeat = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_heartbeat:
                self.member.heartbeat()
                next_heartbeat = now + interval
            if rejoin_at is not None and now >= rejoin_at:
                return
            if self._wake.is_set():
                self._wake.clear()
                if self._reconcile():
                    return
            self._wake.wait(min(0.2, max(0.0, next_heartbeat - time.monotonic())))

    # --- the leader ---------------------------------------------------------------------------

    def _wanted(self, snapshot: ClusterConfig) -> set[Item]:
        counts = {
            name: len(snapshot.tasks.get(name, []))
            if snapshot.target_state(name) != "STOPPED"
            else 0
            for name in snapshot.connectors
        }
        return wanted_items(counts)

    def _assign(
        self, members: list[tuple[str, bytes]], snapshot: ClusterConfig
    ) -> dict[str, bytes]:
        parsed = []
        for member_id, raw in members:
            meta = json.loads(raw or b"{}")
            parsed.append(
                Member(member_id, str(meta.get("worker_id", member_id)), _items(meta.get("owned")))
            )
        wanted = self._wanted(snapshot)
        self._assigned_wanted = wanted
        result = self.assignor.assign(parsed, wanted)
        return {
            mid: _encode_assignment(a, self.worker_id, snapshot.offset) for mid, a in result.items()
        }

    # --- applying -----------------------------------------------------------------------------

    def _apply(self, assigned: frozenset[Item], revoked: frozenset[Item]) -> None:
        stopping = (set(revoked) | (self.owned - assigned)) & self.owned
        self._stop_items(stopping)
        self.configs.log.read_to_end()
        snapshot = self.configs.snapshot()
        for item in sorted(assigned - self.owned, key=lambda i: i[1]):  # connectors first
            self.owned.add(item)
            if item[1] == CONNECTOR:
                self._start_connector(item[0], snapshot)
            else:
                self._start_task(item, snapshot)
        self.owned = set(assigned)
        self._targets = dict(snapshot.target_states)

    def _stop_items(self, items: set[Item]) -> None:
        self.worker.stop_tasks(sorted(i for i in items if i[1] != CONNECTOR))
        for name, _ in sorted(i for i in items if i[1] == CONNECTOR):
            self.worker.stop_connector(name, with_tasks=False)
            self._running.pop(name, None)
        for item in items:
            self._task_configs.pop(item, None)
        self.owned -= items

    def _start_connector(self, name: str, snapshot: ClusterConfig) -> None:
        config = snapshot.connectors.get(name)
        if config is None:
            return
        config = {**config, "name": name}
        state = snapshot.target_state(name)
        self._running[name] = config
        if state == "STOPPED":  # KIP-875: no tasks, and the connector says STOPPED
            if snapshot.tasks.get(name):
                self.configs.put_task_configs(name, [])
            self._status(name, CONNECTOR, Status(State.STOPPED, self.worker_id))
            return
        try:
            task_configs = self.worker.start_connector(config, paused=state == "PAUSED")
        except Exception as exc:  # noqa: BLE001 - a bad connector fails alone
            logger.warning("connector %s failed to start: %s", name, exc)
            self.worker.fail_connector(name, config, exc)
            return
        if task_configs != snapshot.tasks.get(name):
            self.configs.put_task_configs(name, task_configs)

    def _start_task(self, item: Item, snapshot: ClusterConfig) -> None:
        name, index = item
        configs = snapshot.tasks.get(name, [])
        connector = snapshot.connectors.get(name)
        if connector is None or index >= len(configs):
            return
        self._task_configs[item] = configs[index]
        try:
            self.worker.start_task(
                name,
                index,
                {**connector, "name": name},
                configs[index],
                paused=snapshot.target_state(name) == "PAUSED",
            )
        except Exception as exc:  # noqa: BLE001 - a bad task fails alone
            trace = "".join(traceback.format_exception(exc))
            self._status(name, index, Status(State.FAILED, self.worker_id, trace))

    def _reconcile(self) -> bool:
        """Act on config changes; True if the leader must start a new round."""
        snapshot = self.configs.snapshot()
        for request in self.configs.take_restarts():
            self._restart(request, snapshot)
        for name in [n for n, _ in self.owned if _ == CONNECTOR]:
            config = snapshot.connectors.get(name)
            state = snapshot.target_state(name)
            before = self._targets.get(name, "STARTED")
            if config is None:
                self._stop_items({(name, CONNECTOR)})
                self.owned.add((name, CONNECTOR))  # the leader revokes it next round
                continue
            changed = {**config, "name": name} != self._running.get(name)
            if changed or (state != before and "STOPPED" in (state, before)):
                self.worker.stop_connector(name, with_tasks=False)
                self._start_connector(name, snapshot)
            elif state != before:
                (self.worker.pause if state == "PAUSED" else self.worker.resume)(name)
        for item in [i for i in self.owned if i[1] != CONNECTOR]:
            name, index = item
            configs = snapshot.tasks.get(name, [])
            state = snapshot.target_state(name)
            if name not in snapshot.connectors or index >= len(configs):
                self.worker.stop_tasks([item])
                continue
            if configs[index] != self._task_configs.get(item):
                self.worker.stop_tasks([item])
                self._start_task(item, snapshot)
            elif state != self._targets.get(name, "STARTED"):
                task = self.worker.tasks.get(item)
                if task is not None:
                    task.pause() if state == "PAUSED" else task.resume()
        self._targets = dict(snapshot.target_states)
        return self.leader and self._wanted(snapshot) != self._assigned_wanted

    def _restart(self, request: RestartRequest, snapshot: ClusterConfig) -> None:
        """Restart what this worker runs of ``request`` (Kafka's restart semantics)."""
        name = request.connector

        def failed(task_id: int) -> bool:
            if task_id == CONNECTOR:
                status = self.statuses.connector(name)
            else:
                status = self.statuses.tasks(name).get(task_id)
            return status is not None and status.get("state") == State.FAILED.value

        if request.task is None and (name, CONNECTOR) in self.owned:
            if not request.only_failed or failed(CONNECTOR):
                self.worker.stop_connector(name, with_tasks=False)
                self._start_connector(name, snapshot)
        for item in sorted(i for i in self.owned if i[0] == name and i[1] != CONNECTOR):
            wanted = item[1] == request.task if request.task is not None else request.include_tasks
            if wanted and (request.task is not None or not request.only_failed or failed(item[1])):
                self.worker.stop_tasks([item])
                self._start_task(item, snapshot)

    def _topic(self, connector: str, topic: str, task: int) -> None:
        if topic not in self.statuses.topics(connector):
            self.statuses.put_topic(connector, topic, task)

    def _status(self, connector: str, task: int, status: Status) -> None:
        try:
            self.statuses.put(
                connector, task, status.state.value, status.worker_id, status.trace, self.generation
            )
        except Exception:
            logger.warning("writing the status of %s-%s failed", connector, task, exc_info=True)


def _encode_assignment(assignment: Assignment, leader: str, config_offset: int) -> bytes:
    return json.dumps(
        {
            "leader": leader,
            "config_offset": config_offset,
            "assigned": sorted(assignment.assigned),
            "revoked": sorted(assignment.revoked),
            "delay_ms": assignment.delay_ms,
        }
    ).encode()
