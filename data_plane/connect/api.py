"""What a connector implements: Kafka Connect's connector and task contracts.

A :class:`Connector` takes the connector's config, validates it against its
``config_def`` and splits the work into at most ``tasks.max`` task configs; the worker
runs one :class:`SourceTask` or :class:`SinkTask` per config, each on its own thread.

* A source task's :meth:`SourceTask.poll` returns records carrying a source partition
  and offset (plain JSON-able maps); the worker commits an offset only once the record
  and every earlier record of the same source partition were acknowledged by the
  brokers, and :meth:`SourceTask.start` reads it back through its context after a
  restart.
* A sink task's :meth:`SinkTask.put` gets records read from Kafka; the worker commits
  the consumer group's offsets only for what :meth:`SinkTask.pre_commit` (by default:
  :meth:`SinkTask.flush`) says is durable, so a crash re-delivers, never skips.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from data_plane.connect.config import ConfigDef
from data_plane.connect.data import ConnectRecord


class ConnectException(Exception):
    """A connector or task failed (the task is marked FAILED with this message)."""


class RetriableException(ConnectException):
    """A failure worth retrying (the worker retries the call within ``errors.retry.timeout``)."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class SourceTaskContext(abc.ABC):
    @abc.abstractmethod
    def offset(self, partition: Mapping[str, Any]) -> dict[str, Any] | None:
        """The last committed offset of a source partition (None: start afresh)."""


class SinkTaskContext(abc.ABC):
    @abc.abstractmethod
    def assignment(self) -> set[TopicPartition]: ...

    @abc.abstractmethod
    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Read these partitions again from these offsets (Kafka's ``context.offset``),
        e.g. from offsets a sink stored with its data."""

    @abc.abstractmethod
    def request_commit(self) -> None: ...


class Connector(abc.ABC):
    config_def: ClassVar[ConfigDef] = ConfigDef()
    version: ClassVar[str] = "1.0"
    kind: ClassVar[str]  # "source" or "sink"
    doc: ClassVar[str] = ""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.raw: dict[str, str] = {}
        # The worker's config (set by the worker before validate/start), for limits such
        # as where file connectors may read and write.
        self.worker_config: Mapping[str, str] = {}

    def validate(self, config: Mapping[str, str]) -> dict[str, list[str]]:
        """Each key's errors (the connector's own keys; the worker checks the common
        ones). Override to check keys together."""
        return self.config_def.errors(config)

    def start(self, config: Mapping[str, str]) -> None:
        self.raw = dict(config)
        self.config = self.config_def.parse(config)

    @abc.abstractmethod
    def task_class(self) -> type[SourceTask] | type[SinkTask]: ...

    @abc.abstractmethod
    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """At most ``max_tasks`` configs, one per task."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        pass


class SourceConnector(Connector):
    kind = "source"


class SinkConnector(Connector):
    kind = "sink"


class SourceTask(abc.ABC):
    config_def: ClassVar[ConfigDef] = ConfigDef()

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.context: SourceTaskContext | None = None

    def initialize(self, context: SourceTaskContext) -> None:
        self.context = context

    def start(self, config: Mapping[str, str]) -> None:
        self.config = self.config_def.parse(config)

    @abc.abstractmethod
    def poll(self) -> Sequence[ConnectRecord]:
        """Records, or an empty sequence if none are ready; block briefly (≤ ~1 s) at most."""

    def commit(self) -> None:  # noqa: B027 - optional hook
        """Offsets up to here were committed."""

    def committed(self, offsets: Sequence[Mapping[str, Any]]) -> None:  # noqa: B027
        """These source offsets (one per source partition) were just committed: what a
        source may now forget upstream (a replication slot's WAL, a queue's messages)."""

    def commit_record(self, record: ConnectRecord) -> None:  # noqa: B027 - optional hook
        """``record`` was acknowledged by the brokers (or dropped by a transform)."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        pass


class SinkTask(abc.ABC):
    config_def: ClassVar[ConfigDef] = ConfigDef()

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.context: SinkTaskContext | None = None

    def initialize(self, context: SinkTaskContext) -> None:
        self.context = context

    def start(self, config: Mapping[str, str]) -> None:
        self.config = self.config_def.parse(config)

    def open(self, partitions: set[TopicPartition]) -> None:  # noqa: B027 - optional hook
        """These partitions were assigned to the task."""

    def close(self, partitions: set[TopicPartition]) -> None:  # noqa: B027 - optional hook
        """These partitions were taken away (after a last commit)."""

    @abc.abstractmethod
    def put(self, records: Sequence[ConnectRecord]) -> None: ...

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:  # noqa: B027
        """Make everything :meth:`put` so far durable. ``offsets``: the next offset to
        read per partition."""

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The offsets safe to commit for the group (default: flush, then all of them)."""
        self.flush(offsets)
        return dict(offsets)

    def stop(self) -> None:  # noqa: B027 - optional hook
        pass


ConnectorFactory = Callable[[], Connector]
