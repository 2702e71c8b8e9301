"""The REST data API: produce records, read a partition, and consume in a group over HTTP.

Only API keys use it: the web tier acts as the caller's key on the brokers (see
:mod:`control_plane.streams.kafka`), and checks the key's ACLs itself first, with the
caller's own address, so a denied request never reaches a broker. Everything a request
says is validated before anything is produced: a rejected batch produces nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers as drf
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.api.access import Access, Need, resolve_access
from control_plane.catalog.models import Topic
from control_plane.core.errors import Conflict, InvalidInput, NotFound, ServiceError, Unavailable
from control_plane.streams import codec
from control_plane.streams.kafka import (
    ACKS,
    ConsumerInstance,
    Delegation,
    bootstrap_servers,
    error_info,
    gateway,
    kafka_error,
    readers,
    spoils_sequence,
)
from control_plane.streams.models import ProduceReceipt
from data_plane.acl import Operation, ResourceType
from data_plane.client import EARLIEST, LATEST, KafkaClientError
from data_plane.records.batch import TimestampType

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
TIMESTAMP_TYPES = {
    TimestampType.CREATE_TIME: "create_time",
    TimestampType.LOG_APPEND_TIME: "log_append_time",
}


class PayloadTooLarge(ServiceError):
    status = 413
    code = "payload_too_large"


class DataView(APIView):
    """Resolves the tenant and the calling key; keys only (users get a clear 403)."""

    access: Access
    who: Delegation

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.access = resolve_access(request, kwargs["tenant_slug"])
        if self.access.api_key is None:
            raise NotPermittedForUsers()
        self.who = Delegation(self.access.tenant.slug, self.access.api_key.key_id)

    def require(self, operation: Operation, rtype: ResourceType, name: str) -> None:
        self.access.require(Need(None, operation, rtype), resource_name=name)

    def topic(self, name: str) -> Topic:
        topic = Topic.objects.filter(tenant=self.access.tenant, name=name).first()
        if topic is None:
            raise NotFound(f"topic {name!r} not found")
        return topic


class NotPermittedForUsers(ServiceError):
    status = 403
    code = "permission_denied"

    def __init__(self) -> None:
        super().__init__(
            "the data API acts as an API key: authenticate with a key (Basic key_id:secret "
            "or Bearer key_id.secret)"
        )


def _formats(source: Any) -> dict[str, str]:
    try:
        return codec.formats(source)
    except codec.RecordError as exc:
        raise InvalidInput(exc.message, field=exc.field) from None


def release_database() -> None:
    """Before a long poll: hand the request's database connection back (to the pool).

    Nothing after the wait needs the database, and a connection held through a 30 s wait
    would let a few long polls use up the web process's pool (``DATABASE_POOL_SIZE``).
    """
    if not connection.in_atomic_block:
        connection.close()


def _render(topic: str, partition: int, record: Any, ts_type: Any, formats: dict[str, str]) -> Any:
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


# --- produce ---------------------------------------------------------------------------------

RECORD_SCHEMA = inline_serializer(
    "ProduceRecord",
    {
        "key": drf.JSONField(required=False, allow_null=True),
        "value": drf.JSONField(required=False, allow_null=True),
        "headers": drf.JSONField(required=False),
        "partition": drf.IntegerField(required=False, min_value=0),
        "timestamp": drf.IntegerField(required=False, help_text="milliseconds since the epoch"),
    },
)
PRODUCE_REQUEST = inline_serializer(
    "ProduceRequest",
    {
        "records": RECORD_SCHEMA.__class__(many=True),
        "acks": drf.ChoiceField(choices=["all", "1", "0"], required=False, default="all"),
        "key_format": drf.ChoiceField(choices=codec.FORMATS, required=False, default="json"),
        "value_format": drf.ChoiceField(choices=codec.FORMATS, required=False, default="json"),
        "header_format": drf.ChoiceField(
            choices=codec.HEADER_FORMATS, required=False, default="string"
        ),
    },
)
PRODUCE_RESPONSE = inline_serializer(
    "ProduceResponse",
    {
        "topic": drf.CharField(),
        "acks": drf.CharField(),
        "failed": drf.IntegerField(),
        "results": inline_serializer(
            "ProduceResult",
            {
                "partition": drf.IntegerField(required=False, allow_null=True),
                "offset": drf.IntegerField(required=False, allow_null=True),
                "timestamp": drf.IntegerField(required=False),
                "error": drf.JSONField(required=False),
            },
            many=True,
        ),
    },
)


REQUEST_FIELDS = frozenset({"acks", "key_format", "value_format", "header_format"})


def parse_produce_body(body: Any, topic: Topic) -> tuple[list[codec.OutRecord], str]:
    """(records, acks) from a produce request body; InvalidInput naming the bad field."""
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    single = "records" not in body
    raw_records = [body] if single else body["records"]
    if not isinstance(raw_records, list) or not raw_records:
        raise InvalidInput("records must be a non-empty list", field="records")
    limit = settings.MILLRACE_REST_MAX_RECORDS
    if len(raw_records) > limit:
        raise InvalidInput(
            f"{len(raw_records)} records in one request; the limit is {limit}", field="records"
        )
    formats = _formats(body)
    allowed = REQUEST_FIELDS | (codec.RECORD_FIELDS if single else {"records"})
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]!r}", field=unknown[0])
    acks = str(body.get("acks", "all"))
    if acks not in ACKS:
        raise InvalidInput("acks must be 'all', '1' or '0'", field="acks")
    acks = "all" if acks == "-1" else acks
    records = []
    for i, raw in enumerate(raw_records):
        field = "record" if single else f"records[{i}]"
        if single:
            raw = {k: v for k, v in raw.items() if k not in (*formats, "acks")}
        try:
            record = codec.parse_record(raw, field, **formats)
        except codec.RecordError as exc:
            raise InvalidInput(exc.message, field=exc.field) from None
        if record.partition is not None and record.partition >= topic.partition_count:
            raise InvalidInput(
                f"topic {topic.name!r} has partitions 0 to {topic.partition_count - 1}",
                field=f"{field}.partition",
            )
        records.append(record)
    return records, acks


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
        await producer.client._wait_on_metadata(topic)
    except Exception as exc:  # noqa: BLE001 - every record fails the same way
        return [{"error": error_info(exc)} for _ in records]
    # (partition, batch, [(record index, offset within the batch)]) in send order.
    open_batches: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
    full: list[tuple[int, Any, list[tuple[int, int]]]] = []
    for i, (r, stamp) in enumerate(zip(records, stamps, strict=True)):
        partition = producer._partition(topic, r.partition, None, None, r.key, r.value)
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


class ProduceView(DataView):
    @extend_schema(
        operation_id="produce_records",
        summary="Produce records to a topic",
        description=(
            "One record (the body is the record) or a batch (`records`). Keys and values are "
            "JSON, UTF-8 strings or base64 (`key_format`, `value_format`). The whole request "
            "is validated first: a rejected request produces nothing. The response has one "
            "result per record, in order: its partition, offset and timestamp, or an error; "
            "the status is 200 when every record was produced and 207 otherwise. Send an "
            "`Idempotency-Key` header to make retries safe: a retry with the same key and "
            "body returns the first answer and produces nothing."
        ),
        request=PRODUCE_REQUEST,
        responses={200: PRODUCE_RESPONSE, 207: PRODUCE_RESPONSE},
        parameters=[
            OpenApiParameter("Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER),
        ],
        tags=["data"],
    )
    def post(self, request: Request, tenant_slug: str, topic_name: str) -> Response:
        limit = settings.MILLRACE_REST_MAX_BODY_BYTES
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > limit:
            raise PayloadTooLarge(
                f"the body is {length} bytes; the limit is {limit} (MILLRACE_REST_MAX_BODY_BYTES)"
            )
        self.require(Operation.WRITE, TOPIC, topic_name)
        topic = self.topic(topic_name)
        records, acks = parse_produce_body(request.data, topic)
        idempotency_key = request.headers.get("Idempotency-Key")
        if idempotency_key is None:
            data, code = self._produce(topic.name, records, acks)
            return Response(data, status=code)
        return self._idempotent(request, idempotency_key, topic.name, records, acks)

    def _produce(
        self, topic: str, records: list[codec.OutRecord], acks: str
    ) -> tuple[dict[str, Any], int]:
        bootstrap = bootstrap_servers()
        timeout = 30.0 + len(records) / 1000
        results = gateway.run(
            lambda: produce_records(self.who, bootstrap, topic, records, acks), timeout
        )
        failed = sum(1 for r in results if "error" in r)
        body = {"topic": topic, "acks": acks, "failed": failed, "results": results}
        return body, status.HTTP_207_MULTI_STATUS if failed else status.HTTP_200_OK

    def _idempotent(
        self,
        request: Request,
        idempotency_key: str,
        topic: str,
        records: list[codec.OutRecord],
        acks: str,
    ) -> Response:
        if not 1 <= len(idempotency_key) <= 255:
            raise InvalidInput("Idempotency-Key must be 1 to 255 characters")
        assert self.access.api_key is not None
        digest = hashlib.sha256(
            json.dumps([topic, request.data], sort_keys=True).encode()
        ).hexdigest()
        scope = {
            "tenant": self.access.tenant,
            "service_account": self.access.api_key.service_account,
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
            replay = Response(earlier.response, status=earlier.status_code)
            replay["Idempotent-Replayed"] = "true"
            return replay
        try:
            data, code = self._produce(topic, records, acks)
        except BaseException:
            # Nothing is known to be produced: let the client's retry run it again.
            receipt.delete()
            raise
        ProduceReceipt.objects.filter(pk=receipt.pk).update(response=data, status_code=code)
        return Response(data, status=code)


# --- reading a partition ---------------------------------------------------------------------

READ_FORMAT_HELP = (
    "auto (default): JSON if the bytes are JSON, else text if they are UTF-8, else base64; "
    "json, string, binary: that format, with base64 for bytes not valid in it. A record "
    "names a key's or value's format (key_format, value_format) when it is not the one "
    "asked for, so under auto always."
)


class ReadQuery(drf.Serializer):
    offset = drf.IntegerField(required=False, min_value=0)
    timestamp = drf.IntegerField(required=False, min_value=0, help_text="ms since the epoch")
    position = drf.ChoiceField(
        choices=["earliest", "latest", "newest"],
        required=False,
        help_text=(
            "earliest: the log start; latest: the end (wait for new records); newest: the "
            "last max_records records"
        ),
    )
    max_records = drf.IntegerField(required=False, min_value=1, max_value=10_000, default=100)
    max_bytes = drf.IntegerField(required=False, min_value=1, max_value=16 * 2**20, default=2**20)
    wait_ms = drf.IntegerField(required=False, min_value=0, max_value=30_000, default=0)
    key_format = drf.ChoiceField(
        choices=codec.READ_FORMATS, required=False, default=codec.AUTO, help_text=READ_FORMAT_HELP
    )
    value_format = drf.ChoiceField(
        choices=codec.READ_FORMATS, required=False, default=codec.AUTO, help_text=READ_FORMAT_HELP
    )
    header_format = drf.ChoiceField(choices=codec.HEADER_FORMATS, required=False, default="string")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = [k for k in ("offset", "timestamp", "position") if k in attrs]
        if len(given) > 1:
            raise drf.ValidationError("give one of offset, timestamp or position")
        return attrs


RECORD_RESPONSE = inline_serializer(
    "Record",
    {
        "topic": drf.CharField(),
        "partition": drf.IntegerField(),
        "offset": drf.IntegerField(),
        "timestamp": drf.IntegerField(help_text="milliseconds since the epoch"),
        "timestamp_type": drf.ChoiceField(choices=list(TIMESTAMP_TYPES.values())),
        "key": drf.JSONField(allow_null=True),
        "value": drf.JSONField(allow_null=True),
        "headers": drf.ListField(child=drf.JSONField(), help_text='[{"key", "value"}]'),
        "key_format": drf.ChoiceField(
            choices=codec.FORMATS,
            required=False,
            help_text="the key's format when it is not the one asked for (always under auto); "
            "absent for a null key",
        ),
        "value_format": drf.ChoiceField(
            choices=codec.FORMATS,
            required=False,
            help_text="the value's format when it is not the one asked for (always under "
            "auto); absent for a null value",
        ),
    },
)

READ_RESPONSE = inline_serializer(
    "ReadResponse",
    {
        "topic": drf.CharField(),
        "partition": drf.IntegerField(),
        "records": RECORD_RESPONSE.__class__(many=True),
        "next_offset": drf.IntegerField(),
        "log_start_offset": drf.IntegerField(),
        "high_watermark": drf.IntegerField(),
    },
)


class PartitionRecordsView(DataView):
    @extend_schema(
        operation_id="read_partition_records",
        summary="Read records of one partition",
        description=(
            "From an `offset`, the first record at or after a `timestamp`, or a `position` "
            "(default earliest). `wait_ms` long-polls until a record arrives. Page on with "
            "`next_offset`."
        ),
        parameters=[ReadQuery],
        responses={200: READ_RESPONSE},
        tags=["data"],
    )
    def get(self, request: Request, tenant_slug: str, topic_name: str, partition: str) -> Response:
        return self._read(request, topic_name, int(partition))

    def _read(self, request: Request, topic_name: str, partition: int) -> Response:
        self.require(Operation.READ, TOPIC, topic_name)
        topic = self.topic(topic_name)
        if partition >= topic.partition_count:
            raise NotFound(f"topic {topic.name!r} has partitions 0 to {topic.partition_count - 1}")
        query = ReadQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        formats = {k: q[k] for k in ("key_format", "value_format", "header_format")}
        tp = (topic.name, partition)
        wait_ms = q["wait_ms"]
        if wait_ms:
            release_database()
        try:
            with readers.client(self.who, timeout=10.0 + wait_ms / 1000) as client:
                offset = self._start(client, tp, q)
                answer = client.read(
                    tp,
                    offset,
                    max_records=q["max_records"],
                    max_bytes=q["max_bytes"],
                    max_wait_ms=wait_ms,
                )
        except KafkaClientError as exc:
            raise Unavailable(f"reading {topic.name}[{partition}] failed: {exc}") from None
        if answer.error:
            error = kafka_error(answer.error, topic=topic.name, partition=partition)
            if answer.error == 1:  # offset out of range: say what is in range
                error.message += (
                    f": offset {offset} is outside {answer.log_start_offset} to "
                    f"{answer.high_watermark}"
                )
            raise error
        records = [
            _render(topic.name, partition, rec, TIMESTAMP_TYPES[ts_type], formats)
            for rec, ts_type, _ in answer.records
        ]
        next_offset = answer.records[-1][0].offset + 1 if answer.records else offset
        return Response(
            {
                "topic": topic.name,
                "partition": partition,
                "records": records,
                "next_offset": next_offset,
                "log_start_offset": answer.log_start_offset,
                "high_watermark": answer.high_watermark,
            }
        )

    @staticmethod
    def _start(client: Any, tp: tuple[str, int], q: dict[str, Any]) -> int:
        if "offset" in q:
            return int(q["offset"])
        position = q.get("position", "earliest")
        spec = q.get("timestamp", EARLIEST if position == "earliest" else LATEST)
        answers = client.list_offsets({tp: spec})
        found = answers[tp]
        if found.error:
            raise kafka_error(found.error, topic=tp[0], partition=tp[1])
        if "timestamp" in q and found.offset < 0:
            # Every record is older: start at the end, as Kafka's consumers do.
            found = client.list_offsets({tp: LATEST})[tp]
        if position == "newest" and "timestamp" not in q:
            start = client.list_offsets({tp: EARLIEST})[tp].offset
            return max(start, found.offset - int(q["max_records"]))
        return int(found.offset)


# --- consumer instances ----------------------------------------------------------------------


class CreateConsumer(drf.Serializer):
    group = drf.CharField(max_length=249)
    topics = drf.ListField(child=drf.CharField(max_length=249), min_length=1, max_length=100)
    auto_offset_reset = drf.ChoiceField(choices=["earliest", "latest"], default="latest")
    auto_commit = drf.BooleanField(
        default=False,
        help_text="commit what each poll returned on the next poll (at-most-once-ish); "
        "off by default: commit explicitly after processing (at-least-once)",
    )
    idle_timeout_seconds = drf.IntegerField(min_value=10, max_value=3600, default=300)
    key_format = drf.ChoiceField(
        choices=codec.READ_FORMATS, default=codec.AUTO, help_text=READ_FORMAT_HELP
    )
    value_format = drf.ChoiceField(
        choices=codec.READ_FORMATS, default=codec.AUTO, help_text=READ_FORMAT_HELP
    )
    header_format = drf.ChoiceField(choices=codec.HEADER_FORMATS, default="string")


def _instance_body(instance: ConsumerInstance) -> dict[str, Any]:
    assignment = sorted((tp.topic, tp.partition) for tp in instance.consumer.assignment())
    return {
        "id": instance.id,
        "group": instance.group,
        "topics": instance.topics,
        "auto_commit": instance.auto_commit,
        "idle_timeout_seconds": int(instance.idle_timeout),
        "assignment": [{"topic": t, "partition": p} for t, p in assignment],
        **instance.formats,
    }


INSTANCE_RESPONSE = inline_serializer(
    "ConsumerInstance",
    {
        "id": drf.CharField(),
        "group": drf.CharField(),
        "topics": drf.ListField(child=drf.CharField()),
        "auto_commit": drf.BooleanField(),
        "idle_timeout_seconds": drf.IntegerField(),
        "assignment": drf.ListField(child=drf.JSONField()),
        "key_format": drf.CharField(),
        "value_format": drf.CharField(),
        "header_format": drf.CharField(),
    },
)


def _kafka_failure(exc: Exception, what: str) -> ServiceError:
    info = error_info(exc)
    error = ServiceError(f"{what}: {info['message']}")
    if "authorization" in info["code"]:
        error.status, error.code = 403, "permission_denied"
    else:
        error.status, error.code = 503, "unavailable"
    return error


class ConsumersView(DataView):
    @extend_schema(
        operation_id="create_consumer_instance",
        summary="Create a consumer instance in a group",
        description=(
            "The web tier joins the group as a member on the key's behalf and holds it "
            "until it is deleted or idle for `idle_timeout_seconds`. Instances live in the "
            "web process that created them: route an instance's requests to that process."
        ),
        request=CreateConsumer,
        responses={201: INSTANCE_RESPONSE},
        tags=["data"],
    )
    def post(self, request: Request, tenant_slug: str) -> Response:
        form = CreateConsumer(data=request.data)
        form.is_valid(raise_exception=True)
        spec = form.validated_data
        self.require(Operation.READ, GROUP, spec["group"])
        topics = list(dict.fromkeys(spec["topics"]))
        for name in topics:
            self.require(Operation.READ, TOPIC, name)
            self.topic(name)
        bootstrap = bootstrap_servers()
        formats = {k: spec[k] for k in ("key_format", "value_format", "header_format")}

        async def create() -> ConsumerInstance:
            return await gateway.create_instance(
                self.who,
                bootstrap,
                group=spec["group"],
                topics=topics,
                auto_offset_reset=spec["auto_offset_reset"],
                auto_commit=spec["auto_commit"],
                idle_timeout=float(spec["idle_timeout_seconds"]),
                formats=formats,
            )

        try:
            instance = gateway.run(create, 30)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - aiokafka's errors, told to the caller
            raise _kafka_failure(exc, "cannot join the group") from None
        return Response(_instance_body(instance), status=status.HTTP_201_CREATED)


class ConsumerView(DataView):
    @extend_schema(
        operation_id="get_consumer_instance",
        summary="A consumer instance and its assignment",
        responses={200: INSTANCE_RESPONSE},
        tags=["data"],
    )
    def get(self, request: Request, tenant_slug: str, instance_id: str) -> Response:
        return Response(_instance_body(gateway.instance(instance_id, self.who)))

    @extend_schema(
        operation_id="delete_consumer_instance",
        summary="Leave the group and delete the instance",
        responses={204: None},
        tags=["data"],
    )
    def delete(self, request: Request, tenant_slug: str, instance_id: str) -> Response:
        gateway.instance(instance_id, self.who)
        gateway.run(lambda: gateway.delete_instance(instance_id, self.who), 15)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PollQuery(drf.Serializer):
    max_records = drf.IntegerField(min_value=1, max_value=10_000, default=500)
    wait_ms = drf.IntegerField(min_value=0, max_value=30_000, default=1_000)


POLL_RESPONSE = inline_serializer(
    "PollResponse",
    {
        "records": RECORD_RESPONSE.__class__(many=True),
        "assignment": drf.ListField(child=drf.JSONField()),
    },
)


class ConsumerRecordsView(DataView):
    @extend_schema(
        operation_id="poll_consumer_instance",
        summary="Poll records for a consumer instance",
        description=(
            "Waits up to `wait_ms` for records of the partitions the group assigned this "
            "instance. Commit what you processed with the commit endpoint (unless the "
            "instance auto-commits): records not committed are delivered again to whoever "
            "owns the partition next."
        ),
        parameters=[PollQuery],
        responses={200: POLL_RESPONSE},
        tags=["data"],
    )
    def get(self, request: Request, tenant_slug: str, instance_id: str) -> Response:
        query = PollQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        instance = gateway.instance(instance_id, self.who)

        async def poll() -> Any:
            async with instance.lock:
                return await instance.consumer.getmany(
                    timeout_ms=q["wait_ms"], max_records=q["max_records"]
                )

        if q["wait_ms"]:
            release_database()
        try:
            batches = gateway.run(poll, q["wait_ms"] / 1000 + 30)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - aiokafka's errors, told to the caller
            raise _kafka_failure(exc, "poll failed") from None
        records = []
        for tp in sorted(batches, key=lambda tp: (tp.topic, tp.partition)):
            for m in batches[tp]:
                records.append(
                    codec.render_record(
                        topic=m.topic,
                        partition=m.partition,
                        offset=m.offset,
                        timestamp=m.timestamp,
                        timestamp_type="log_append_time" if m.timestamp_type else "create_time",
                        key=m.key,
                        value=m.value,
                        headers=list(m.headers),
                        **instance.formats,
                    )
                )
        body = _instance_body(instance)
        return Response({"records": records, "assignment": body["assignment"]})


class CommitRequest(drf.Serializer):
    offsets = drf.ListField(
        child=drf.DictField(),
        required=False,
        help_text="[{topic, partition, offset}] where offset is the next record to read; "
        "omit to commit everything the instance has polled",
    )


class ConsumerCommitView(DataView):
    @extend_schema(
        operation_id="commit_consumer_instance",
        summary="Commit offsets for a consumer instance",
        request=CommitRequest,
        responses={200: inline_serializer("Committed", {"committed": drf.ListField()})},
        tags=["data"],
    )
    def post(self, request: Request, tenant_slug: str, instance_id: str) -> Response:
        from aiokafka import TopicPartition

        form = CommitRequest(data=request.data if isinstance(request.data, dict) else {})
        form.is_valid(raise_exception=True)
        instance = gateway.instance(instance_id, self.who)
        offsets: dict[Any, int] | None = None
        if "offsets" in form.validated_data:
            offsets = {}
            for i, o in enumerate(form.validated_data["offsets"]):
                topic, part, off = o.get("topic"), o.get("partition"), o.get("offset")
                if (
                    not isinstance(topic, str)
                    or not isinstance(part, int)
                    or not isinstance(off, int)
                    or isinstance(part, bool)
                    or isinstance(off, bool)
                    or off < 0
                ):
                    raise InvalidInput(
                        "each offset needs a topic, a partition and an offset >= 0",
                        field=f"offsets[{i}]",
                    )
                offsets[TopicPartition(topic, part)] = off
            owned = instance.consumer.assignment()
            foreign = [f"{tp.topic}[{tp.partition}]" for tp in offsets if tp not in owned]
            if foreign:
                raise Conflict(
                    "not assigned to this instance (a rebalance moved them?): " + ", ".join(foreign)
                )

        async def commit() -> dict[Any, int]:
            async with instance.lock:
                if offsets is None:
                    positions = {
                        tp: await instance.consumer.position(tp)
                        for tp in instance.consumer.assignment()
                    }
                    await instance.consumer.commit(positions)
                    return positions
                await instance.consumer.commit(offsets)
                return offsets

        try:
            done = gateway.run(commit, 30)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - aiokafka's errors, told to the caller
            failure = _kafka_failure(exc, "commit failed")
            if "rebalance" in failure.message.lower() or "generation" in failure.message.lower():
                failure.status, failure.code = 409, "conflict"
            raise failure from None
        committed = [
            {"topic": tp.topic, "partition": tp.partition, "offset": off}
            for tp, off in sorted(done.items(), key=lambda kv: (kv[0].topic, kv[0].partition))
        ]
        return Response({"committed": committed})
