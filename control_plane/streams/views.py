"""The REST data API: produce records, read a partition, and consume in a group over HTTP.

Only API keys use it: the web tier acts as the caller's key on the brokers (see
:mod:`control_plane.streams.kafka`), and checks the key's ACLs itself first, with the
caller's own address, so a denied request never reaches a broker. Everything a request
says is validated before anything is produced: a rejected batch produces nothing.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers as drf
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.access.caller import Access, resolve_access
from control_plane.access.policy import Need
from control_plane.catalog.models import Topic
from control_plane.core.errors import InvalidInput, NotFound, ServiceError
from control_plane.streams import codec, services
from control_plane.streams.kafka import ACKS, Delegation
from control_plane.streams.services import TIMESTAMP_TYPES
from data_plane.acl import Operation, ResourceType

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


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
            answer = services.produce_answer(self.who, topic.name, records, acks)
        else:
            assert self.access.api_key is not None
            answer = services.produce_idempotently(
                self.who,
                tenant=self.access.tenant,
                service_account=self.access.api_key.service_account,
                idempotency_key=idempotency_key,
                request=request.data,
                topic=topic.name,
                records=records,
                acks=acks,
            )
        response = Response(answer.body, status=answer.status_code)
        if answer.replayed:
            response["Idempotent-Replayed"] = "true"
        return response


# --- reading a partition ---------------------------------------------------------------------

READ_FORMAT_HELP = (
    "auto (default): JSON if the bytes are JSON, else text if they are UTF-8, else base64; "
    "json, string, binary: that format, with base64 for bytes not valid in it. A record "
    "names a key's or value's format (key_format, value_format) when it is not the one "
    "asked for, so under auto always."
)


ISOLATION_LEVELS = ["read_committed", "read_uncommitted"]


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
    isolation_level = drf.ChoiceField(
        choices=ISOLATION_LEVELS,
        required=False,
        default="read_committed",
        help_text=(
            "read_committed (the default, as librdkafka's consumers): records of committed "
            "transactions only, up to the last stable offset; read_uncommitted: everything "
            "up to the high watermark, aborted transactions' records included"
        ),
    )

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
        "last_stable_offset": drf.IntegerField(),
        "isolation_level": drf.ChoiceField(choices=ISOLATION_LEVELS),
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
        if q["wait_ms"]:
            release_database()
        return Response(
            services.read_partition(
                self.who,
                topic.name,
                partition,
                offset=q.get("offset"),
                timestamp=q.get("timestamp"),
                position=q.get("position"),
                max_records=q["max_records"],
                max_bytes=q["max_bytes"],
                wait_ms=q["wait_ms"],
                formats=formats,
                read_committed=q["isolation_level"] == "read_committed",
            )
        )


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


INSTANCE_RESPONSE = inline_serializer(
    "ConsumerInstance",
    {
        "id": drf.CharField(),
        "group": drf.CharField(),
        "topics": drf.ListField(child=drf.CharField()),
        "auto_commit": drf.BooleanField(),
        "idle_timeout_seconds": drf.IntegerField(),
        "isolation_level": drf.ChoiceField(choices=["read_committed"]),
        "assignment": drf.ListField(child=drf.JSONField()),
        "key_format": drf.CharField(),
        "value_format": drf.CharField(),
        "header_format": drf.CharField(),
    },
)


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
        formats = {k: spec[k] for k in ("key_format", "value_format", "header_format")}
        instance = services.create_instance(
            self.who,
            group=spec["group"],
            topics=topics,
            auto_offset_reset=spec["auto_offset_reset"],
            auto_commit=spec["auto_commit"],
            idle_timeout=float(spec["idle_timeout_seconds"]),
            formats=formats,
        )
        return Response(services.instance_body(instance), status=status.HTTP_201_CREATED)


class ConsumerView(DataView):
    @extend_schema(
        operation_id="get_consumer_instance",
        summary="A consumer instance and its assignment",
        responses={200: INSTANCE_RESPONSE},
        tags=["data"],
    )
    def get(self, request: Request, tenant_slug: str, instance_id: str) -> Response:
        return Response(services.instance_body(services.instance(self.who, instance_id)))

    @extend_schema(
        operation_id="delete_consumer_instance",
        summary="Leave the group and delete the instance",
        responses={204: None},
        tags=["data"],
    )
    def delete(self, request: Request, tenant_slug: str, instance_id: str) -> Response:
        services.delete_instance(self.who, instance_id)
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
        instance = services.instance(self.who, instance_id)
        if q["wait_ms"]:
            release_database()
        records = services.poll_instance(
            instance, wait_ms=q["wait_ms"], max_records=q["max_records"]
        )
        body = services.instance_body(instance)
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
        form = CommitRequest(data=request.data if isinstance(request.data, dict) else {})
        form.is_valid(raise_exception=True)
        instance = services.instance(self.who, instance_id)
        offsets: dict[tuple[str, int], int] | None = None
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
                offsets[(topic, part)] = off
        return Response({"committed": services.commit_instance(instance, offsets)})
