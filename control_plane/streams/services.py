"""The data API's work, for the REST views and the console: produce, read, consumer instances.

Every function acts as a :class:`~control_plane.streams.kafka.Delegation` (an API key, or
a console member): the broker applies that principal's ACLs, whatever the caller checked
before. Callers authorize and validate first; these functions do the Kafka side and say
what happened, per record where Kafka answers per record.

* **Produce**: :func:`produce` (per-record results) and :func:`produce_answer` (the data
  API's response body and status). :func:`produce_idempotently` keeps a
  :class:`~control_plane.streams.models.ProduceReceipt` per ``Idempotency-Key`` so that a
  retry gets the first answer and produces nothing.
* **Reads from an offset**: :func:`read_partition`, on the blocking client pool.
* **Consumer instances** (REST proxy members): :func:`create_instance`,
  :func:`poll_instance`, :func:`commit_instance`, run on the gateway loop.

Synchronous functions here block the calling thread (a request's) until the brokers
answer or the timeout passes (``Unavailable``); :func:`produce_records` is a coroutine
for the gateway loop.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from control_plane.access.models import ServiceAccount
from control_plane.core.errors import Conflict, InvalidInput, ServiceError, Unavailable
from control_plane.streams import codec
from control_plane.streams.kafka import (
    ConsumerInstance,
    Delegation,
    bootstrap_servers,
    choose_partition,
    error_info,
    gateway,
    kafka_error,
    readers,
    spoils_sequence,
    wait_for_topic,
)
from control_plane.streams.models import ProduceReceipt
from control_plane.tenancy.models import Tenant
from data_plane.client import EARLIEST, LATEST, KafkaClientError
from data_plane.records.batch import TimestampType

TIMESTAMP_TYPES = {
    TimestampType.CREATE_TIME: "create_time",
    TimestampType.LOG_APPEND_TIME: "log_append_time",
}
HTTP_OK, HTTP_MULTI_STATUS = 200, 207


# --- produce ---------------------------------------------------------------------------------


async def produce_records(
    who: Delegation, bootstrap: list[str], topic: str, records: list[codec.OutRecord], acks: str
) -> list[dict[str, Any]]:
    """Send every record, then wait for every acknowledgement; one result per record.

    Records are grouped into batches per partition here (aiokafka's batch API) rather than
    sent one by one: a request of 500 records costs a few batches, not 500 sends. A record
    without a partition gets the one aiokafka's default partitioner picks (murmur2 of the
    key, as Kafka clients; unkeyed records spread).
    """
    try:
        # A producer that cannot start (the brokers refuse the key's idempotent writes, or
        # do not answer) fails every record the same way, as a metadata failure does.
        producer = await gateway.producer(who, acks, bootstrap)
    except Exception as exc:  # noqa: BLE001 - every record fails the same way
        return [{"error": error_info(exc)} for _ in records]
    # Stamped here, as a Kafka client stamps at send time.
    now_ms = int(time.time() * 1000)
    stamps = [now_ms if r.timestamp_ms is None else r.timestamp_ms for r in records]
    results: list[dict[str, Any] | None] = [None] * len(records)
    try:
        await wait_for_topic(producer, topic)
    except Exception as exc:  # noqa: BLE001 - every record fails the same way
        return [{"error": error_info(exc)} for _ in records]
    # (partition, batch, [(record index, offset within the batch)]) in send order.
    open_batches: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
    full: list[tuple[int, Any, list[tuple[int, int]]]] = []
    for i, (r, stamp) in enumerate(zip(records, stamps, strict=True)):
        partition = choose_partition(producer, topic, r.partition, r.key, r.value)
        entry = open_batches.get(partition)
        for _ in range(2):
            if entry is None:
                entry = open_batches[partition] = (producer.create_batch(), [])
            meta = entry[0].append(key=r.key, value=r.value, timestamp=stamp, headers=r.headers)
            if meta is not None:
                entry[1].append((i, meta.offset))
                break
            full.append((partition, *open_batches.pop(partition)))
            entry = None
        else:
            results[i] = {
                "error": {
                    "code": "record_too_large",
                    "retriable": False,
                    "message": "the record does not fit in a request",
                }
            }
    full += [(p, batch, members) for p, (batch, members) in open_batches.items()]
    sent = []
    spoiled: tuple[BaseException, int] | None = None  # (error, partition)
    for partition, batch, members in full:
        try:
            sent.append(
                (await producer.send_batch(batch, topic, partition=partition), partition, members)
            )
        except Exception as exc:  # noqa: BLE001 - reported for these records
            for i, _ in members:
                results[i] = {"error": error_info(exc)}
    for future, partition, members in sent:
        try:
            meta = await future
        except Exception as exc:  # noqa: BLE001 - reported for these records
            for i, _ in members:
                results[i] = {"error": error_info(exc)}
            if acks == "all" and spoils_sequence(exc):
                spoiled = spoiled or (exc, partition)
            continue
        for i, relative in members:
            if meta is None:  # acks=0: sent, and nothing more is known
                results[i] = {"partition": None, "offset": None, "timestamp": stamps[i]}
                continue
            results[i] = {
                "partition": meta.partition,
                "offset": meta.offset + relative if acks != "0" else None,
                # LogAppendTime topics: the broker's time for the batch.
                "timestamp": meta.timestamp if meta.timestamp_type == 1 else stamps[i],
            }
    if spoiled is not None:
        # A refused batch left the pooled idempotent producer's sequence numbers ahead of
        # the broker's: replace it, or every later request to the partition would fail.
        gateway.retire_producer(who, acks, producer, spoiled[0], topic=topic, partition=spoiled[1])
    return [
        r if r is not None else {"error": error_info(RuntimeError("not sent"))} for r in results
    ]


def produce(
    who: Delegation,
    topic: str,
    records: list[codec.OutRecord],
    acks: str,
    *,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`produce_records` from a synchronous caller: one result per record.

    Raises ``Unavailable`` when no broker is known or the brokers do not answer within
    ``timeout`` (by default 30 s and a millisecond per record)."""
    bootstrap = bootstrap_servers()
    if timeout is None:
        timeout = 30.0 + len(records) / 1000
    return gateway.run(lambda: produce_records(who, bootstrap, topic, records, acks), timeout)


@dataclass(frozen=True)
class ProduceAnswer:
    """The data API's answer to a produce request: its body and HTTP status (200 when every
    record was produced, 207 otherwise), and whether it replays an earlier answer."""

    body: dict[str, Any]
    status_code: int
    replayed: bool = False


def produce_answer(
    who: Delegation, topic: str, records: list[codec.OutRecord], acks: str
) -> ProduceAnswer:
    results = produce(who, topic, records, acks)
    failed = sum(1 for r in results if "error" in r)
    body = {"topic": topic, "acks": acks, "failed": failed, "results": results}
    return ProduceAnswer(body, HTTP_MULTI_STATUS if failed else HTTP_OK)


def produce_idempotently(
    who: Delegation,
    *,
    tenant: Tenant,
    service_account: ServiceAccount,
    idempotency_key: str,
    request: Any,
    topic: str,
    records: list[codec.OutRecord],
    acks: str,
) -> ProduceAnswer:
    """:func:`produce_answer` at most once per (service account, ``idempotency_key``).

    ``request`` is the request body as sent: a retry must send the same one (InvalidInput
    otherwise), and gets the first answer back (``replayed``) without producing. A retry
    while the first request still runs is a Conflict. Receipts older than
    ``MILLRACE_IDEMPOTENCY_HOURS`` are forgotten. If producing raises, the receipt is
    deleted: nothing is known to be produced, so the retry runs again.
    """
    if not 1 <= len(idempotency_key) <= 255:
        raise InvalidInput("Idempotency-Key must be 1 to 255 characters")
    digest = hashlib.sha256(json.dumps([topic, request], sort_keys=True).encode()).hexdigest()
    scope = {
        "tenant": tenant,
        "service_account": service_account,
        "idempotency_key": idempotency_key,
    }
    ttl = timezone.now() - timezone.timedelta(hours=settings.MILLRACE_IDEMPOTENCY_HOURS)
    ProduceReceipt.objects.filter(**scope, created_at__lt=ttl).delete()
    try:
        with transaction.atomic():
            receipt = ProduceReceipt.objects.create(**scope, request_hash=digest)
    except IntegrityError:
        earlier = ProduceReceipt.objects.filter(**scope).first()
        if earlier is None:  # it expired between the two statements
            raise Conflict("a request with this Idempotency-Key is in progress") from None
        if earlier.request_hash != digest:
            raise InvalidInput(
                "this Idempotency-Key was used for a different request; use a new key"
            ) from None
        if earlier.response is None:
            raise Conflict("a request with this Idempotency-Key is in progress") from None
        assert earlier.status_code is not None
        return ProduceAnswer(earlier.response, earlier.status_code, replayed=True)
    try:
        answer = produce_answer(who, topic, records, acks)
    except BaseException:
        # Nothing is known to be produced: let the client's retry run it again.
        receipt.delete()
        raise
    ProduceReceipt.objects.filter(pk=receipt.pk).update(
        response=answer.body, status_code=answer.status_code
    )
    return answer


# --- reading a partition ---------------------------------------------------------------------


def render_read_record(
    topic: str, partition: int, record: Any, ts_type: Any, formats: dict[str, str]
) -> Any:
    return codec.render_record(
        topic=topic,
        partition=partition,
        offset=record.offset,
        timestamp=record.timestamp,
        timestamp_type=ts_type,
        key=record.key,
        value=record.value,
        headers=[(h.key, h.value) for h in record.headers],
        **formats,
    )


def read_partition(
    who: Delegation,
    topic: str,
    partition: int,
    *,
    offset: int | None = None,
    timestamp: int | None = None,
    position: str | None = None,
    max_records: int,
    max_bytes: int,
    wait_ms: int,
    formats: dict[str, str],
    read_committed: bool = True,
) -> dict[str, Any]:
    """Records of one partition from ``offset``, the first at or after ``timestamp``, or a
    ``position`` (earliest, latest, newest: the last ``max_records``; earliest when none is
    given); waits up to ``wait_ms`` for a first record. The data API's read response.
    ``read_committed`` (the default): committed records only, up to the last stable
    offset (latest and newest count from there).

    Raises ``Unavailable`` when the brokers cannot be read, and the API error of a Kafka
    error code a broker answered with (``kafka_error``)."""
    tp = (topic, partition)
    try:
        with readers.client(who, timeout=10.0 + wait_ms / 1000) as client:
            start = _start(client, tp, offset, timestamp, position, max_records, read_committed)
            answer = client.read(
                tp,
                start,
                max_records=max_records,
                max_bytes=max_bytes,
                max_wait_ms=wait_ms,
                read_committed=read_committed,
            )
    except KafkaClientError as exc:
        raise Unavailable(f"reading {topic}[{partition}] failed: {exc}") from None
    if answer.error:
        error = kafka_error(answer.error, topic=topic, partition=partition)
        if answer.error == 1:  # offset out of range: say what is in range
            error.message += (
                f": offset {start} is outside {answer.log_start_offset} to {answer.high_watermark}"
            )
        raise error
    records = [
        render_read_record(topic, partition, rec, TIMESTAMP_TYPES[ts_type], formats)
        for rec, ts_type, _ in answer.records
    ]
    next_offset = answer.records[-1][0].offset + 1 if answer.records else start
    if not answer.records:
        # Only transaction markers or aborted records were read: page on past them.
        next_offset = max(next_offset, answer.scanned_to)
    return {
        "topic": topic,
        "partition": partition,
        "records": records,
        "next_offset": next_offset,
        "log_start_offset": answer.log_start_offset,
        "high_watermark": answer.high_watermark,
        "last_stable_offset": answer.last_stable_offset,
        "isolation_level": "read_committed" if read_committed else "read_uncommitted",
    }


def _start(
    client: Any,
    tp: tuple[str, int],
    offset: int | None,
    timestamp: int | None,
    position: str | None,
    max_records: int,
    read_committed: bool = True,
) -> int:
    if offset is not None:
        return int(offset)
    position = position or "earliest"
    spec = timestamp if timestamp is not None else EARLIEST if position == "earliest" else LATEST
    committed = {"read_committed": read_committed}
    answers = client.list_offsets({tp: spec}, **committed)
    found = answers[tp]
    if found.error:
        raise kafka_error(found.error, topic=tp[0], partition=tp[1])
    if timestamp is not None and found.offset < 0:
        # Every record is older: start at the end, as Kafka's consumers do.
        found = client.list_offsets({tp: LATEST}, **committed)[tp]
    if position == "newest" and timestamp is None:
        start = client.list_offsets({tp: EARLIEST}, **committed)[tp].offset
        return max(start, found.offset - int(max_records))
    return int(found.offset)


# --- consumer instances ----------------------------------------------------------------------


def render_consumed(m: Any, formats: dict[str, str]) -> Any:
    """A record an aiokafka consumer returned, as the data API shows records."""
    return codec.render_record(
        topic=m.topic,
        partition=m.partition,
        offset=m.offset,
        timestamp=m.timestamp,
        timestamp_type="log_append_time" if m.timestamp_type else "create_time",
        key=m.key,
        value=m.value,
        headers=list(m.headers),
        **formats,
    )


def kafka_failure(exc: Exception, what: str) -> ServiceError:
    """The API error for an aiokafka failure: 403 when authorization failed, else 503."""
    info = error_info(exc)
    error = ServiceError(f"{what}: {info['message']}")
    if "authorization" in info["code"]:
        error.status, error.code = 403, "permission_denied"
    else:
        error.status, error.code = 503, "unavailable"
    return error


def instance_body(instance: ConsumerInstance) -> dict[str, Any]:
    assignment = sorted((tp.topic, tp.partition) for tp in instance.consumer.assignment())
    return {
        "id": instance.id,
        "group": instance.group,
        "topics": instance.topics,
        "auto_commit": instance.auto_commit,
        "idle_timeout_seconds": int(instance.idle_timeout),
        # Consumers here read committed transactions only, as librdkafka's do by default.
        "isolation_level": "read_committed",
        "assignment": [{"topic": t, "partition": p} for t, p in assignment],
        **instance.formats,
    }


def create_instance(
    who: Delegation,
    *,
    group: str,
    topics: list[str],
    auto_offset_reset: str,
    auto_commit: bool,
    idle_timeout: float,
    formats: dict[str, str],
) -> ConsumerInstance:
    """Join ``group`` as a member held by this web process for ``who``."""
    bootstrap = bootstrap_servers()

    async def create() -> ConsumerInstance:
        return await gateway.create_instance(
            who,
            bootstrap,
            group=group,
            topics=topics,
            auto_offset_reset=auto_offset_reset,
            auto_commit=auto_commit,
            idle_timeout=idle_timeout,
            formats=formats,
        )

    try:
        return gateway.run(create, 30)
    except ServiceError:
        raise
    except Exception as exc:  # noqa: BLE001 - aiokafka's errors, told to the caller
        raise kafka_failure(exc, "cannot join the group") from None


def instance(who: Delegation, instance_id: str) -> ConsumerInstance:
    """``who``'s instance ``instance_id`` on this web process (NotFound otherwise)."""
    return gateway.instance(instance_id, who)


def delete_instance(who: Delegation, instance_id: str) -> None:
    gateway.instance(instance_id, who)
    gateway.run(lambda: gateway.delete_instance(instance_id, who), 15)


def poll_instance(
    instance: ConsumerInstance, *, wait_ms: int, max_records: int
) -> list[dict[str, Any]]:
    """Records of the instance's assigned partitions, rendered in its formats, ordered by
    topic and partition; waits up to ``wait_ms`` for some."""

    async def poll() -> Any:
        async with instance.lock:
            return await instance.consumer.getmany(timeout_ms=wait_ms, max_records=max_records)

    try:
        batches = gateway.run(poll, wait_ms / 1000 + 30)
    except ServiceError:
        raise
    except Exception as exc:  # noqa: BLE001 - aiokafka's errors, told to the caller
        raise kafka_failure(exc, "poll failed") from None
    return [
        render_consumed(m, instance.formats)
        for tp in sorted(batches, key=lambda tp: (tp.topic, tp.partition))
        for m in batches[tp]
    ]


def commit_instance(
    instance: ConsumerInstance, offsets: dict[tuple[str, int], int] | None
) -> list[dict[str, Any]]:
    """Commit ``offsets`` ((topic, partition) -> next offset to read), or everything the
    instance has polled when None; the committed offsets, ordered.

    Conflict when a partition is not assigned to the instance, or when a rebalance
    refuses the commit."""
    from aiokafka import TopicPartition

    wanted: dict[Any, int] | None = None
    if offsets is not None:
        wanted = {TopicPartition(topic, part): off for (topic, part), off in offsets.items()}
        owned = instance.consumer.assignment()
        foreign = [f"{tp.topic}[{tp.partition}]" for tp in wanted if tp not in owned]
        if foreign:
            raise Conflict(
                "not assigned to this instance (a rebalance moved them?): " + ", ".join(foreign)
            )

    async def commit() -> dict[Any, int]:
        async with instance.lock:
            if wanted is None:
                positions = {
                    tp: await instance.consumer.position(tp)
                    for tp in instance.consumer.assignment()
                }
                await instance.consumer.commit(positions)
                return positions
            await instance.consumer.commit(wanted)
            return wanted

    try:
        done = gateway.run(commit, 30)
    except ServiceError:
        raise
    except Exception as exc:  # noqa: BLE001 - aiokafka's errors, told to the caller
        failure = kafka_failure(exc, "commit failed")
        if "rebalance" in failure.message.lower() or "generation" in failure.message.lower():
            failure.status, failure.code = 409, "conflict"
        raise failure from None
    return [
        {"topic": tp.topic, "partition": tp.partition, "offset": off}
        for tp, off in sorted(done.items(), key=lambda kv: (kv[0].topic, kv[0].partition))
    ]
