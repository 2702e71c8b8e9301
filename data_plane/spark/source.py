"""The `millrace` PySpark data source (Spark 4's Python Data Source API).

``spark.dataSource.register(MillraceDataSource)``, then
``spark.read.format("millrace").option("bootstrap.servers", ...).option("subscribe", ...)``.
Rows have Kafka's column layout (as Spark's own Kafka connector): key and value as binary,
topic, partition, offset, timestamp, timestampType (0 create time, 1 log append time) and
headers.

The planner asks the brokers for each partition's offsets and hands every executor one
partition's offset range; executors read it with Millrace's own Kafka client
(``data_plane.client``), authenticated with the service account's API key (SASL SCRAM by
default). Nothing holding a socket is kept on the pickled objects: each ``read`` connects
for itself. Failures carry messages meant for the person running the job (wrong secret,
missing ACL, unknown topic), since Spark shows only their text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from data_plane.client import ClusterClient, KafkaClientError
from data_plane.client.connection import AuthenticationFailed
from data_plane.protocol.errors import ErrorCode
from data_plane.records.batch import TimestampType
from data_plane.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    Settings,
    WriteSettings,
    settings,
    write_settings,
)

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)
READ_RECORDS = 10_000  # per fetch
READ_BYTES = 4 << 20  # per fetch and partition


class MillraceError(RuntimeError):
    """A read or write could not be done; the message says why and what to check."""


def connect(s: Settings) -> ClusterClient:
    return ClusterClient(
        s.bootstrap,
        username=s.credentials.key_id,
        password=s.credentials.secret,
        mechanism=s.mechanism,
        client_id="millrace-spark",
        timeout=s.timeout,
    )


def explain(exc: KafkaClientError, s: Settings, topic: str | None = None) -> MillraceError:
    """What a client failure means to the person running the job."""
    key = s.credentials.key_id
    if isinstance(exc, AuthenticationFailed):
        return MillraceError(
            f"Millrace refused API key {key}: the secret is wrong, or the key was revoked or "
            "has expired"
        )
    if exc.code in (ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION):
        servers = ",".join(f"{h}:{p}" for h, p in s.bootstrap)
        return MillraceError(f"cannot reach the Millrace brokers at {servers}: {exc}")
    return MillraceError(topic_problem(exc.code, key, topic) or f"Millrace: {exc}")


def topic_problem(code: int, key: str, topic: str | None) -> str | None:
    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        return (
            f"API key {key} may not read topic {topic!r}: its service account needs an ACL "
            "allowing READ on the topic"
        )
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"topic {topic!r} does not exist (or API key {key} may not describe it)"
    return None


class OffsetRange(InputPartition):
    """One partition's records from ``start`` (inclusive) to ``end`` (exclusive)."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition}: {self.start}..{self.end})"


def _partitions(client: ClusterClient, s: Settings) -> list[tuple[str, int]]:
    client.refresh(s.topics)
    out = []
    for topic, wanted in s.partitions.items():
        code = client.topic_error(topic)
        count = client.partition_count(topic)
        if code != ErrorCode.NONE or count is None:
            problem = topic_problem(code, s.credentials.key_id, topic)
            raise MillraceError(problem or f"topic {topic!r}: {ErrorCode(code).name}")
        for index in wanted if wanted is not None else range(count):
            if index >= count:
                raise MillraceError(f"topic {topic!r} has partitions 0 to {count - 1}")
            out.append((topic, index))
    return out


def is_timestamp(spec: Any) -> bool:
    return (
        isinstance(spec, dict) and set(spec) == {"timestamp"} and isinstance(spec["timestamp"], int)
    )


def _resolve(
    client: ClusterClient,
    tps: list[tuple[str, int]],
    spec: Any,
    default: int,
    read_committed: bool = True,
) -> dict[tuple[str, int], int]:
    """Offsets for ``spec`` ('earliest', 'latest', {topic: {partition: offset}} or
    {'timestamp': ms}); a timestamp after every record resolves to the end."""
    if spec == "earliest":
        wanted = dict.fromkeys(tps, EARLIEST)
    elif spec == "latest":
        wanted = dict.fromkeys(tps, LATEST)
    elif is_timestamp(spec):
        wanted = dict.fromkeys(tps, int(spec["timestamp"]))
    else:
        wanted = {tp: spec.get(tp[0], {}).get(tp[1], default) for tp in tps}
    asked = {tp: o for tp, o in wanted.items() if o < 0 or is_timestamp(spec)}
    committed = {"read_committed": read_committed}  # latest: the last stable offset
    answers = client.list_offsets(asked, **committed) if asked else {}
    out = {}
    for tp, offset in wanted.items():
        if tp in answers:
            answer = answers[tp]
            if answer.error:
                raise KafkaClientError(f"offsets of {tp[0]}-{tp[1]}", answer.error)
            offset = answer.offset
            if offset < 0:  # every record is older than the timestamp
                offset = client.list_offsets({tp: LATEST}, **committed)[tp].offset
        out[tp] = offset
    return out


def plan(s: Settings) -> list[OffsetRange]:
    """The offset range of every partition a batch read covers (empty ones left out)."""
    try:
        with connect(s) as client:
            tps = _partitions(client, s)
            starts = _resolve(client, tps, s.starting, EARLIEST, s.read_committed)
            ends = _resolve(client, tps, s.ending, LATEST, s.read_committed)
    except KafkaClientError as exc:
        raise explain(exc, s) from None
    return [
        OffsetRange(t, p, starts[(t, p)], ends[(t, p)])
        for t, p in tps
        if ends[(t, p)] > starts[(t, p)]
    ]


def read_range(s: Settings, r: OffsetRange) -> Iterator[tuple[Any, ...]]:
    """Every record of ``r`` as a row (connects for itself: this runs on an executor)."""
    offset = r.start
    try:
        with connect(s) as client:
            while offset < r.end:
                answer = client.read(
                    (r.topic, r.partition),
                    offset,
                    max_records=min(READ_RECORDS, r.end - offset),
                    max_bytes=READ_BYTES,
                    read_committed=s.read_committed,
                )
                if (
                    answer.error == ErrorCode.OFFSET_OUT_OF_RANGE
                    and offset < answer.log_start_offset
                ):
                    raise MillraceError(
                        f"{r.topic}-{r.partition}: offsets {offset} to "
                        f"{answer.log_start_offset - 1} were deleted by retention before they "
                        "could be read"
                    )
                if answer.error:
                    problem = topic_problem(answer.error, s.credentials.key_id, r.topic)
                    raise MillraceError(
                        problem
                        or f"reading {r.topic}-{r.partition} at offset {offset} failed: "
                        f"{ErrorCode(answer.error).name}"
                    )
                if not answer.records:
                    if answer.scanned_to <= offset:
                        break  # nothing more to read in the range
                    offset = answer.scanned_to  # only markers or aborted records: go on
                    continue
                for record, ts_type, batch_ts in answer.records:
                    if record.offset >= r.end:
                        return
                    log_append = ts_type is TimestampType.LOG_APPEND_TIME
                    stamp = batch_ts if log_append else record.timestamp
                    yield (
                        record.key,
                        record.value,
                        r.topic,
                        r.partition,
                        record.offset,
                        datetime.fromtimestamp(stamp / 1000, tz=UTC),
                        1 if log_append else 0,
                        [(h.key, h.value) for h in record.headers],
                    )
                offset = answer.records[-1][0].offset + 1
    except KafkaClientError as exc:
        raise explain(exc, s, r.topic) from None


def read_partition(s: Settings, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
    """A task's rows: its offset range's records."""
    if not isinstance(partition, OffsetRange):
        # With no partitions to read, Spark still runs one task with a bare partition.
        return iter(())
    return read_range(s, partition)


class MillraceDataSource(DataSource):
    """``format("millrace")``: read topics in batch (``read``) and as a stream (``readStream``)."""

    @classmethod
    def name(cls) -> str:
        return "millrace"

    def schema(self) -> str:
        return SCHEMA

    def _settings(self, *, streaming: bool = False) -> Settings:
        try:
            return settings(self.options, streaming=streaming)
        except OptionError as exc:
            raise MillraceError(f"millrace data source: {exc}") from None

    def reader(self, schema: Any) -> BatchReader:
        return BatchReader(self._settings())

    def streamReader(self, schema: Any) -> StreamReader:
        return StreamReader(self._settings(streaming=True))

    def _write_settings(self, schema: StructType, overwrite: bool) -> WriteSettings:
        if overwrite:
            raise MillraceError("topics are append-only: write with mode('append')")
        try:
            s = write_settings(self.options)
        except OptionError as exc:
            raise MillraceError(f"millrace data source: {exc}") from None
        check_write_schema(schema, s.topic)
        return s

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(self._write_settings(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(self._write_settings(schema, overwrite))


class BatchReader(DataSourceReader):
    def __init__(self, s: Settings) -> None:
        self.settings = s

    def partitions(self) -> list[OffsetRange]:
        return plan(self.settings)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return read_partition(self.settings, partition)


# --- streaming ------------------------------------------------------------------------------

Offsets = dict[str, dict[str, int]]  # {topic: {partition: next offset}}; JSON keys are strings


def _as_offsets(positions: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _positions(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): o for t, ps in offsets.items() for p, o in ps.items()}


def limit_records(
    start: dict[tuple[str, int], int], end: dict[tuple[str, int], int], budget: int
) -> dict[tuple[str, int], int]:
    """``end`` moved back so that at most ``budget`` records lie between ``start`` and it,
    shared between partitions in proportion to what each has waiting."""
    waiting = {tp: max(0, e - start.get(tp, 0)) for tp, e in end.items()}
    total = sum(waiting.values())
    if total <= budget:
        return dict(end)
    out = {}
    left = budget
    for tp in sorted(end):
        share = min(waiting[tp], waiting[tp] * budget // total, left)
        out[tp] = start.get(tp, 0) + share
        left -= share
    for tp in sorted(end):  # what rounding left over, in order
        extra = min(left, end[tp] - out[tp])
        out[tp] += extra
        left -= extra
    return out


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Per-partition offsets as Spark offsets, so a checkpointed query restarts where it
    stopped: every micro-batch reads [start, end) of each partition, and the checkpoint
    (not a consumer group) remembers the end. Partitions added to a topic are read from
    their beginning."""

    def __init__(self, s: Settings) -> None:
        self.settings = s
        self.target: Offsets | None = None  # Trigger.AvailableNow: the ends when it started

    def _ends(self) -> dict[tuple[str, int], int]:
        try:
            with connect(self.settings) as client:
                return _resolve(
                    client,
                    _partitions(client, self.settings),
                    "latest",
                    LATEST,
                    self.settings.read_committed,
                )
        except KafkaClientError as exc:
            raise explain(exc, self.settings) from None

    def initialOffset(self) -> Offsets:
        s = self.settings
        try:
            with connect(s) as client:
                tps = _partitions(client, s)
                return _as_offsets(_resolve(client, tps, s.starting, EARLIEST, s.read_committed))
        except KafkaClientError as exc:
            raise explain(exc, s) from None

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.settings.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = _as_offsets(self._ends())

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        ends = _positions(self.target) if self.target is not None else self._ends()
        begin = _positions(start)
        ends = {tp: max(e, begin.get(tp, 0)) for tp, e in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = limit_records(begin, ends, limit.max_rows)
        return _as_offsets(ends)

    def reportLatestOffset(self) -> Offsets:
        return _as_offsets(self._ends())

    def partitions(self, start: Offsets, end: Offsets) -> list[OffsetRange]:
        begin = _positions(start)
        return [
            OffsetRange(t, p, begin.get((t, p), 0), e)
            for (t, p), e in sorted(_positions(end).items())
            if e > begin.get((t, p), 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return read_partition(self.settings, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the query's checkpoint holds the offsets (no group commits)."""


# --- writing --------------------------------------------------------------------------------

WRITE_COLUMNS = {"key", "value", "headers", "partition", "topic"}


@dataclass
class Written(WriterCommitMessage):
    records: int


def check_write_schema(schema: StructType, topic: str | None) -> None:
    """The DataFrame's columns must be ours: Spark does not check them for a Python sink."""
    names = set(schema.names)
    if "value" not in names:
        raise MillraceError("writing to Millrace needs a 'value' column (binary or string)")
    if topic is None and "topic" not in names:
        raise MillraceError("name the topic: the option 'topic', or a 'topic' column")
    unknown = names - WRITE_COLUMNS - {"offset", "timestamp", "timestampType"}
    if unknown:
        raise MillraceError(
            f"columns {', '.join(sorted(unknown))} are not written; Millrace writes "
            "key, value, headers, partition and topic (select those first)"
        )
    for field in schema.fields:
        if field.name in ("key", "value") and not isinstance(
            field.dataType, BinaryType | StringType
        ):
            raise MillraceError(f"column {field.name!r} must be binary or string")


def producer_config(s: WriteSettings) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(f"{h}:{p}" for h, p in s.bootstrap),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": s.mechanism,
        "sasl.username": s.credentials.key_id,
        "sasl.password": s.credentials.secret,
        "client.id": "millrace-spark",
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": int(s.timeout * 1000),
    }


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def write_rows(s: WriteSettings, rows: Iterator[Any]) -> Written:
    """Produce every row with acks=all; raise on the first record the brokers refused."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    failures: list[str] = []

    def on_error(error: KafkaError) -> None:
        if error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            # A key that may write no topic gets no idempotent producer id (KIP-679): the
            # producer fails whole before any record's own answer.
            failures.append(delivery_problem(error, s))
            return
        if (
            error.code()
            in (
                KafkaError._AUTHENTICATION,
                KafkaError.SASL_AUTHENTICATION_FAILED,
            )
            or error.fatal()
        ):
            failures.append(
                f"Millrace refused API key {s.credentials.key_id}: the secret is wrong, or "
                "the key was revoked or has expired"
                if error.code() != KafkaError._ALL_BROKERS_DOWN
                else f"cannot reach the Millrace brokers: {error.str()}"
            )

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(delivery_problem(error, s))

    producer = Producer({**producer_config(s), "error_cb": on_error})

    def fatal(exc: KafkaException) -> str:
        """Why the producer failed whole: the error a poll serves (to ``on_error``, or
        raised), not the bare "fatal error" that produce or flush raise after it."""
        error = exc.args[0]
        try:
            producer.poll(0)
        except KafkaException as raised:  # a poll raises the fatal error itself
            error = raised.args[0]
        return failures[0] if failures else delivery_problem(error, s)

    count = 0
    for row in rows:
        if failures:
            break
        fields = row.asDict()
        topic = s.topic or fields.get("topic")
        if not topic:
            raise MillraceError("a row has no topic (set the option 'topic' or fill the column)")
        kwargs: dict[str, Any] = {
            "key": _bytes(fields.get("key")),
            "value": _bytes(fields.get("value")),
            "on_delivery": delivered,
        }
        if fields.get("partition") is not None:
            kwargs["partition"] = int(fields["partition"])
        if fields.get("headers"):
            kwargs["headers"] = [(h["key"], _bytes(h["value"])) for h in fields["headers"]]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain it
            except KafkaException as exc:  # the producer failed fatally
                raise MillraceError(fatal(exc)) from None
        count += 1
        producer.poll(0)
    try:
        left = producer.flush(s.timeout)
    except KafkaException as exc:  # the producer failed fatally (raised by flush)
        raise MillraceError(fatal(exc)) from None
    if failures:
        raise MillraceError(failures[0])
    if left:
        raise MillraceError(f"{left} records were not acknowledged within {s.timeout:.0f} s")
    return Written(count)


def delivery_problem(error: Any, s: WriteSettings) -> str:
    from confluent_kafka import KafkaError

    key = s.credentials.key_id
    if error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                        KafkaError.CLUSTER_AUTHORIZATION_FAILED):  # fmt: skip
        return (
            f"API key {key} may not write to the topic: its service account needs an ACL "
            "allowing WRITE on it"
        )
    if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
        return f"the topic does not exist (or API key {key} may not describe it)"
    return f"Millrace refused a record: {error.str()}"


class BatchWriter(DataSourceWriter):
    def __init__(self, s: WriteSettings) -> None:
        self.settings = s

    def write(self, iterator: Iterator[Any]) -> Written:
        return write_rows(self.settings, iterator)


class StreamWriter(DataSourceStreamWriter):
    """Each micro-batch's rows are produced with acks=all before the batch commits; a batch
    Spark runs again after a failure is produced again (at least once)."""

    def __init__(self, s: WriteSettings) -> None:
        self.settings = s

    def write(self, iterator: Iterator[Any]) -> Written:
        return write_rows(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every record was acknowledged before its task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a topic is append-only, and acknowledged records stay."""
