"""A blocking client for a whole cluster: metadata, offsets, and record timestamps.

Requests go to each partition's leader (found with Metadata), grouped so one request per
broker answers for all of its partitions. Per-partition failures are returned as values
(Kafka's error code), never raised, so one bad partition does not hide the others.
DescribeLogDirs is the exception: every broker answers only for the logs it holds, so
:meth:`ClusterClient.log_dirs` asks all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from data_plane.client.connection import Connection, KafkaClientError
from data_plane.log.transactions import AbortedSweep
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.records.batch import (
    BATCH_HEADER_SIZE,
    InvalidRecordBatch,
    Record,
    RecordBatch,
    TimestampType,
    read_header,
)

METADATA, LIST_OFFSETS, FETCH, DESCRIBE_LOG_DIRS = 3, 2, 1, 35
EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetAnswer:
    """ListOffsets for one partition: the offset (and its record's timestamp), or an error."""

    offset: int = -1
    timestamp: int = -1
    error: int = ErrorCode.NONE


@dataclass(frozen=True)
class ReadAnswer:
    """Records of one partition read from an offset (a Fetch), or an error.

    ``records`` holds at most the records asked for, all at or after the offset; control
    records (transaction markers) are left out. ``log_start_offset`` and
    ``high_watermark`` are the partition's, as the leader reported them.
    """

    records: list[tuple[Record, TimestampType, int]]
    log_start_offset: int = -1
    high_watermark: int = -1
    error: int = ErrorCode.NONE
    # read_committed: the reads stop here, and aborted transactions' records are left out.
    last_stable_offset: int = -1
    # The offset after the last whole batch the fetch returned (-1: none): where to read
    # next when every record read was left out (markers, aborted transactions).
    scanned_to: int = -1


@dataclass(frozen=True)
class FetchAnswer:
    """The raw record batches of one partition from an offset (a Fetch), or an error.

    ``records`` is what the leader sent: whole batches, perhaps starting before the offset
    (a batch is never split) and perhaps ending with a batch cut off by the size limit.
    """

    records: bytes
    log_start_offset: int = -1
    high_watermark: int = -1
    error: int = ErrorCode.NONE
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions in range.
    aborted: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class PositionAnswer:
    """What one partition looks like from one position (a Fetch of a single batch).

    ``timestamp`` is the timestamp of the first record at or after the position (None when
    there is none below the high watermark); ``log_start_offset`` and ``high_watermark``
    are the partition's, as the leader reported them.
    """

    timestamp: int | None = None
    log_start_offset: int = -1
    high_watermark: int = -1
    error: int = ErrorCode.NONE


class ClusterClient:
    def __init__(
        self,
        bootstrap: Iterable[tuple[str, int]],
        *,
        username: str,
        password: str,
        mechanism: str = "SCRAM-SHA-512",
        client_id: str = "millrace",
        timeout: float = 10.0,
    ) -> None:
        self._bootstrap = list(bootstrap)
        self._auth = (mechanism, username, password)
        self._client_id = client_id
        self._timeout = timeout
        self._connections: dict[tuple[str, int], Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._partitions: dict[str, int] = {}
        self._topic_errors: dict[str, int] = {}

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # --- connections and metadata ---------------------------------------------------------

    def _connection(self, address: tuple[str, int]) -> Connection:
        conn = self._connections.get(address)
        if conn is None:
            conn = Connection(*address, client_id=self._client_id, timeout=self._timeout)
            try:
                conn.authenticate(*self._auth)
            except KafkaClientError:
                conn.close()
                raise
            self._connections[address] = conn
        return conn

    def _any_connection(self) -> Connection:
        last: KafkaClientError | None = None
        for address in [*self._connections, *self._bootstrap]:
            try:
                return self._connection(address)
            except KafkaClientError as exc:
                if exc.code not in (ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION):
                    raise
                last = exc
        raise last or KafkaClientError("no bootstrap brokers", ErrorCode.BROKER_NOT_AVAILABLE)

    def refresh(self, topics: Iterable[str]) -> None:
        """Learn the brokers and the leaders of ``topics``."""
        names = sorted(set(topics))
        if names:
            self._metadata(names)

    def _metadata(self, names: list[str] | None) -> list[str]:
        """Metadata for ``names`` (None: every topic the principal may describe); returns
        the topics it found."""
        request: bodies.MetadataRequest = {
            "topics": None if names is None else [{"name": n} for n in names],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        answer = self._any_connection().request(METADATA, 9, request, bodies.MetadataResponse)
        self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
        found = []
        for topic in answer["topics"]:
            name = topic["name"]
            assert name is not None  # null only in v12+, where topics may be named by id
            self._topic_errors[name] = topic["error_code"]
            self._partitions[name] = len(topic["partitions"])
            for p in topic["partitions"]:
                self._leaders.pop((name, p["partition_index"]), None)
                if p["error_code"] == ErrorCode.NONE and p["leader_id"] >= 0:
                    self._leaders[(name, p["partition_index"])] = p["leader_id"]
            if topic["error_code"] == ErrorCode.NONE:
                found.append(name)
        return found

    def topic_error(self, topic: str) -> int:
        """The error the last refresh reported for ``topic`` (NONE when it is readable)."""
        return self._topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` as of the last refresh (None: unknown or not allowed)."""
        if self._topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            return None
        return self._partitions.get(topic)

    def _by_leader(
        self, partitions: Iterable[TopicPartition], refresh: bool = True
    ) -> tuple[dict[int, list[TopicPartition]], dict[TopicPartition, int]]:
        wanted = list(dict.fromkeys(partitions))
        if refresh:
            self.refresh({t for t, _ in wanted})
        groups: dict[int, list[TopicPartition]] = {}
        errors: dict[TopicPartition, int] = {}
        for tp in wanted:
            topic_error = self._topic_errors.get(tp[0], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            leader = self._leaders.get(tp)
            if topic_error != ErrorCode.NONE:
                errors[tp] = topic_error
            elif leader is None or leader not in self._brokers:
                errors[tp] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if not 0 <= tp[1] < self._partitions.get(tp[0], 0)
                    else ErrorCode.LEADER_NOT_AVAILABLE
                )
            else:
                groups.setdefault(leader, []).append(tp)
        return groups, errors

    def _per_leader(
        self, partitions: Iterable[TopicPartition], ask: Any, on_error: Any, refresh: bool = True
    ) -> dict[TopicPartition, Any]:
        groups, errors = self._by_leader(partitions, refresh)
        out: dict[TopicPartition, Any] = {tp: on_error(code) for tp, code in errors.items()}
        for leader, tps in groups.items():
            try:
                out.update(ask(self._connection(self._brokers[leader]), tps))
            except KafkaClientError as exc:
                broken = self._connections.pop(self._brokers[leader], None)
                if broken is not None:
                    broken.close()
                out.update({tp: on_error(exc.code) for tp in tps})
        return out

    # --- sizes ---------------------------------------------------------------------------

    def log_dirs(self, topics: Iterable[str] | None = None) -> dict[TopicPartition, int]:
        """Bytes on disk of each partition of ``topics`` (None: every topic the principal
        may describe), from DescribeLogDirs.

        Every live broker is asked, since each reports only the logs it holds. A partition's
        size is its leader's log; when the leader did not report it, the largest copy any
        other replica reported; when the leader answered and holds no log, 0 (nothing was
        written yet). Partitions none of that settles (unknown topics, a leader that could
        not be reached and no copy elsewhere) are absent. Sizes are of the segment files,
        so they include batch overhead and what retention has not removed yet.

        Raises :class:`KafkaClientError` with ``CLUSTER_AUTHORIZATION_FAILED`` when the
        principal may not describe the cluster, and the last connection error when no
        broker could be reached.
        """
        names = None if topics is None else sorted(set(topics))
        if names == []:
            return {}
        found = self._metadata(names)
        request: bodies.DescribeLogDirsRequest = {"topics": None}
        if names is not None:
            request["topics"] = [
                {"topic": n, "partitions": list(range(self._partitions[n]))} for n in found
            ]
        reported: dict[int, dict[TopicPartition, int]] = {}
        last: KafkaClientError | None = None
        for broker_id, address in sorted(self._brokers.items()):
            try:
                answer = self._connection(address).request(
                    DESCRIBE_LOG_DIRS, 4, request, bodies.DescribeLogDirsResponse
                )
            except KafkaClientError as exc:
                broken = self._connections.pop(address, None)
                if broken is not None:
                    broken.close()
                last = exc
                continue
            if answer["error_code"] != ErrorCode.NONE:
                raise KafkaClientError(
                    f"broker {broker_id} refused DescribeLogDirs", answer["error_code"]
                )
            sizes = reported.setdefault(broker_id, {})
            for result in answer["results"]:
                if result["error_code"] != ErrorCode.NONE:
                    continue  # an offline directory: its logs cannot be measured
                for t in result["topics"]:
                    for p in t["partitions"]:
                        if not p["is_future_key"]:  # a copy being moved between directories
                            sizes[(t["name"], p["partition_index"])] = p["partition_size"]
        if not reported and last is not None:
            raise last
        out: dict[TopicPartition, int] = {}
        for name in found:
            for index in range(self._partitions.get(name, 0)):
                tp = (name, index)
                leader = self._leaders.get(tp)
                copies = [sizes[tp] for sizes in reported.values() if tp in sizes]
                if leader in reported and tp in reported[leader]:
                    out[tp] = reported[leader][tp]
                elif copies:
                    out[tp] = max(copies)
                elif leader in reported:
                    out[tp] = 0
        return out

    # --- offsets ---------------------------------------------------------------------------

    def list_offsets(
        self,
        queries: Mapping[TopicPartition, int],
        *,
        refresh: bool = True,
        read_committed: bool = False,
    ) -> dict[TopicPartition, OffsetAnswer]:
        """ListOffsets: ``EARLIEST``, ``LATEST`` or a timestamp (ms) per partition.

        ``refresh=False`` uses the leaders the last refresh learned (a caller asking again
        about the same partitions right after).

        For a timestamp the answer is the first offset whose record has a timestamp at or
        after it (offset -1 when every record is older). ``read_committed``: LATEST is the
        last stable offset.
        """

        def ask(conn: Connection, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
            topics: dict[str, list[bodies.ListOffsetsRequestPartitions]] = {}
            for topic, index in tps:
                topics.setdefault(topic, []).append(
                    {
                        "partition_index": index,
                        "current_leader_epoch": -1,
                        "timestamp": queries[(topic, index)],
                    }
                )
            request: bodies.ListOffsetsRequest = {
                "replica_id": -1,
                "isolation_level": 1 if read_committed else 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            answer = conn.request(LIST_OFFSETS, 7, request, bodies.ListOffsetsResponse)
            return {
                (t["name"], p["partition_index"]): OffsetAnswer(
                    p["offset"], p["timestamp"], p["error_code"]
                )
                for t in answer["topics"]
                for p in t["partitions"]
            }

        return self._per_leader(queries, ask, lambda code: OffsetAnswer(error=code), refresh)

    def positions(
        self, positions: Mapping[TopicPartition, int], *, max_bytes: int = 1 << 20
    ) -> dict[TopicPartition, PositionAnswer]:
        """For each partition, the timestamp of the record at (or after) an offset.

        One Fetch per leader of at most ``max_bytes`` per partition: enough for the first
        batch, which is all that is decoded. An offset below the log start reads from the
        log start (the records before it are gone).
        """

        def ask(conn: Connection, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
            result = self._fetch(conn, {tp: positions[tp] for tp in tps}, max_bytes)
            retry = {
                tp: ans.log_start_offset
                for tp, ans in result.items()
                if ans.error == ErrorCode.OFFSET_OUT_OF_RANGE
                and 0 <= positions[tp] < ans.log_start_offset
            }
            if retry:
                result.update(self._fetch(conn, retry, max_bytes))
            return result

        return self._per_leader(positions, ask, lambda code: PositionAnswer(error=code))

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        *,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int = 0,
        read_committed: bool = False,
    ) -> ReadAnswer:
        """Up to ``max_records`` records of ``tp`` from ``offset`` (a consumer's Fetch).

        With ``max_wait_ms`` the leader holds the request until a record arrives or the
        time is up (a long poll). ``max_bytes`` bounds the fetch as in Kafka: the first
        batch is returned even if it is larger, so a big record can always be read.
        ``read_committed`` (Kafka's isolation level): only up to the last stable offset,
        and without the records of aborted transactions.
        """

        answer = self.fetch(
            tp,
            offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            read_committed=read_committed,
        )
        if answer.error != ErrorCode.NONE:
            return ReadAnswer(
                [],
                answer.log_start_offset,
                answer.high_watermark,
                answer.error,
                answer.last_stable_offset,
            )
        records = decode_records(answer.records, offset, max_records, answer.aborted)
        return ReadAnswer(
            records,
            answer.log_start_offset,
            answer.high_watermark,
            last_stable_offset=answer.last_stable_offset,
            scanned_to=_whole_batches_end(answer.records),
        )

    def fetch(
        self,
        tp: TopicPartition,
        offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int = 0,
        read_committed: bool = False,
    ) -> FetchAnswer:
        """The record batches of ``tp`` from ``offset``, undecoded (see :class:`FetchAnswer`)."""

        def ask(conn: Connection, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
            answer = self._fetch_raw(conn, {tp: offset}, max_bytes, max_wait_ms, read_committed)
            p = answer["responses"][0]["partitions"][0]
            records = _records(p) if p["error_code"] == ErrorCode.NONE else b""
            aborted = tuple(
                (t["producer_id"], t["first_offset"]) for t in p["aborted_transactions"] or ()
            )
            return {
                tp: FetchAnswer(
                    records,
                    p["log_start_offset"],
                    p["high_watermark"],
                    p["error_code"],
                    p["last_stable_offset"],
                    aborted,
                )
            }

        result: FetchAnswer = self._per_leader(
            [tp], ask, lambda code: FetchAnswer(b"", error=code)
        )[tp]
        return result

    def _fetch_raw(
        self,
        conn: Connection,
        positions: Mapping[TopicPartition, int],
        max_bytes: int,
        max_wait_ms: int = 0,
        read_committed: bool = False,
    ) -> bodies.FetchResponse:
        topics: dict[str, list[bodies.FetchRequestPartitions]] = {}
        for (topic, index), offset in positions.items():
            topics.setdefault(topic, []).append(
                {
                    "partition": index,
                    "current_leader_epoch": -1,
                    "fetch_offset": offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": max_bytes,
                }
            )
        request: bodies.FetchRequest = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1 if max_wait_ms else 0,
            "max_bytes": max_bytes * max(1, len(positions)),
            "isolation_level": 1 if read_committed else 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        answer = conn.request(FETCH, 12, request, bodies.FetchResponse)
        if answer["error_code"] != ErrorCode.NONE:
            raise KafkaClientError(f"fetch from {conn.address} failed", answer["error_code"])
        return answer

    def _fetch(
        self, conn: Connection, positions: Mapping[TopicPartition, int], max_bytes: int
    ) -> dict[TopicPartition, PositionAnswer]:
        answer = self._fetch_raw(conn, positions, max_bytes)
        out: dict[TopicPartition, PositionAnswer] = {}
        for t in answer["responses"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition_index"])
                stamp = None
                if p["error_code"] == ErrorCode.NONE and p["records"]:
                    stamp = first_timestamp(_records(p), positions[tp])
                out[tp] = PositionAnswer(
                    stamp, p["log_start_offset"], p["high_watermark"], p["error_code"]
                )
        return out


def _records(p: bodies.FetchResponsePartitions) -> bytes:
    """A decoded partition's records as bytes (None, no records, is b"")."""
    records = p["records"]
    # The type allows a file slice because the broker answers with them; a decoded answer
    # holds a memoryview.
    assert records is None or isinstance(records, bytes | bytearray | memoryview)
    return bytes(records or b"")


def first_timestamp(records: bytes, offset: int) -> int | None:
    """Timestamp of the first record at or after ``offset`` in whole batches of ``records``."""
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(records):
        header = read_header(records, pos)
        if pos + header.size > len(records):
            break  # a batch cut off by the size limit
        if header.last_offset >= offset and not header.is_control:
            try:
                batch = RecordBatch.decode(memoryview(records)[pos : pos + header.size])
            except InvalidRecordBatch:
                return None
            for record in batch.records:
                if record.offset >= offset:
                    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
                        return header.max_timestamp
                    return record.timestamp
        pos += header.size
    return None


def _whole_batches_end(records: bytes) -> int:
    """The offset after the last whole batch in ``records`` (-1 when there is none)."""
    end, pos = -1, 0
    while pos + BATCH_HEADER_SIZE <= len(records):
        header = read_header(records, pos)
        if pos + header.size > len(records):
            break
        end, pos = header.last_offset + 1, pos + header.size
    return end


def decode_records(
    records: bytes,
    offset: int,
    limit: int,
    aborted: Sequence[tuple[int, int]] = (),
) -> list[tuple[Record, TimestampType, int]]:
    """(record, timestamp type, batch max timestamp) for the first ``limit`` records at or
    after ``offset`` in the whole batches of ``records`` (a batch cut off is left out).

    ``aborted`` (a read_committed Fetch's aborted transactions: producer id, first offset)
    leaves out their records as Kafka's consumers do: a producer's transactional batches
    are skipped from its aborted transaction's first offset until its abort marker."""
    out: list[tuple[Record, TimestampType, int]] = []
    sweep = AbortedSweep(aborted)
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(records) and len(out) < limit:
        header = read_header(records, pos)
        if pos + header.size > len(records):
            break
        if sweep.aborted(header):
            pos += header.size
            continue
        if header.last_offset >= offset and not header.is_control:
            batch = RecordBatch.decode(memoryview(records)[pos : pos + header.size])
            for record in batch.records:
                if record.offset >= offset:
                    out.append((record, header.timestamp_type, header.max_timestamp))
                    if len(out) >= limit:
                        break
        pos += header.size
    return out
