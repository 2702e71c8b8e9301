"""The web tier as a Kafka client of its own brokers, acting as the caller's API key.

Every connection opened here authenticates as the caller's *delegated* principal
(``data_plane.internal_auth.proxy_username``): the broker then applies that key's ACLs,
tenant scope, quotas and revocation exactly as for the key's own connections. There is no
superuser on this path.

* **Produce** and **consumer instances** use aiokafka, on one event loop that runs in a
  background thread of the web process (:class:`Gateway`); synchronous views hand it
  coroutines. Producers are pooled per (key, acks) and closed when idle.
* **Reads from an offset** use the project's blocking client in the request's thread,
  pooled per key (:class:`ReaderPool`).
* WebSocket streams run their own aiokafka clients on the ASGI server's loop
  (``control_plane.streams.consumers``), made by :func:`stream_consumer` and
  :func:`stream_producer`.

This is the one module that reaches into aiokafka's private APIs
(:func:`wait_for_topic`, :func:`choose_partition`); everything else uses aiokafka's
public API, so an aiokafka upgrade that moves them breaks here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import KafkaError
from django.conf import settings

from control_plane.catalog.models import Broker
from control_plane.core.errors import NotFound, ServiceError, Unavailable
from data_plane import internal_auth
from data_plane.client import ClusterClient
from data_plane.protocol.errors import ErrorCode

logger = logging.getLogger("millrace.streams")

T = TypeVar("T")
ACKS = {"all": "all", "-1": "all", "1": 1, "0": 0}


@dataclass(frozen=True)
class Delegation:
    """Whom the web tier acts as: one API key of one tenant, or a console member.

    A console member (``console_user``, a user id) acts through the console principal,
    whose rights the broker derives from the member's role (``internal_auth``); ``key_id``
    is then only a label for client ids and pools.
    """

    tenant_slug: str
    key_id: str
    console_user: int | None = None

    @classmethod
    def console(cls, tenant_slug: str, user_id: int) -> Delegation:
        return cls(tenant_slug, f"console/{user_id}", console_user=user_id)

    @property
    def username(self) -> str:
        if self.console_user is not None:
            return internal_auth.console_username(self.tenant_slug, self.console_user)
        return internal_auth.proxy_username(self.tenant_slug, self.key_id)


def bootstrap_servers() -> list[str]:
    brokers = Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).values_list(
        "host", "port"
    )
    servers = [f"{host}:{port}" for host, port in brokers]
    if not servers:
        raise Unavailable("no broker is running")
    return servers


def client_options(who: Delegation, bootstrap: list[str]) -> dict[str, Any]:
    """aiokafka connection options for acting as ``who`` (the secret is never logged)."""
    return {
        "bootstrap_servers": bootstrap,
        "client_id": f"millrace-web/{who.key_id}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": internal_auth.MECHANISM,
        "sasl_plain_username": who.username,
        "sasl_plain_password": internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
    }


# What Kafka clients offer by default (librdkafka: range,roundrobin), so members of any
# client can share a group with the web tier's members.
ASSIGNORS = (RangePartitionAssignor, RoundRobinPartitionAssignor)


def error_info(exc: BaseException) -> dict[str, Any]:
    """A per-record or per-frame error: Kafka's error name and a message."""
    if isinstance(exc, KafkaError):
        name = type(exc).__name__.removesuffix("Error")
        snake = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
        return {"code": snake, "message": str(exc) or name, "retriable": exc.retriable}
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return {"code": "request_timed_out", "message": "timed out", "retriable": True}
    return {"code": "unknown", "message": str(exc) or type(exc).__name__, "retriable": False}


def spoils_sequence(exc: BaseException) -> bool:
    """Whether a batch's failure leaves an idempotent producer unusable for its partition.

    aiokafka numbers each partition's batches as it sends them. When the broker refuses a
    batch for good (a record too large, a keyless record on a compacted topic, ...), the
    producer has used that batch's sequence numbers and the broker has not, so every
    later batch to the partition is OUT_OF_ORDER_SEQUENCE_NUMBER. Kafka's Java client
    bumps its epoch here; aiokafka does not, so such a producer is replaced by a new one
    (a new producer id, sequences from 0)."""
    return isinstance(exc, KafkaError) and not exc.retriable


# --- WebSocket streams' clients ---------------------------------------------------------------


def stream_consumer(
    who: Delegation, bootstrap: list[str], *, group: str | None, start: str
) -> AIOKafkaConsumer:
    """A (not yet started) consumer for one WebSocket stream.

    In ``group`` it is a member like any Kafka client's, starting at ``start`` (earliest
    or latest) where the group has no committed offset; without a group, the stream
    assigns its partitions (:func:`assign_positions`). It never commits by itself: the
    stream commits what its session decides."""
    options = client_options(who, bootstrap)
    common: dict[str, Any] = {
        "enable_auto_commit": False,
        "fetch_max_bytes": 4 * 2**20,
        "max_partition_fetch_bytes": 2**20,
        "isolation_level": "read_committed",
    }
    if group:
        return AIOKafkaConsumer(
            **options,
            **common,
            group_id=group,
            partition_assignment_strategy=ASSIGNORS,
            auto_offset_reset=start,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )
    return AIOKafkaConsumer(**options, **common, auto_offset_reset="latest")


async def assign_positions(
    consumer: AIOKafkaConsumer, positions: list[tuple[str, int, dict[str, Any]]]
) -> None:
    """Assign ``consumer`` the partitions of ``positions`` (topic, partition, where) and
    seek each to where: ``{"offset"}``, ``{"timestamp"}`` (the end when every record is
    older) or ``{"position"}`` (earliest, latest, or ``{"timestamp"}``)."""
    tps = [TopicPartition(t, p) for t, p, _ in positions]
    consumer.assign(tps)
    by_time: dict[TopicPartition, int] = {}
    for (_, _, where), tp in zip(positions, tps, strict=True):
        if "offset" in where:
            consumer.seek(tp, int(where["offset"]))
        elif "timestamp" in where:
            by_time[tp] = int(where["timestamp"])
        else:
            position = where["position"]
            if isinstance(position, dict):
                by_time[tp] = int(position["timestamp"])
            elif position == "earliest":
                await consumer.seek_to_beginning(tp)
            else:
                await consumer.seek_to_end(tp)
    if by_time:
        found = await consumer.offsets_for_times(by_time)
        for tp, answer in found.items():
            if answer is None:
                await consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, answer.offset)


def stream_producer(who: Delegation, bootstrap: list[str]) -> AIOKafkaProducer:
    """A (not yet started) idempotent producer (acks=all) for one WebSocket stream."""
    return AIOKafkaProducer(
        **client_options(who, bootstrap),
        acks="all",
        enable_idempotence=True,
        linger_ms=1,
    )


# --- aiokafka's private APIs (only here) -----------------------------------------------------


async def wait_for_topic(producer: AIOKafkaProducer, topic: str) -> None:
    """Wait until ``producer`` knows ``topic``'s partitions (fetching its metadata).

    aiokafka does this inside ``send``; the batch API (``create_batch``/``send_batch``)
    needs it done first, and only the private ``_wait_on_metadata`` does it."""
    await producer.client._wait_on_metadata(topic)


def choose_partition(
    producer: AIOKafkaProducer,
    topic: str,
    partition: int | None,
    key: bytes | None,
    value: bytes | None,
) -> int:
    """The partition ``send`` would give a record: ``partition`` when set, else the
    producer's partitioner (murmur2 of the key, as Kafka clients). Private aiokafka API;
    call :func:`wait_for_topic` first."""
    return int(producer._partition(topic, partition, None, None, key, value))


# --- the gateway loop ------------------------------------------------------------------------


@dataclass
class _Pooled:
    producer: AIOKafkaProducer
    last_used: float = field(default_factory=time.monotonic)


@dataclass
class ConsumerInstance:
    """A group member held by the web tier for an HTTP client (a REST proxy instance)."""

    id: str
    owner: Delegation
    group: str
    topics: list[str]
    consumer: AIOKafkaConsumer
    formats: dict[str, str]
    auto_commit: bool
    idle_timeout: float
    created: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Gateway:
    """One asyncio loop in a daemon thread holding the web process's aiokafka clients."""

    PRODUCER_IDLE_SECONDS = 300.0
    SWEEP_SECONDS = 5.0

    def __init__(self) -> None:
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        self._producers: dict[tuple[str, str], _Pooled] = {}
        self._producer_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self.instances: dict[str, ConsumerInstance] = {}

    # -- running coroutines ---------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    self._sweep_task = loop.create_task(self._sweeper())
                    loop.run_forever()

                threading.Thread(target=run, name="millrace-gateway", daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    def run(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
        """Run a coroutine on the gateway loop and wait for its result (from any thread)."""
        future = asyncio.run_coroutine_threadsafe(factory(), self._ensure_loop())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise Unavailable("the brokers did not answer in time") from None

    async def _sweeper(self) -> None:
        while True:
            await asyncio.sleep(self.SWEEP_SECONDS)
            now = time.monotonic()
            for pool_key, pooled in list(self._producers.items()):
                if now - pooled.last_used > self.PRODUCER_IDLE_SECONDS:
                    self._producers.pop(pool_key, None)
                    await stop_quietly(pooled.producer.stop())
            for instance in list(self.instances.values()):
                if now - instance.last_used > instance.idle_timeout and not instance.lock.locked():
                    logger.info("consumer instance %s expired", instance.id)
                    await self._drop(instance)

    # -- producing ------------------------------------------------------------------------

    async def producer(self, who: Delegation, acks: str, bootstrap: list[str]) -> AIOKafkaProducer:
        pool_key = (who.username, acks)
        lock = self._producer_locks.setdefault(pool_key, asyncio.Lock())
        async with lock:
            pooled = self._producers.get(pool_key)
            if pooled is None:
                producer = AIOKafkaProducer(
                    **client_options(who, bootstrap),
                    acks=ACKS[acks],
                    enable_idempotence=acks == "all",
                    linger_ms=2,
                    max_batch_size=512 * 1024,
                    max_request_size=settings.MILLRACE_REST_MAX_BODY_BYTES,
                    request_timeout_ms=15_000,
                )
                try:
                    await producer.start()
                except BaseException:
                    await stop_quietly(producer.stop())
                    raise
                pooled = self._producers[pool_key] = _Pooled(producer)
            pooled.last_used = time.monotonic()
            return pooled.producer

    def retire_producer(
        self,
        who: Delegation,
        acks: str,
        producer: AIOKafkaProducer,
        exc: BaseException,
        *,
        topic: str,
        partition: int,
    ) -> None:
        """Take ``producer`` out of the pool after ``exc`` spoiled its sequence numbers
        (``spoils_sequence``): the next request gets a new producer. Its batches still in
        flight finish (``stop`` flushes them); it is stopped in the background."""
        pool_key = (who.username, acks)
        pooled = self._producers.get(pool_key)
        if pooled is None or pooled.producer is not producer:
            return  # already replaced by a request that failed alongside this one
        del self._producers[pool_key]
        logger.warning(
            "replacing the idempotent producer of %s (tenant %s) after %s on %s-%s: %s",
            who.key_id,
            who.tenant_slug,
            error_info(exc)["code"],
            topic,
            partition,
            exc,
        )
        task = asyncio.get_running_loop().create_task(stop_quietly(producer.stop()))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    # -- consumer instances ---------------------------------------------------------------

    async def create_instance(
        self,
        who: Delegation,
        bootstrap: list[str],
        *,
        group: str,
        topics: list[str],
        auto_offset_reset: str,
        auto_commit: bool,
        idle_timeout: float,
        formats: dict[str, str],
    ) -> ConsumerInstance:
        owned = sum(1 for i in self.instances.values() if i.owner.tenant_slug == who.tenant_slug)
        if owned >= settings.MILLRACE_REST_MAX_CONSUMERS_PER_TENANT:
            raise Unavailable(
                f"tenant {who.tenant_slug} already has {owned} consumer instances on this "
                "web process; delete some or let idle ones expire"
            )
        instance_id = uuid.uuid4().hex
        consumer = AIOKafkaConsumer(
            *topics,
            **client_options(who, bootstrap),
            group_id=group,
            partition_assignment_strategy=ASSIGNORS,
            auto_offset_reset=auto_offset_reset,
            enable_auto_commit=auto_commit,
            isolation_level="read_committed",
            # Bounded prefetch: one web process holds many instances.
            fetch_max_bytes=4 * 2**20,
            max_partition_fetch_bytes=2**20,
            # An instance polled less often than this leaves its group (Kafka's rule).
            max_poll_interval_ms=int(max(idle_timeout, 10) * 1000) + 30_000,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=3_000,
        )
        try:
            await consumer.start()
        except BaseException:
            await stop_quietly(consumer.stop())
            raise
        instance = ConsumerInstance(
            id=instance_id,
            owner=who,
            group=group,
            topics=topics,
            consumer=consumer,
            formats=formats,
            auto_commit=auto_commit,
            idle_timeout=idle_timeout,
        )
        self.instances[instance_id] = instance
        return instance

    def instance(self, instance_id: str, who: Delegation) -> ConsumerInstance:
        instance = self.instances.get(instance_id)
        # Another key's instance is "not found", never "forbidden".
        if instance is None or instance.owner != who:
            raise NotFound(
                f"consumer instance {instance_id!r} not found (it was deleted, expired after "
                "being idle, or lives on another web process)"
            )
        instance.last_used = time.monotonic()
        return instance

    async def _drop(self, instance: ConsumerInstance) -> None:
        if self.instances.pop(instance.id, None) is not None:
            await stop_quietly(instance.consumer.stop())

    async def delete_instance(self, instance_id: str, who: Delegation) -> None:
        instance = self.instance(instance_id, who)
        async with instance.lock:
            await self._drop(instance)


async def stop_quietly(awaitable: Awaitable[Any]) -> None:
    try:
        await asyncio.wait_for(awaitable, 10)
    except Exception:
        logger.debug("closing a Kafka client failed", exc_info=True)


gateway = Gateway()


# --- reads from an offset --------------------------------------------------------------------


class ReaderPool:
    """Blocking clients per delegated principal, reused across requests (one at a time each)."""

    IDLE_SECONDS = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[ClusterClient, float]]] = {}

    @contextlib.contextmanager
    def client(self, who: Delegation, timeout: float) -> Iterator[ClusterClient]:
        client = self._checkout(who.username)
        if client is None:
            client = ClusterClient(
                [_split(s) for s in bootstrap_servers()],
                username=who.username,
                password=internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
                mechanism=internal_auth.MECHANISM,
                client_id=f"millrace-web/{who.key_id}",
                timeout=timeout,
            )
        client._timeout = timeout
        ok = False
        try:
            yield client
            ok = True
        finally:
            if ok:
                self._checkin(who.username, client)
            else:
                client.close()

    def _checkout(self, username: str) -> ClusterClient | None:
        now = time.monotonic()
        with self._lock:
            stale = [
                c
                for clients in self._idle.values()
                for c, t in clients
                if now - t > self.IDLE_SECONDS
            ]
            for name in list(self._idle):
                self._idle[name] = [
                    (c, t) for c, t in self._idle[name] if now - t <= self.IDLE_SECONDS
                ]
            free = self._idle.get(username)
            client = free.pop()[0] if free else None
        for c in stale:
            c.close()
        return client

    def _checkin(self, username: str, client: ClusterClient) -> None:
        with self._lock:
            self._idle.setdefault(username, []).append((client, time.monotonic()))


def _split(server: str) -> tuple[str, int]:
    host, _, port = server.rpartition(":")
    return host, int(port)


readers = ReaderPool()


def kafka_error(code: int, *, topic: str, partition: int | None = None) -> ServiceError:
    """The API error for a Kafka error code a broker answered with."""
    where = f"topic {topic!r}" + (f" partition {partition}" if partition is not None else "")
    error = ServiceError(f"{ErrorCode(code).name.lower()} on {where}")
    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        error.status, error.code = 403, "permission_denied"
    elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        error.status, error.code = 404, "not_found"
    elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
        error.status, error.code = 416, "offset_out_of_range"
    else:
        error.status, error.code = 503, "unavailable"
    return error
