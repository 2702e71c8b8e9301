"""Kafka Connect's error handling for one task: retries, tolerance, the dead letter queue.

Each record goes through stages (conversion, transformation, the producer or the sink);
:meth:`ToleranceOperator.execute` runs a stage, retries a :class:`RetriableException`
with exponential back-off (from 300 ms, at most ``errors.retry.delay.max.ms``) until
``errors.retry.timeout`` runs out, and then, with ``errors.tolerance=none`` (the default),
fails the task; with ``all`` it logs the failure (``errors.log.enable``), counts it,
sends the original record to the dead letter queue (sinks, ``errors.deadletterqueue.topic.name``)
and skips the record.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from data_plane.connect.api import ConnectException, RetriableException
from data_plane.connect.config import ConfigDef, ConfigKey, ConfigType, at_least, one_of

logger = logging.getLogger(__name__)
T = TypeVar("T")

ERRORS_CONFIG = ConfigDef(
    [
        ConfigKey("errors.retry.timeout", ConfigType.LONG, 0, doc="ms to retry a failed operation; -1 for ever", validator=at_least(-1)),  # noqa: E501
        ConfigKey("errors.retry.delay.max.ms", ConfigType.LONG, 60_000, doc="longest wait between retries", validator=at_least(1)),  # noqa: E501
        ConfigKey("errors.tolerance", ConfigType.STRING, "none", doc="none: a failure fails the task; all: skip the record", validator=one_of("none", "all")),  # noqa: E501
        ConfigKey("errors.log.enable", ConfigType.BOOLEAN, False, doc="log each tolerated failure"),
        ConfigKey("errors.log.include.messages", ConfigType.BOOLEAN, False, doc="include the record in that log"),  # noqa: E501
        ConfigKey("errors.deadletterqueue.topic.name", ConfigType.STRING, "", doc="sinks: the topic failed records go to (empty: none)"),  # noqa: E501
        ConfigKey("errors.deadletterqueue.topic.replication.factor", ConfigType.INT, 3, doc="replication factor of the dead letter queue topic when created", validator=at_least(1)),  # noqa: E501
        ConfigKey("errors.deadletterqueue.context.headers.enable", ConfigType.BOOLEAN, False, doc="add __connect.errors.* headers to dead-lettered records"),  # noqa: E501
    ]
)  # fmt: skip

HEADER_PREFIX = "__connect.errors."


class ToleranceExceeded(ConnectException):
    """A stage failed beyond what the connector tolerates: the task fails."""


# Kafka Connect's stage names (``__connect.errors.stage``).
KEY_CONVERTER, VALUE_CONVERTER, HEADER_CONVERTER = (
    "KEY_CONVERTER",
    "VALUE_CONVERTER",
    "HEADER_CONVERTER",
)
TRANSFORMATION, TASK_PUT, TASK_POLL = "TRANSFORMATION", "TASK_PUT", "TASK_POLL"
KAFKA_PRODUCE, KAFKA_CONSUME = "KAFKA_PRODUCE", "KAFKA_CONSUME"


@dataclass
class Failure:
    stage: str
    exception: BaseException
    record: Any
    executing: str  # the class that failed (converter, transform, task)


@dataclass
class ErrorPolicy:
    retry_timeout_ms: int
    retry_delay_max_ms: int
    tolerate_all: bool
    log_enable: bool
    log_messages: bool
    dlq_topic: str
    dlq_replication_factor: int
    dlq_context_headers: bool

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ErrorPolicy:
        parsed = ERRORS_CONFIG.parse(config)
        return cls(
            retry_timeout_ms=parsed["errors.retry.timeout"],
            retry_delay_max_ms=parsed["errors.retry.delay.max.ms"],
            tolerate_all=parsed["errors.tolerance"].lower() == "all",
            log_enable=parsed["errors.log.enable"],
            log_messages=parsed["errors.log.include.messages"],
            dlq_topic=parsed["errors.deadletterqueue.topic.name"] or "",
            dlq_replication_factor=parsed["errors.deadletterqueue.topic.replication.factor"],
            dlq_context_headers=parsed["errors.deadletterqueue.context.headers.enable"],
        )


class ToleranceOperator:
    """Runs the stages of one task's records under its :class:`ErrorPolicy`."""

    def __init__(
        self,
        policy: ErrorPolicy,
        name: str,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.policy = policy
        self.name = name  # connector name and task id, for logs
        self.sleep = sleep
        self.clock = clock
        self.stopping = stopping
        self.failed = 0  # records skipped so far (tolerated failures)
        self.retries = 0
        self.last_failure: Failure | None = None

    def execute(
        self, stage: str, operation: Callable[[], T], record: Any = None, executing: object = None
    ) -> T | None:
        """The operation's result, or None when it failed and the failure is tolerated
        (``last_failure`` tells what failed). Raises :class:`ToleranceExceeded` otherwise."""
        deadline = self.clock() + self.policy.retry_timeout_ms / 1000
        delay = 0.3
        while True:
            try:
                return operation()
            except RetriableException as exc:
                forever = self.policy.retry_timeout_ms < 0
                if self.stopping() or (not forever and self.clock() + delay > deadline):
                    self._failed(stage, exc, record, executing)
                    return None
                self.retries += 1
                logger.info("%s: %s failed (%s); retrying in %.1f s", self.name, stage, exc, delay)
                self.sleep(delay)
                delay = min(delay * 2, self.policy.retry_delay_max_ms / 1000)
            except Exception as exc:  # noqa: BLE001 - any failure of a connector's code
                self._failed(stage, exc, record, executing)
                return None

    def _failed(self, stage: str, exc: BaseException, record: Any, executing: object) -> None:
        kind = executing if isinstance(executing, type) else type(executing)
        name = "" if executing is None else f"{kind.__module__}.{kind.__qualname__}"
        self.last_failure = Failure(stage, exc, record, name)
        if not self.policy.tolerate_all:
            raise ToleranceExceeded(f"{stage} failed: {exc}") from exc
        self.failed += 1
        if self.policy.log_enable:
            shown = f"; record: {record!r}" if self.policy.log_messages else ""
            logger.warning("%s: tolerated failure in %s: %s%s", self.name, stage, exc, shown)


def error_headers(
    failure: Failure, connector: str, task: int, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    """The ``__connect.errors.*`` headers Kafka Connect adds to a dead-lettered record."""
    exc = failure.exception
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    values = {
        "topic": topic,
        "partition": str(partition),
        "offset": str(offset),
        "connector.name": connector,
        "task.id": str(task),
        "stage": failure.stage,
        "class.name": failure.executing,
        "exception.class.name": type(exc).__module__ + "." + type(exc).__qualname__,
        "exception.message": str(exc),
        "exception.stacktrace": trace,
    }
    return [(HEADER_PREFIX + k, v.encode()) for k, v in values.items()]
