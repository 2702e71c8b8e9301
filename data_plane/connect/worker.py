"""The worker: runs connectors and their tasks (:mod:`data_plane.connect.tasks`), each
task on its own thread.

:class:`Worker` starts a connector from its config (the common keys of
:data:`CONNECTOR_CONFIG` plus the connector's own), asks it for task configs, and runs a
:class:`~data_plane.connect.tasks.WorkerSourceTask` or
:class:`~data_plane.connect.tasks.WorkerSinkTask` per config. A standalone worker starts
a connector with its tasks; a distributed worker starts the connectors and tasks the
group assigned it, separately. Tasks talk to the brokers with librdkafka
(confluent-kafka) as the worker's principal, so ACLs and quotas apply to them as to any
client.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import traceback
from collections.abc import Callable, Mapping

from data_plane.connect.api import (
    Connector,
    SinkConnector,
    SourceTask,
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
from data_plane.connect.errors import (
    ERRORS_CONFIG,
)
from data_plane.connect.offsets import OffsetStore
from data_plane.connect.plugins import connector_class
from data_plane.connect.tasks import (
    WORKER_CONFIG,
    State,
    Status,
    WorkerSinkTask,
    WorkerSourceTask,
    WorkerTask,
    override_errors,
)
from data_plane.connect.transforms import chain_errors

logger = logging.getLogger(__name__)


CONNECTOR_CONFIG = ConfigDef(
    [
        ConfigKey("name", ConfigType.STRING, importance=Importance.HIGH, doc="the connector's name", validator=non_empty),  # noqa: E501
        ConfigKey("connector.class", ConfigType.STRING, importance=Importance.HIGH, doc="the connector plugin (its class name or alias)"),  # noqa: E501
        ConfigKey("tasks.max", ConfigType.INT, 1, importance=Importance.HIGH, doc="most tasks to run", validator=at_least(1)),  # noqa: E501
        ConfigKey("key.converter", ConfigType.CLASS, None, doc="converter of record keys (default: the worker's)"),  # noqa: E501
        ConfigKey("value.converter", ConfigType.CLASS, None, doc="converter of record values (default: the worker's)"),  # noqa: E501
        ConfigKey("header.converter", ConfigType.CLASS, None, doc="accepted for compatibility; headers pass as bytes"),  # noqa: E501
        ConfigKey("transforms", ConfigType.LIST, [], doc="aliases of the single message transforms, in order"),  # noqa: E501
        ConfigKey("predicates", ConfigType.LIST, [], doc="aliases of the predicates transforms may use"),  # noqa: E501
        ConfigKey("kafka.api.key", ConfigType.STRING, None, importance=Importance.HIGH, doc="the API key (its id) the connector runs as where the platform runs it; its ACLs and quotas apply (default over the REST API: the calling key)"),  # noqa: E501
        ConfigKey("kafka.api.secret", ConfigType.PASSWORD, None, doc="the secret of kafka.api.key, to prove it is yours to use (checked, never stored); not needed for your own service account's keys, or from the console for admins"),  # noqa: E501
    ]
).merged(ERRORS_CONFIG)  # fmt: skip

# Exactly-once sources (KIP-618): the connector's side.
SOURCE_CONFIG = ConfigDef(
    [
        ConfigKey("exactly.once.support", ConfigType.STRING, "requested", doc="required: refuse to run unless the worker writes this source's records and offsets in transactions (exactly.once.source.support=enabled)", validator=one_of("requested", "required")),  # noqa: E501
        ConfigKey("transaction.boundary", ConfigType.STRING, "poll", doc="poll: one transaction per batch of records a task's poll returns (the only boundary supported)", validator=one_of("poll")),  # noqa: E501
    ]
)  # fmt: skip

SINK_CONFIG = ConfigDef(
    [
        ConfigKey("topics", ConfigType.LIST, [], importance=Importance.HIGH, doc="topics to read"),
        ConfigKey("topics.regex", ConfigType.STRING, "", importance=Importance.HIGH, doc="or a regular expression of topics to read"),  # noqa: E501
    ]
)  # fmt: skip


def exactly_once_sources(worker_config: Mapping[str, str]) -> bool:
    """Whether the worker runs source tasks in transactions (KIP-618): its config enables
    it and it keeps offsets in a topic (a distributed worker)."""
    enabled = (worker_config.get("exactly.once.source.support") or "").strip() == "enabled"
    return enabled and bool((worker_config.get("offset.storage.topic") or "").strip())


def new_connector(plugin: str, worker_config: Mapping[str, str]) -> Connector:
    connector = connector_class(plugin)()
    connector.worker_config = dict(worker_config)
    return connector


def validate_connector_config(
    config: Mapping[str, str], worker_config: Mapping[str, str]
) -> dict[str, list[str]]:
    """Every key's errors: the common keys, the transforms, the connector's own keys."""
    errors = CONNECTOR_CONFIG.errors(config)
    errors.update(chain_errors(config))
    errors.update(override_errors(config, worker_config))
    plugin = config.get("connector.class")
    if plugin:
        try:
            kind = connector_class(plugin)
        except ConfigException as exc:
            errors["connector.class"] = [exc.message]
        else:
            if not issubclass(kind, SinkConnector):
                errors.update(SOURCE_CONFIG.errors(config))
                required = (config.get("exactly.once.support") or "").strip() == "required"
                if required and not exactly_once_sources(worker_config):
                    errors.setdefault("exactly.once.support", []).append(
                        "this worker does not run sources exactly once "
                        "(exactly.once.source.support=enabled, in distributed mode)"
                    )
            if issubclass(kind, SinkConnector):
                errors.update(SINK_CONFIG.errors(config))
                topics = [t for t in (config.get("topics") or "").split(",") if t.strip()]
                if bool(topics) == bool((config.get("topics.regex") or "").strip()):
                    errors.setdefault("topics", []).append(
                        "exactly one of topics and topics.regex must be set"
                    )
            connector = new_connector(plugin, worker_config)
            for key, found in connector.validate(config).items():
                errors.setdefault(key, []).extend(found)
    return {k: v for k, v in errors.items() if v}


# --- the worker -------------------------------------------------------------------------------


@dataclasses.dataclass
class RunningConnector:
    name: str
    config: dict[str, str]
    connector: Connector
    status: Status


class Worker:
    """Runs connectors and tasks on this process: a standalone worker's, or the share a
    distributed cluster's group assigned it. Thread-safe."""

    def __init__(
        self,
        worker_config: Mapping[str, str],
        offsets: OffsetStore,
        worker_id: str,
        on_status: Callable[[str, int, Status], None] | None = None,
        on_topic: Callable[[str, str, int], None] | None = None,
        identity: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None,
    ) -> None:
        WORKER_CONFIG.parse(worker_config)  # fail early on a bad worker config
        self.on_topic = on_topic  # (connector, topic, task id): a task's first use of a topic
        # Who a connector's clients are, from its config (the platform's fleet: the API key
        # the config names); its settings replace the worker's client identity for that
        # connector and its tasks. A ConfigException refuses the connector.
        self.identity = identity
        self.worker_config = dict(worker_config)
        self.offsets = offsets
        self.worker_id = worker_id
        self.on_status = on_status  # (connector, task id or -1 for the connector, status)
        self.connectors: dict[str, RunningConnector] = {}
        self.tasks: dict[tuple[str, int], WorkerTask] = {}
        self._lock = threading.RLock()

    # --- connectors ---------------------------------------------------------------------------

    def start_connector(
        self, config: Mapping[str, str], paused: bool = False
    ) -> list[dict[str, str]]:
        """Start the connector (not its tasks); its task configs. A bad config raises
        :class:`ConfigException` naming the key."""
        errors = validate_connector_config(config, self.worker_config)
        if errors:
            key, messages = next(iter(sorted(errors.items())))
            raise ConfigException(key, "; ".join(messages))
        name = config["name"]
        worker_config = self.config_for(config)
        with self._lock:
            if name in self.connectors:
                raise ConfigException("name", f"connector {name!r} is already running")
            connector = new_connector(config["connector.class"], worker_config)
            connector.start(config)
            state = State.PAUSED if paused else State.RUNNING
            self.connectors[name] = RunningConnector(
                name, dict(config), connector, Status(state, self.worker_id)
            )
        self._report(name, -1, self.connectors[name].status)
        return self.task_configs(name)

    def config_for(self, connector_config: Mapping[str, str]) -> dict[str, str]:
        """The worker config a connector and its tasks see: the worker's, with the
        connector's client identity when the worker has an identity hook."""
        if self.identity is None:
            return self.worker_config
        base = {k: v for k, v in self.worker_config.items() if k != "sasl.jaas.config"}
        return base | dict(self.identity(connector_config))

    def task_configs(self, name: str) -> list[dict[str, str]]:
        with self._lock:
            running = self.connectors[name]
            max_tasks = CONNECTOR_CONFIG.parse(running.config)["tasks.max"]
            return running.connector.task_configs(max_tasks)[:max_tasks]

    def fail_connector(self, name: str, config: Mapping[str, str], exc: BaseException) -> None:
        """Record a connector that could not start (its status FAILED with the error)."""
        trace = "".join(traceback.format_exception(exc))
        self._report(name, -1, Status(State.FAILED, self.worker_id, trace))

    def stop_connector(self, name: str, with_tasks: bool = True) -> None:
        """Stop the connector (and, ``with_tasks``, its tasks) on this worker."""
        with self._lock:
            running = self.connectors.pop(name, None)
            tasks = [key for key in self.tasks if key[0] == name] if with_tasks else []
        self.stop_tasks(tasks)
        if running is not None:
            running.connector.stop()
            self._report(name, -1, Status(State.UNASSIGNED, self.worker_id))

    # --- tasks --------------------------------------------------------------------------------

    def start_task(
        self,
        name: str,
        task_id: int,
        connector_config: Mapping[str, str],
        task_config: Mapping[str, str],
        paused: bool = False,
    ) -> None:
        worker_config = self.config_for(connector_config)
        kind = new_connector(connector_config["connector.class"], worker_config).task_class()
        args = (name, task_id, connector_config, task_config, worker_config, self.worker_id)
        with self._lock:
            if (name, task_id) in self.tasks:
                raise ConfigException("name", f"task {name}-{task_id} is already running")
            task: WorkerTask
            if issubclass(kind, SourceTask):
                task = WorkerSourceTask(kind(), self.offsets, *args, on_status=self.on_status,
                                        on_topic=self.on_topic)  # fmt: skip
            else:
                task = WorkerSinkTask(kind(), *args, on_status=self.on_status,
                                      on_topic=self.on_topic)  # fmt: skip
            self.tasks[(name, task_id)] = task
            if paused:
                task.pause()
            task.start()

    def stop_tasks(self, keys: list[tuple[str, int]]) -> None:
        """Stop these tasks (all signalled first, then each awaited)."""
        with self._lock:
            stopping = [self.tasks.pop(key) for key in keys if key in self.tasks]
        for task in stopping:
            task.stop(wait=False)
        for task in stopping:
            task.stop()

    def pause(self, name: str) -> None:
        with self._lock:
            if name in self.connectors:
                self.connectors[name].status = Status(State.PAUSED, self.worker_id)
                self._report(name, -1, self.connectors[name].status)
            for key, task in self.tasks.items():
                if key[0] == name:
                    task.pause()

    def resume(self, name: str) -> None:
        with self._lock:
            if name in self.connectors:
                self.connectors[name].status = Status(State.RUNNING, self.worker_id)
                self._report(name, -1, self.connectors[name].status)
            for key, task in self.tasks.items():
                if key[0] == name:
                    task.resume()

    def stop(self) -> None:
        self.stop_tasks(list(self.tasks))
        for name in list(self.connectors):
            self.stop_connector(name)

    def _report(self, name: str, task_id: int, status: Status) -> None:
        if self.on_status is not None:
            self.on_status(name, task_id, status)
