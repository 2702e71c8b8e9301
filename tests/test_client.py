"""The control plane's Kafka client on its own: batch decoding and a misbehaving broker."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from data_plane.client import Connection, KafkaClientError
from data_plane.client.cluster import first_timestamp
from data_plane.protocol.errors import ErrorCode
from data_plane.records.batch import Record, RecordBatch, TimestampType
from data_plane.records.compression import Compression


def batch(base, count, ts, **kw):
    records = tuple(Record(base + i, ts + i, None, b"v") for i in range(count))
    return RecordBatch(base, records, **kw).encode()


def test_first_timestamp_reads_the_record_at_or_after_the_offset():
    data = batch(0, 5, 1_000, compression=Compression.ZSTD) + batch(
        5, 5, 2_000, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=9_999
    )
    assert first_timestamp(data, 0) == 1_000
    assert first_timestamp(data, 3) == 1_003
    assert first_timestamp(data, 6) == 9_999  # LogAppendTime: the broker's time counts
    assert first_timestamp(data, 10) is None
    assert first_timestamp(data[:-3], 6) is None  # the batch was cut by the size limit
    assert first_timestamp(b"", 0) is None


def serve_once(answer: bytes) -> int:
    """A fake broker that reads one request and sends ``answer`` (then closes)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def run():
        conn, _ = server.accept()
        with conn:
            size = struct.unpack(">i", conn.recv(4))[0]
            while size > 0:
                size -= len(conn.recv(size))
            conn.sendall(answer)
        server.close()

    threading.Thread(target=run, daemon=True).start()
    return server.getsockname()[1]


@pytest.mark.parametrize(
    "answer",
    [
        struct.pack(">i", 6) + struct.pack(">i", 1) + b"\x00\x07",  # truncated body
        struct.pack(">i", 8) + struct.pack(">i", 99) + b"\x00\x00\x00\x00",  # wrong id
        struct.pack(">i", -5),  # negative size
        b"",  # closed without answering
    ],
)
def test_a_broken_answer_is_a_client_error_not_a_crash(answer):
    conn = Connection("127.0.0.1", serve_once(answer), timeout=5)
    with pytest.raises(KafkaClientError):
        conn.request(17, 1, {"mechanism": "PLAIN"})


def test_an_unreachable_broker_is_broker_not_available():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(KafkaClientError) as err:
        Connection("127.0.0.1", port, timeout=2)
    assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE
