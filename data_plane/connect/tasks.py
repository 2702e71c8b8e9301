"""A task's thread: the source and sink loops, with their offsets and error handling.

Delivery (at least once):

* source: each polled record goes through the transforms and converters and to an
  idempotent ``acks=all`` producer; its source offset becomes committable only when it
  and every earlier record of its source partition were acknowledged
  (:class:`SubmittedRecords`), and committable offsets are written to the
  :class:`~data_plane.connect.offsets.OffsetStore` every ``offset.flush.interval.ms`` and
  when the task stops. A restart resumes after the last committed offset; records sent
  after it are sent again.
* sink: records are read in the group ``connect-<connector>`` at read_committed, go
  through the converters and transforms and to :meth:`SinkTask.put`; every
  ``offset.flush.interval.ms`` (and before partitions are taken away) the group commits
  what :meth:`SinkTask.pre_commit` returned, i.e. what the sink made durable.

Thread-safety: a task's state is changed by its own thread; ``pause``/``resume``/``stop``
only set events the thread reads. Status is read from any thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import json
import logging
import re
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from data_plane.connect.api import (
    RetriableException,
    SinkTask,
    SinkTaskContext,
    SourceTask,
    SourceTaskContext,
    TopicPartition,
)
from data_plane.connect.config import (
    ConfigDef,
    ConfigKey,
    ConfigType,
    Importance,
    at_least,
)
from data_plane.connect.converters import make_converter
from data_plane.connect.data import ConnectRecord
from data_plane.connect.errors import (
    KAFKA_PRODUCE,
    KEY_CONVERTER,
    TASK_POLL,
    TRANSFORMATION,
    VALUE_CONVERTER,
    ErrorPolicy,
    ToleranceOperator,
    error_headers,
)
from data_plane.connect.metrics import WORKER_METRICS, ConnectMetrics
from data_plane.connect.offsets import OffsetStore, offset_key
from data_plane.connect.transforms import build_chain

logger = logging.getLogger(__name__)

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"

WORKER_CONFIG = ConfigDef(
    [
        ConfigKey("bootstrap.servers", ConfigType.LIST, importance=Importance.HIGH, doc="brokers to connect to"),  # noqa: E501
        ConfigKey("key.converter", ConfigType.CLASS, JSON_CONVERTER, doc="default converter of keys"),  # noqa: E501
        ConfigKey("value.converter", ConfigType.CLASS, JSON_CONVERTER, doc="default converter of values"),  # noqa: E501
        ConfigKey("offset.flush.interval.ms", ConfigType.LONG, 60_000, doc="how often offsets are committed", validator=at_least(1)),  # noqa: E501
        ConfigKey("offset.flush.timeout.ms", ConfigType.LONG, 5_000, doc="how long a stop waits for records in flight", validator=at_least(0)),  # noqa: E501
        ConfigKey("task.shutdown.graceful.timeout.ms", ConfigType.LONG, 5_000, doc="how long a stop waits for a task", validator=at_least(0)),  # noqa: E501
        ConfigKey("metrics.port", ConfigType.INT, None, doc="serve Prometheus metrics at /metrics on this port (0: any free one; unset: none)", validator=at_least(0)),  # noqa: E501
        ConfigKey("metrics.host", ConfigType.STRING, "127.0.0.1", doc="the address the metrics endpoint binds"),  # noqa: E501
    ]
)  # fmt: skip

# Client settings a worker config may pass to librdkafka (besides producer./consumer. ones).
CLIENT_KEYS = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
    "client.id",
)
_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def client_config(worker: Mapping[str, str], prefix: str | None) -> dict[str, str]:
    """librdkafka settings for the worker's producers (``prefix`` "producer.") or
    consumers ("consumer."): the common client keys, Java's ``sasl.jaas.config``
    translated, then the prefixed overrides (none with ``prefix`` None: the worker's own
    clients)."""
    conf = {k: worker[k] for k in CLIENT_KEYS if k in worker}
    jaas = worker.get("sasl.jaas.config")
    if jaas:
        found = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS.findall(jaas)}
        if "username" in found:
            conf["sasl.username"] = found["username"]
        if "password" in found:
            conf["sasl.password"] = found["password"]
    for key, value in worker.items():
        if prefix and key.startswith(prefix):
            conf[key[len(prefix) :]] = value
    return conf


# Kafka's connector.client.config.override.policy: which <client>.override.* keys a
# connector config may set ("Principal": only who the client is).
OVERRIDE_POLICIES = ("None", "Principal", "All")
PRINCIPAL_KEYS = frozenset({"sasl.jaas.config", "sasl.username", "sasl.password", "sasl.mechanism",
                            "sasl.mechanisms", "security.protocol"})  # fmt: skip
OVERRIDE_PREFIXES = ("producer.override.", "consumer.override.", "admin.override.")


def client_overrides(connector: Mapping[str, str], client: str) -> dict[str, str]:
    """A connector's own settings for its tasks' ``client`` ("producer", "consumer"):
    Kafka's ``producer.override.*`` / ``consumer.override.*``, Java's ``sasl.jaas.config``
    translated. So a connector can run as another service account than the worker."""
    prefix = f"{client}.override."
    found = {k[len(prefix) :]: v for k, v in connector.items() if k.startswith(prefix)}
    jaas = found.pop("sasl.jaas.config", None)
    if jaas:
        for key, value in _JAAS.findall(jaas):
            found[f"sasl.{key}"] = re.sub(r"\\(.)", r"\1", value)
    return found


def override_errors(
    connector: Mapping[str, str], worker: Mapping[str, str]
) -> dict[str, list[str]]:
    """The connector's client overrides the worker's policy refuses, by key."""
    policy = (worker.get("connector.client.config.override.policy") or "All").strip()
    if policy not in OVERRIDE_POLICIES:
        policy = "None"
    errors: dict[str, list[str]] = {}
    for key in connector:
        prefix = next((p for p in OVERRIDE_PREFIXES if key.startswith(p)), None)
        if prefix is None or policy == "All":
            continue
        if policy == "Principal" and key[len(prefix) :] in PRINCIPAL_KEYS:
            continue
        errors[key] = [f"not allowed by this worker's connector.client.config.override.policy "
                       f"({policy})"]  # fmt: skip
    return errors


class State(enum.Enum):
    UNASSIGNED = "UNASSIGNED"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    RESTARTING = "RESTARTING"


@dataclasses.dataclass
class Status:
    state: State
    worker_id: str
    trace: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state.value, "worker_id": self.worker_id}
        if self.trace:
            out["trace"] = self.trace
        return out


# --- source tasks -----------------------------------------------------------------------------


class SubmittedRecords:
    """Source records sent and not yet committed, per source partition in order; the
    committable offset of a partition is that of the last record of its acknowledged
    prefix (Kafka's ``SubmittedRecords``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, deque[list[Any]]] = {}  # key -> [[offset, acked], ...]
        self.in_flight = 0

    def submit(self, record: ConnectRecord, connector: str) -> list[Any] | None:
        if record.source_partition is None or record.source_offset is None:
            return None
        key = offset_key(connector, record.source_partition)
        entry = [dict(record.source_offset), False]
        with self._lock:
            self._pending.setdefault(key, deque()).append(entry)
            self.in_flight += 1
        return entry

    def ack(self, entry: list[Any] | None) -> None:
        if entry is None:
            return
        with self._lock:
            entry[1] = True
            self.in_flight -= 1

    def committable_all(self) -> dict[str, dict[str, Any]]:
        """The last offset submitted per source partition, whether acknowledged or not
        (a transaction commits them with the records, or neither), the lists emptied."""
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for key, entries in self._pending.items():
                if entries:
                    found[key] = entries[-1][0]
            self._pending.clear()  # entries still unacknowledged are acknowledged later
        return found

    def committable(self) -> dict[str, dict[str, Any]]:
        """Offsets to commit now (removed from the pending lists)."""
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for key, entries in list(self._pending.items()):
                while entries and entries[0][1]:
                    found[key] = entries.popleft()[0]
                if not entries:
                    del self._pending[key]
        return found


class _SourceContext(SourceTaskContext):
    def __init__(self, store: OffsetStore, connector: str) -> None:
        self.store, self.connector = store, connector

    def offset(self, partition: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.store.get(self.connector, partition)


class WorkerTask:
    """One task's thread, state and error handling."""

    def __init__(
        self,
        connector: str,
        task_id: int,
        connector_config: Mapping[str, str],
        task_config: Mapping[str, str],
        worker_config: Mapping[str, str],
        worker_id: str,
        on_status: Callable[[str, int, Status], None] | None = None,
        on_topic: Callable[[str, str, int], None] | None = None,
        metrics: ConnectMetrics | None = None,
    ) -> None:
        self.connector = connector
        self.metrics = metrics or WORKER_METRICS
        # Kafka's active topics (KIP-558): (connector, topic, task) the first time the task
        # produces to or is assigned a topic.
        self._on_topic = on_topic
        self.topics: set[str] = set()
        self.task_id = task_id
        self.connector_config = dict(connector_config)
        self.task_config = dict(task_config)
        self.worker_config = dict(worker_config)
        self.worker = WORKER_CONFIG.parse(worker_config)
        self.worker_id = worker_id
        self.status = Status(State.UNASSIGNED, worker_id)
        self._on_status = on_status
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        self.name = f"{connector}-{task_id}"
        self.errors = ToleranceOperator(
            ErrorPolicy.from_config(self.connector_config), self.name, stopping=self._stop.is_set
        )
        self.converter = {
            is_key: make_converter(
                f"{'key' if is_key else 'value'}.converter",
                self.connector_config.get(f"{'key' if is_key else 'value'}.converter")
                or self.worker[f"{'key' if is_key else 'value'}.converter"],
                _prefixed(
                    self.connector_config
                    if self.connector_config.get(f"{'key' if is_key else 'value'}.converter")
                    else self.worker_config,
                    f"{'key' if is_key else 'value'}.converter.",
                ),
                is_key,
            )
            for is_key in (True, False)
        }
        self.transforms = build_chain(self.connector_config)
        self._labels = (self.connector, str(self.task_id))
        self._skipped = 0

    def _count_skipped(self) -> None:
        """Tolerated failures since the last look, into the skipped-records counter."""
        failed = self.errors.failed
        if failed != self._skipped:
            self.metrics.skipped.labels(*self._labels).inc(failed - self._skipped)
            self._skipped = failed

    def _client(self, client: str) -> dict[str, str]:
        """The worker's settings for this kind of client, then the connector's overrides."""
        return client_config(self.worker_config, f"{client}.") | client_overrides(
            self.connector_config, client
        )

    def _used(self, topic: str) -> None:
        if topic in self.topics:
            return
        self.topics.add(topic)
        if self._on_topic is not None:
            try:
                self._on_topic(self.connector, topic, self.task_id)
            except Exception:  # bookkeeping must not fail the task
                logger.warning("%s: recording topic %s failed", self.name, topic, exc_info=True)

    def _set(self, state: State, trace: str | None = None) -> None:
        self.status = Status(state, self.worker_id, trace)
        self.metrics.task_state(self.connector, self.task_id, state.value)
        if self._on_status is not None:
            self._on_status(self.connector, self.task_id, self.status)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"connect-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Every log line of this thread names the connector and the task (Kafka Connect's
        # MDC "[name|task-n]"): fields of the JSON lines, key=value in plain ones.
        structlog.contextvars.bind_contextvars(connector=self.connector, task=self.task_id)
        self._skipped = 0
        try:
            self._set(State.RUNNING)
            self.execute()
        except Exception as exc:
            logger.exception("task %s failed", self.name)
            self._set(State.FAILED, "".join(traceback.format_exception(exc)))
            return
        if self.status.state is not State.FAILED:
            self._set(State.UNASSIGNED)

    def execute(self) -> None:
        raise NotImplementedError

    def pause(self) -> None:
        self._paused.set()
        if self.status.state is State.RUNNING:
            self._set(State.PAUSED)

    def resume(self) -> None:
        self._paused.clear()
        if self.status.state is State.PAUSED:
            self._set(State.RUNNING)

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(self.worker["task.shutdown.graceful.timeout.ms"] / 1000 + 5)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _wait_while_paused(self) -> bool:
        """False once stopping."""
        while self._paused.is_set() and not self._stop.is_set():
            self._stop.wait(0.1)
        return not self._stop.is_set()


class WorkerSourceTask(WorkerTask):
    def __init__(self, task: SourceTask, store: OffsetStore, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.task = task
        self.store = store
        self.submitted = SubmittedRecords()
        self.failure: BaseException | None = None

    def execute(self) -> None:
        from confluent_kafka import Producer

        conf = self._client("producer") | {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "client.id": f"connector-producer-{self.name}",
        }
        offsets_topic = self._transactional_offsets_topic()
        if offsets_topic is not None:
            # KIP-618: one transaction per poll holds the records and their offsets; a
            # restarted task (same transactional id) fences and aborts what it left open.
            group = self.worker_config.get("group.id", "connect")
            conf["transactional.id"] = f"{group}-{self.connector}-{self.task_id}"
        producer = Producer(conf)
        if offsets_topic is not None:
            producer.init_transactions(self.worker["offset.flush.timeout.ms"] / 1000 + 55)
            # What the fenced instance committed is read before the task asks for it.
            refresh = getattr(self.store, "read_to_end", None)
            if refresh is not None:
                refresh()
        self._written = self.metrics.written.labels(*self._labels)
        self.task.initialize(_SourceContext(self.store, self.connector))
        self.task.start(self.task_config)
        interval = self.worker["offset.flush.interval.ms"] / 1000
        next_commit = time.monotonic() + interval
        try:
            while self._wait_while_paused():
                records = self.errors.execute(TASK_POLL, self.task.poll, executing=self.task)
                if records:
                    self.metrics.polled.labels(*self._labels).inc(len(records))
                if offsets_topic is not None:
                    if records:
                        self._transaction(producer, records, offsets_topic)
                    else:
                        producer.poll(0.05)
                    continue
                for record in records or ():
                    self._send(producer, record)
                producer.poll(0 if records else 0.05)
                self._count_skipped()
                if self.failure is not None:
                    raise self.failure
                if time.monotonic() >= next_commit:
                    self.commit_offsets()
                    next_commit = time.monotonic() + interval
        finally:
            if offsets_topic is None:
                producer.flush(self.worker["offset.flush.timeout.ms"] / 1000)
                if self.failure is None:
                    self.commit_offsets()
            self.task.stop()

    def _transactional_offsets_topic(self) -> str | None:
        """The offsets topic when this task writes in transactions (KIP-618), else None."""
        enabled = self.worker_config.get("exactly.once.source.support", "").strip() == "enabled"
        topic = (self.worker_config.get("offset.storage.topic") or "").strip()
        return topic if enabled and topic else None

    def _transaction(self, producer: Any, records: Sequence[ConnectRecord], topic: str) -> None:
        """The batch's records and the last offset of each of its source partitions, in
        one transaction: both are visible to read_committed readers, or neither."""
        from confluent_kafka import KafkaException

        timeout = self.worker["offset.flush.timeout.ms"] / 1000 + 55
        producer.begin_transaction()
        try:
            for record in records:
                self._send(producer, record)
            self._count_skipped()
            offsets = self.submitted.committable_all()
            for key, offset in offsets.items():
                producer.produce(topic, json.dumps(offset, separators=(",", ":")).encode(),
                                 key.encode())  # fmt: skip
            producer.commit_transaction(timeout)
        except KafkaException as exc:
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(timeout)
            self.metrics.commits.labels(*self._labels, "failed").inc()
            raise RuntimeError(f"the transaction of {len(records)} records failed: {exc}") from exc
        if self.failure is not None:
            raise self.failure
        self.metrics.commits.labels(*self._labels, "ok").inc()
        if offsets:
            self.task.committed(list(offsets.values()))
            self.task.commit()

    def _send(self, producer: Any, record: ConnectRecord) -> None:
        transformed = (
            self.errors.execute(
                TRANSFORMATION, lambda: self.transforms.apply(record), record, self.transforms
            )
            if self.transforms.stages
            else record
        )
        if transformed is None:  # dropped by a transform, or a tolerated failure
            self.task.commit_record(record)
            self.submitted.ack(self.submitted.submit(record, self.connector))
            return
        key_converter, value_converter = self.converter[True], self.converter[False]
        out = transformed
        key = self.errors.execute(
            KEY_CONVERTER,
            lambda: key_converter.from_connect(out.topic, out.key_schema, out.key),
            record,
            key_converter,
        )
        failed = self.errors.last_failure
        value = self.errors.execute(
            VALUE_CONVERTER,
            lambda: value_converter.from_connect(out.topic, out.value_schema, out.value),
            record,
            value_converter,
        )
        if self.errors.last_failure is not failed or (key is None and out.key is not None):
            # A tolerated conversion failure: the record is skipped (sources have no DLQ).
            self.submitted.ack(self.submitted.submit(record, self.connector))
            return
        entry = self.submitted.submit(record, self.connector)

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                try:
                    self.errors.execute(KAFKA_PRODUCE, _raise(err), record, producer)
                except Exception as exc:  # noqa: BLE001 - reported by the task's thread
                    self.failure = exc
                    return
            self.task.commit_record(record)
            self.submitted.ack(entry)
            written.inc()

        written = self._written
        kwargs: dict[str, Any] = {"on_delivery": delivered}
        if out.topic not in self.topics:
            self._used(out.topic)
        if out.partition is not None:
            kwargs["partition"] = out.partition
        if out.timestamp is not None:
            kwargs["timestamp"] = out.timestamp
        if out.headers:
            kwargs["headers"] = list(out.headers)
        while True:
            try:
                producer.produce(out.topic, value, key, **kwargs)
                return
            except BufferError:
                producer.poll(0.05)

    def commit_offsets(self) -> None:
        offsets = self.submitted.committable()
        if offsets:
            try:
                self.store.put(self.connector, offsets)
            except Exception:
                self.metrics.commits.labels(*self._labels, "failed").inc()
                raise
            self.metrics.commits.labels(*self._labels, "ok").inc()
            self.task.committed(list(offsets.values()))
            self.task.commit()


@functools.cache
def _refused_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED,
                      KafkaError.GROUP_AUTHORIZATION_FAILED,
                      KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                      KafkaError._AUTHENTICATION})  # fmt: skip


def _raise(err: Any) -> Callable[[], None]:
    def fail() -> None:
        raise RuntimeError(f"producing failed: {err}")

    return fail


def _prefixed(config: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}


# --- sink tasks -------------------------------------------------------------------------------


class _SinkContext(SinkTaskContext):
    def __init__(self) -> None:
        self.assigned: set[TopicPartition] = set()
        self.rewinds: dict[TopicPartition, int] = {}
        self.commit_requested = False

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.rewinds.update(offsets)

    def request_commit(self) -> None:
        self.commit_requested = True


class WorkerSinkTask(WorkerTask):
    def __init__(self, task: SinkTask, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.task = task
        self.context = _SinkContext()
        self.current: dict[TopicPartition, int] = {}  # next offset to read, as put
        self.committed: dict[TopicPartition, int] = {}
        self._consumer: Any = None
        self._dlq: Any = None

    def group_id(self) -> str:
        return f"connect-{self.connector}"

    def execute(self) -> None:
        from confluent_kafka import Consumer

        conf = self._client("consumer") | {
            "group.id": self.group_id(),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "client.id": f"connector-consumer-{self.name}",
        }
        consumer = self._consumer = Consumer(conf)
        topics = [
            t.strip() for t in self.connector_config.get("topics", "").split(",") if t.strip()
        ]
        regex = (self.connector_config.get("topics.regex") or "").strip()
        subscription = topics or [f"^{regex}"]
        self.task.initialize(self.context)
        self.task.start(self.task_config)
        consumer.subscribe(subscription, on_assign=self._assigned, on_revoke=self._revoked)
        interval = self.worker["offset.flush.interval.ms"] / 1000
        next_commit = time.monotonic() + interval
        try:
            while not self._stop.is_set():
                if self._paused.is_set():
                    consumer.pause(consumer.assignment())
                    self._wait_while_paused()
                    consumer.resume(consumer.assignment())
                    continue
                self._apply_rewinds()
                messages = consumer.consume(500, 0.2)
                if messages:
                    self.metrics.read.labels(*self._labels).inc(len(messages))
                records = [r for r in (self._convert(m) for m in messages) if r is not None]
                if records:
                    self._put(records)
                    self.metrics.put.labels(*self._labels).inc(len(records))
                self._count_skipped()
                for m in messages:
                    topic, partition, offset = m.topic(), m.partition(), m.offset()
                    if m.error() is None and topic and partition is not None and offset is not None:
                        self.current[TopicPartition(topic, partition)] = offset + 1
                if time.monotonic() >= next_commit or self.context.commit_requested:
                    self.context.commit_requested = False
                    self.commit_offsets()
                    next_commit = time.monotonic() + interval
        finally:
            try:
                self.commit_offsets()
                self.task.close(set(self.context.assigned))
            finally:
                self.task.stop()
                consumer.close()
                if self._dlq is not None:
                    self._dlq.flush(self.worker["offset.flush.timeout.ms"] / 1000)

    def _put(self, records: list[ConnectRecord]) -> None:
        """``put`` the batch; a RetriableException puts it again after a back-off (as
        Kafka redelivers it), any other failure fails the task (``errors.tolerance``
        covers conversion and transforms, not the sink's writes)."""
        delay = 0.3
        while True:
            try:
                self.task.put(records)
                return
            except RetriableException as exc:
                if self._stop.is_set():
                    raise
                self.errors.retries += 1
                logger.info("%s: put failed (%s); again in %.1f s", self.name, exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self.errors.policy.retry_delay_max_ms / 1000)

    def _apply_rewinds(self) -> None:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        rewinds, self.context.rewinds = self.context.rewinds, {}
        for tp, offset in rewinds.items():
            if tp in self.context.assigned:
                self._consumer.seek(KafkaTopicPartition(tp.topic, tp.partition, offset))
                self.current[tp] = offset

    def _convert(self, message: Any) -> ConnectRecord | None:
        if message.error() is not None:
            if message.error().fatal() or message.error().code() in _refused_codes():
                # As Kafka's sink task: an authorization error fails the task (its key
                # may not read the topic or use the group), it is not retried forever.
                raise RuntimeError(f"consumer failed: {message.error()}")
            logger.info("%s: %s", self.name, message.error())
            return None
        topic = message.topic()
        key_converter, value_converter = self.converter[True], self.converter[False]
        failed = self.errors.last_failure
        key = self.errors.execute(
            KEY_CONVERTER,
            lambda: key_converter.to_connect(topic, message.key()),
            message,
            key_converter,
        )
        value = self.errors.execute(
            VALUE_CONVERTER,
            lambda: value_converter.to_connect(topic, message.value()),
            message,
            value_converter,
        )
        if self.errors.last_failure is not failed:
            self._dead_letter(message)
            return None
        assert key is not None and value is not None
        kind, stamp = message.timestamp()
        record = ConnectRecord(
            topic=topic,
            partition=message.partition(),
            key_schema=key[0],
            key=key[1],
            value_schema=value[0],
            value=value[1],
            timestamp=stamp if kind != 0 else None,
            headers=tuple(message.headers() or ()),
            kafka_offset=message.offset(),
        )
        failed = self.errors.last_failure
        out = self.errors.execute(
            TRANSFORMATION, lambda: self.transforms.apply(record), record, self.transforms
        )
        if self.errors.last_failure is not failed:
            self._dead_letter(message)
        return out

    def _dead_letter(self, message: Any) -> None:
        policy = self.errors.policy
        failure = self.errors.last_failure
        if not policy.dlq_topic or failure is None:
            return
        if self._dlq is None:
            from confluent_kafka import Producer

            conf = self._client("producer") | {
                "enable.idempotence": True,
                "acks": "all",
                "client.id": f"connector-dlq-producer-{self.name}",
            }
            self._dlq = Producer(conf)
        headers = list(message.headers() or ())
        if policy.dlq_context_headers:
            headers += error_headers(
                failure,
                self.connector,
                self.task_id,
                message.topic(),
                message.partition(),
                message.offset(),
            )
        while True:
            try:
                self._dlq.produce(policy.dlq_topic, message.value(), message.key(), headers=headers)
                break
            except BufferError:
                self._dlq.poll(0.05)
        self._dlq.poll(0)
        self.metrics.dead_lettered.labels(*self._labels).inc()

    def commit_offsets(self) -> None:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        pending = {tp: o for tp, o in self.current.items() if self.committed.get(tp) != o}
        if not pending:
            return
        if self._dlq is not None:  # dead-lettered records are durable before their offsets
            if self._dlq.flush(self.worker["offset.flush.timeout.ms"] / 1000):
                raise RuntimeError("the dead letter queue did not take its records in time")
        safe = self.task.pre_commit(pending)
        safe = {tp: o for tp, o in safe.items() if tp in self.context.assigned}
        if not safe:
            return
        try:
            self._consumer.commit(
                offsets=[KafkaTopicPartition(tp.topic, tp.partition, o) for tp, o in safe.items()],
                asynchronous=False,
            )
        except Exception:
            self.metrics.commits.labels(*self._labels, "failed").inc()
            raise
        self.metrics.commits.labels(*self._labels, "ok").inc()
        self.committed.update(safe)

    def _assigned(self, consumer: Any, partitions: Sequence[Any]) -> None:
        added = {TopicPartition(p.topic, p.partition) for p in partitions}
        for topic in sorted({tp.topic for tp in added}):
            self._used(topic)
        self.context.assigned |= added
        self.task.open(added)

    def _revoked(self, consumer: Any, partitions: Sequence[Any]) -> None:
        gone = {TopicPartition(p.topic, p.partition) for p in partitions}
        try:
            self.commit_offsets()
        finally:
            self.task.close(gone)
            self.context.assigned -= gone
            for tp in gone:
                self.current.pop(tp, None)
                self.committed.pop(tp, None)
