"""Bad input over real sockets: caps, garbage, corrupt and oversized batches.

A small raw client built on our codec speaks to the broker process directly, so tests can
send what no well-behaved client would.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.headers import read_response_header, write_request_header
from data_plane.protocol.messages import APIS
from data_plane.records import Record, RecordBatch
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_consume, confluent_create, topic_name

pytestmark = pytest.mark.django_db

PRODUCE, FETCH, METADATA, SASL_HANDSHAKE, SASL_AUTH = 0, 1, 3, 17, 36


class RawClient:
    def __init__(self, kafka):
        self.sock = socket.create_connection(("127.0.0.1", kafka.port), timeout=10)
        self.correlation = 0

    def send_frame(self, body: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def send_request(self, key: int, version: int, body: dict) -> None:
        api = APIS[key]
        self.correlation += 1
        flexible = api.request.is_flexible(version)
        header = write_request_header(
            key, version, self.correlation, "raw-test", 2 if flexible else 1
        )
        self.send_frame(header + api.request.encode(body, version))

    def request(self, key: int, version: int, body: dict) -> dict:
        api = APIS[key]
        self.send_request(key, version, body)
        size = struct.unpack(">i", self._recv(4))[0]
        data = self._recv(size)
        response_header = 0 if key == 18 else (1 if api.response.is_flexible(version) else 0)
        correlation, pos = read_response_header(data, response_header)
        assert correlation == self.correlation
        return api.response.decode(data[pos:], version)

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by broker")
            out += chunk
        return out

    def is_closed(self) -> bool:
        """True once the broker closes (anything it answered first is read and dropped)."""
        self.sock.settimeout(5)
        try:
            for _ in range(64):
                if self.sock.recv(65536) == b"":
                    return True
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True

    def raw_request(self, key: int, version: int, body: bytes = b"") -> tuple[int, bytes]:
        """Send a request no schema may exist for; return (correlation id, response body)."""
        self.correlation += 1
        self.send_frame(write_request_header(key, version, self.correlation, "raw-test", 1) + body)
        data = self._recv(struct.unpack(">i", self._recv(4))[0])
        return struct.unpack_from(">i", data)[0], data[4:]

    def login(self, key) -> None:
        assert self.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\x00" + key.key_id.encode() + b"\x00" + key.secret.encode()
        assert self.request(SASL_AUTH, 2, {"auth_bytes": token})["error_code"] == 0

    def close(self) -> None:
        self.sock.close()


def assert_broker_healthy(kafka):
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    assert client.request(METADATA, 12, {"topics": None})["brokers"]
    client.close()


def test_oversized_frame_before_authentication_closes_only_that_connection(kafka):
    bystander = RawClient(kafka)
    bystander.login(kafka.admin_a)
    attacker = RawClient(kafka)
    attacker.sock.sendall(struct.pack(">i", 2**30))  # announces 1 GiB, sends nothing more
    assert attacker.is_closed()
    assert bystander.request(METADATA, 12, {"topics": None})["brokers"]
    assert_broker_healthy(kafka)


@pytest.mark.parametrize(
    "garbage", [b"\x00\x03\x00", b"\xff" * 40, b"\x00\x03\x00\x0c" + b"\x00" * 3]
)
def test_garbage_frames_close_only_that_connection(kafka, garbage):
    client = RawClient(kafka)
    client.send_frame(garbage)
    assert client.is_closed()
    assert_broker_healthy(kafka)


def test_requests_before_authentication_are_refused(kafka):
    client = RawClient(kafka)
    api = APIS[METADATA]
    header = write_request_header(METADATA, 4, 1, "raw-test", 1)
    client.send_frame(header + api.request.encode({"topics": None}, 4))
    assert client.is_closed()


@pytest.mark.parametrize("key,version", [(999, 0), (METADATA, 99), (PRODUCE, 13), (-1, 0)])
def test_unknown_api_or_version_gets_unsupported_version(kafka, key, version):
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    correlation, body = client.raw_request(key, version, b"\x00" * 16)
    assert correlation == client.correlation
    assert struct.unpack(">hi", body) == (ErrorCode.UNSUPPORTED_VERSION, 0)
    # The connection stays usable: the request was well framed, only not served.
    assert client.request(METADATA, 12, {"topics": None})["brokers"]
    client.close()


def test_sasl_handshake_v0_is_followed_by_bare_tokens(kafka):
    """Clients before Kafka 1.0 (KIP-152) send their SASL tokens after SaslHandshake v0 as
    bare length-prefixed frames; the answer comes back the same way (empty for PLAIN), and
    a failure closes the connection."""
    key = kafka.admin_a
    client = RawClient(kafka)
    assert client.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    client.send_frame(b"\x00" + key.key_id.encode() + b"\x00" + key.secret.encode())
    assert client._recv(4) == b"\x00\x00\x00\x00"  # an empty answer: signed in
    assert client.request(METADATA, 12, {"topics": None})["brokers"]
    client.close()
    wrong = RawClient(kafka)
    assert wrong.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    wrong.send_frame(b"\x00" + key.key_id.encode() + b"\x00not-the-secret")
    assert wrong.is_closed()
    assert_broker_healthy(kafka)


def test_an_unserved_version_is_counted_and_logged_once_per_connection(kafka):
    """Operators see who must upgrade: each request at a version not served is counted
    (by API and version), and each connection says so once at INFO with its client id and
    tenant."""

    def unserved() -> float:
        status, text = kafka.http("/metrics")
        assert status == 200
        wanted = 'millrace_broker_unserved_requests_total{api="Metadata",version="99"}'
        found = [line for line in text.splitlines() if line.startswith(wanted)]
        return float(found[0].split()[-1]) if found else 0.0

    def logged(since: int) -> list[str]:
        lines = kafka.log_path.read_text()[since:].splitlines()
        return [line for line in lines if "'raw-test'" in line and "Metadata v99" in line]

    start, before = len(kafka.log_path.read_text()), unserved()
    for _ in range(2):  # two connections, three unserved requests each
        client = RawClient(kafka)
        client.login(kafka.admin_a)
        for _ in range(3):
            _, body = client.raw_request(METADATA, 99, b"\x00" * 16)
            assert struct.unpack(">hi", body) == (ErrorCode.UNSUPPORTED_VERSION, 0)
        assert client.request(METADATA, 12, {"topics": None})["brokers"]  # still usable
        client.close()
    assert unserved() - before == 6
    lines = logged(start)
    assert len(lines) == 2, lines
    assert all("tenant " in line and "UNSUPPORTED_VERSION" in line for line in lines)


def legacy_set(magic: int, codec: int, rows, t0: int = 1_700_000_000_000) -> bytes:
    """A message set in format v0 or v1, built by aiokafka's legacy encoder."""
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, (key, value) in enumerate(rows):
        builder.append(i, timestamp=t0 + i if magic else None, key=key, value=value)
    return bytes(builder.build())


def test_produce_v0_to_v2_are_up_converted_to_record_batches(kafka):
    """Produce v0-2 carry message formats v0 and v1 (what clients older than Kafka 0.11
    send): each partition's set is stored as one RecordBatch v2 with the log's offsets,
    the keys and values, and v1's timestamps; a corrupt set is refused whole, and the
    connection goes on."""
    name = topic_name("legacy")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    sent = [
        (0, 0, 0, [(b"a", b"v0-0"), (None, b"v0-1")]),  # version, magic, codec, rows
        (1, 0, 1, [(b"b", b"v1-0")]),
        (2, 1, 1, [(b"c", b"v2-0"), (b"d", b"v2-1")]),
        (2, 1, 0, [(None, b"v2-2")]),
    ]
    offset = 0
    for version, magic, codec, rows in sent:
        entry = produce(client, name, legacy_set(magic, codec, rows), version=version)
        assert (entry["error_code"], entry["base_offset"]) == (ErrorCode.NONE, offset)
        offset += len(rows)
    corrupt = bytearray(legacy_set(1, 0, [(None, b"bad")]))
    corrupt[-1] ^= 0xFF
    assert produce(client, name, bytes(corrupt), version=2)["error_code"] == (
        ErrorCode.CORRUPT_MESSAGE
    )
    good = RecordBatch(base_offset=0, records=(Record(0, 1, None, b"new"),)).encode()
    assert produce(client, name, good)["base_offset"] == offset
    client.close()
    got = confluent_consume(kafka, kafka.admin_a, name, 1, offset + 1)
    expected = [(k, v) for _, _, _, rows in sent for k, v in rows] + [(None, b"new")]
    assert [(m.key(), m.value()) for m in got] == expected
    assert [m.offset() for m in got] == list(range(offset + 1))
    # Format v1 carried timestamps (v0 did not: no timestamp, as Kafka stores it).
    assert [m.timestamp()[1] for m in got[3:6]] == [
        1_700_000_000_000,
        1_700_000_000_001,
        1_700_000_000_000,
    ]
    assert all(m.timestamp()[1] == -1 for m in got[:3])
    assert_broker_healthy(kafka)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_answers_in_the_old_formats(kafka, version):
    """Fetch v0-3 (consumers older than Kafka 0.11) read message format v0 (v0-1) or v1
    (v2-3), down-converted from the stored batches: every record from the offset asked
    for, at its offset, with v1's timestamps; aiokafka's legacy reader reads them."""
    from aiokafka.record.memory_records import MemoryRecords
    from confluent_kafka import Producer

    name = topic_name("oldfetch")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    producer = Producer(
        confluent_conf(kafka, kafka.admin_a, **{"linger.ms": 50, "compression.type": "gzip"})
    )
    for i in range(10):
        producer.produce(name, key=b"k%d" % i, value=b"v%d" % i, timestamp=1_700_000_000_000 + i)
    assert producer.flush(20) == 0
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    body = {
        "replica_id": -1,
        "max_wait_ms": 100,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": name,
                "partitions": [{"partition": 0, "fetch_offset": 3, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    [topic] = client.request(FETCH, version, body)["responses"]
    [part] = topic["partitions"]
    assert (part["error_code"], part["high_watermark"]) == (ErrorCode.NONE, 10)
    data = bytes(part["records"])
    assert data[16] == (0 if version < 2 else 1)  # the first message's magic
    records = MemoryRecords(data)
    got = []
    while records.has_next():
        got.extend((r.offset, r.key, r.value, r.timestamp) for r in records.next_batch())
    assert [(o, k, v) for o, k, v, _ in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(3, 10)]
    stamps = [t for *_, t in got]
    assert stamps == ([None] * 7 if version < 2 else [1_700_000_000_000 + i for i in range(3, 10)])
    client.close()


def test_unknown_api_before_authentication_is_answered_then_closed(kafka):
    client = RawClient(kafka)
    correlation, body = client.raw_request(999, 0)
    assert (correlation, body[:2]) == (client.correlation, b"\x00\x23")  # 35
    assert client.is_closed()
    assert_broker_healthy(kafka)


def produce(client, topic, batch_bytes, version=8):
    body = {
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch_bytes}]}],
    }
    response = client.request(PRODUCE, version, body)
    return response["responses"][0]["partition_responses"][0]


def test_corrupt_batch_is_refused_and_nothing_is_appended(kafka):
    name = topic_name("corrupt")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    good = RecordBatch(base_offset=0, records=(Record(0, 1, None, b"ok"),)).encode()
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # breaks the CRC
    assert produce(client, name, bytes(bad))["error_code"] == ErrorCode.CORRUPT_MESSAGE
    wrong_magic = bytearray(good)
    wrong_magic[16] = 1
    assert produce(client, name, bytes(wrong_magic))["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert produce(client, name, good)["base_offset"] == 0  # the connection is still usable
    client.close()
    assert [m.value() for m in confluent_consume(kafka, kafka.admin_a, name, 1, 1)] == [b"ok"]


def test_batch_over_max_message_bytes_is_message_too_large(kafka):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    name = topic_name("small")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    resource = ConfigResource(
        "topic",
        name,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(20)
    described = admin.describe_configs([ConfigResource("topic", name)])
    configs = next(iter(described.values())).result(20)
    assert configs["max.message.bytes"].value == "2048"
    time.sleep(1.5)  # the broker's open log picks up the new topic config
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    big = RecordBatch(base_offset=0, records=(Record(0, 1, None, b"x" * 5000),)).encode()
    assert produce(client, name, big)["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
    small = RecordBatch(base_offset=0, records=(Record(0, 1, None, b"x" * 100),)).encode()
    assert produce(client, name, small)["error_code"] == ErrorCode.NONE
    client.close()


def test_produce_over_quota_is_throttled(kafka, django_db_blocker):
    from tests.broker.test_lifecycle import committed, set_tenant_limits

    name = topic_name("quota")
    confluent_create(kafka, kafka.admin_b, name, partitions=1)
    committed(
        django_db_blocker,
        lambda: set_tenant_limits(kafka.tenant_b, produce_byte_rate=50_000),
    )
    time.sleep(1.5)  # the new quota reaches the broker's snapshot
    client = RawClient(kafka)
    client.login(kafka.admin_b)
    batch = RecordBatch(
        base_offset=0, records=tuple(Record(i, 1, None, b"q" * 1000) for i in range(100))
    ).encode()  # ~100 kB
    throttles, started = [], time.monotonic()
    for _ in range(3):
        body = {
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": batch}]}],
        }
        throttles.append(client.request(PRODUCE, 8, body)["throttle_time_ms"])
    elapsed = time.monotonic() - started
    client.close()
    committed(
        django_db_blocker,
        lambda: set_tenant_limits(kafka.tenant_b, produce_byte_rate=50 * 2**20),
    )
    # 100 kB at 50 kB/s is 2 s of budget, less the 1 s burst allowance: ~1 s of throttle.
    # Then the client, held back each time, settles at the quota: every further 100 kB
    # costs 2 s.
    assert 900 <= throttles[0] <= 1100
    assert all(1800 <= t <= 2200 for t in throttles[1:])
    assert elapsed * 1000 >= sum(throttles) * 0.9  # the broker held the responses back


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_stalled_consumers_do_not_grow_broker_memory(kafka):
    name = topic_name("stall")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    batch = RecordBatch(
        base_offset=0, records=tuple(Record(i, 1, None, b"s" * 1000) for i in range(1000))
    ).encode()
    for _ in range(16):  # a 16 MB backlog
        assert produce(client, name, batch)["error_code"] == ErrorCode.NONE
    client.close()
    fetch = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 64 * 2**20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": name,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 64 * 2**20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    assert kafka.process is not None
    before = rss_mb(kafka.process.pid)
    stalled = []
    for _ in range(8):
        consumer = RawClient(kafka)
        consumer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        consumer.login(kafka.admin_a)
        for _ in range(16):  # pipelined, never read
            consumer.send_request(FETCH, 12, fetch)
        stalled.append(consumer)
    time.sleep(3)
    growth = rss_mb(kafka.process.pid) - before
    # Buffering the answers would take 8 connections x 16 fetches x 16 MB = 2 GB. The broker
    # serves a connection's requests in order and waits for the socket to drain, and the
    # data leaves segment files by sendfile, so nothing piles up in its memory.
    assert growth < 48, f"broker RSS grew by {growth:.1f} MB under stalled consumers"
    assert_broker_healthy(kafka)  # and it keeps serving everyone else
    for consumer in stalled:
        consumer.close()
