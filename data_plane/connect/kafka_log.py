"""A compacted topic read into memory and followed: Kafka Connect's ``KafkaBasedLog``.

Distributed workers keep connector configs, source offsets and statuses in compacted
topics of the tenant. A :class:`KafkaBasedLog` assigns itself every partition of its
topic from the beginning (no consumer group: every worker reads everything), hands each
record to ``on_record`` in offset order per partition, and can :meth:`read_to_end`: wait
until everything written before the call has been handed over, which is how a worker
knows its view is current before it acts (Kafka's ``readToEnd``). Records are read at
``read_committed``. Writes go through an idempotent ``acks=all`` producer;
:meth:`send` returns once the record is acknowledged when ``wait`` is set.

Thread-safety: ``on_record`` runs on the log's own thread; :meth:`send`,
:meth:`read_to_end` and :meth:`stop` may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

OnRecord = Callable[[bytes | None, bytes | None, int, int], None]  # key, value, partition, offset


class LogError(RuntimeError):
    """The topic could not be read or written."""


class KafkaBasedLog:
    def __init__(
        self,
        topic: str,
        client: Mapping[str, Any],
        on_record: OnRecord,
        *,
        name: str = "connect",
    ) -> None:
        self.topic = topic
        self.client = dict(client)
        self.on_record = on_record
        self.name = name
        self._positions: dict[int, int] = {}  # next offset to hand over, per partition
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._producer: Any = None  # made at the first write
        self._writer_lock = threading.Lock()
        self._failure: BaseException | None = None
        self._send_failures: list[Any] = []
        self._admin: Any = None

    def start(self, timeout: float = 30.0) -> None:
        """Assign every partition from the start and read to the end."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self._consumer = Consumer(
            self.client
            | {
                # Never joins or commits: a group id only because librdkafka wants one.
                "group.id": f"__connect-log-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "client.id": f"{self.name}-{self.topic}-reader",
            }
        )
        metadata = self._consumer.list_topics(self.topic, timeout=timeout)
        info = metadata.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            raise LogError(
                f"topic {self.topic!r} cannot be read: {info.error if info else 'absent'}"
            )
        partitions = sorted(info.partitions)
        self._positions = {p: 0 for p in partitions}
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        self._thread = threading.Thread(target=self._run, name=f"log-{self.topic}", daemon=True)
        self._thread.start()
        self.read_to_end(timeout)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self._consumer.consume(500, 0.1):
                    error = message.error()
                    if error is not None:
                        if error.fatal():
                            raise LogError(f"reading {self.topic}: {error}")
                        continue
                    self.on_record(
                        message.key(), message.value(), message.partition(), message.offset()
                    )
                    with self._cond:
                        self._positions[message.partition()] = message.offset() + 1
                        self._cond.notify_all()
                # Control records (transaction markers) and compacted gaps move the position
                # without a message: take it from the consumer.
                self._catch_up_positions()
        except BaseException as exc:
            logger.exception("%s: reading %s failed", self.name, self.topic)
            with self._cond:
                self._failure = exc
                self._cond.notify_all()

    def _catch_up_positions(self) -> None:
        from confluent_kafka import TopicPartition

        current = self._consumer.position([TopicPartition(self.topic, p) for p in self._positions])
        with self._cond:
            moved = False
            for tp in current:
                if tp.offset >= 0 and tp.offset > self._positions.get(tp.partition, 0):
                    self._positions[tp.partition] = tp.offset
                    moved = True
            if moved:
                self._cond.notify_all()

    def end_offsets(self, timeout: float = 30.0) -> dict[int, int]:
        """Each partition's last stable offset (where read_committed reading ends)."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

        if self._admin is None:
            self._admin = AdminClient(dict[str, Any](self.client))
        futures = self._admin.list_offsets(
            {TopicPartition(self.topic, p): OffsetSpec.latest() for p in self._positions},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout,
        )
        return {tp.partition: f.result(timeout).offset for tp, f in futures.items()}

    def read_to_end(self, timeout: float = 30.0) -> None:
        """Return once every record written before the call has been handed over."""
        deadline = time.monotonic() + timeout
        ends = self.end_offsets(timeout)
        with self._cond:
            while True:
                if self._failure is not None:
                    raise LogError(f"reading {self.topic} failed: {self._failure}")
                if all(self._positions[p] >= end for p, end in ends.items()):
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    behind = {p: (self._positions[p], e) for p, e in ends.items()}
                    raise LogError(f"{self.topic} not read to its end in time: {behind}")
                self._cond.wait(min(left, 0.1))

    def send(
        self, key: bytes | None, value: bytes | None, *, wait: bool = True, timeout: float = 30.0
    ) -> None:
        """Write a record (``value`` None: a tombstone); with ``wait``, until it and every
        record sent before it are acknowledged (:meth:`flush`)."""

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self._send_failures.append(err)

        producer = self._writer()
        while True:
            try:
                producer.produce(self.topic, value, key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if wait:
            self.flush(timeout)
        else:
            producer.poll(0)

    def _writer(self) -> Any:
        """The producer, made at the first write: a reader (a viewer's principal, which may
        not write and so gets no producer id) never makes one."""
        with self._writer_lock:
            if self._producer is None:
                self._producer = self._new_producer()
        return self._producer

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer(
            self.client
            | {
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "client.id": f"{self.name}-{self.topic}-writer",
            }
        )

    def flush(self, timeout: float = 30.0) -> None:
        """Until everything sent is acknowledged; raises if any of it failed."""
        if self._producer is None:
            return  # nothing was ever sent
        if self._producer.flush(timeout) != 0:
            raise LogError(f"writing {self.topic}: not acknowledged in {timeout:.0f} s")
        if self._send_failures:
            failure, self._send_failures = self._send_failures[0], []
            raise LogError(f"writing {self.topic}: {failure}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._producer is not None:
            self._producer.flush(10)
        if self._consumer is not None:
            self._consumer.close()
