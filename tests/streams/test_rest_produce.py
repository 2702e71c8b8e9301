"""REST produce and read against a real broker, checked with real Kafka clients."""

from __future__ import annotations

import base64
import json
import os
import threading
import time

import pytest

from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.conftest import key_client

# The keys and topics the brokers see were committed by the module fixture and the
# brokers; what a test writes itself (receipts, last-used times) stays in its transaction.
pytestmark = pytest.mark.django_db


def rest(kafka, key=None):
    key = key or kafka.admin_a
    return key_client(key.key_id, key.secret)


def produce_url(kafka, topic, tenant=None):
    return f"/api/v1/tenants/{tenant or kafka.tenant_a}/topics/{topic}/records/"


def read_url(kafka, topic, partition, tenant=None):
    return (
        f"/api/v1/tenants/{tenant or kafka.tenant_a}/topics/{topic}/partitions/{partition}/records/"
    )


def post(client, url, body, **extra):
    return client.post(url, json.dumps(body), content_type="application/json", **extra)


def consume_all(kafka, name, expected, partitions=1):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": f"check-{name}"}))
    c.assign([TopicPartition(name, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            out.append(m)
    c.close()
    return out


def test_rest_produce_then_kafka_consume_byte_exact(kafka):
    name = topic_name("rest")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    blob = os.urandom(300) + b"\x00\xff"
    client = rest(kafka)
    json_batch = {
        "records": [
            {"key": "k1", "value": {"n": 1, "s": "é"}, "headers": {"trace": "abc"}},
            {"key": None, "value": [1, 2, 3], "timestamp": 1_700_000_000_000},
            {"key": "gone", "value": None},
        ]
    }
    r = post(client, produce_url(kafka, name), json_batch)
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["failed"] == 0
    assert [x["offset"] for x in body["results"]] == [0, 1, 2]
    assert body["results"][1]["timestamp"] == 1_700_000_000_000
    binary = {
        "value_format": "binary",
        "key_format": "string",
        "header_format": "binary",
        "records": [
            {
                "key": "bin",
                "value": base64.b64encode(blob).decode(),
                "headers": [{"key": "raw", "value": base64.b64encode(b"\x01\x02").decode()}],
            }
        ],
    }
    r = post(client, produce_url(kafka, name), binary)
    assert r.status_code == 200, r.content
    # A single record: the body is the record.
    r = post(client, produce_url(kafka, name), {"value": "plain", "value_format": "string"})
    assert r.status_code == 200 and r.json()["results"][0]["offset"] == 4

    got = consume_all(kafka, name, 5)
    assert [m.value() for m in got] == [
        b'{"n":1,"s":"\xc3\xa9"}',
        b"[1,2,3]",
        None,
        blob,
        b"plain",
    ]
    assert got[0].key() == b'"k1"' and got[0].headers() == [("trace", b"abc")]
    assert got[1].timestamp()[1] == 1_700_000_000_000
    assert got[3].key() == b"bin" and got[3].headers() == [("raw", b"\x01\x02")]


def test_kafka_produce_then_rest_read(kafka):
    from confluent_kafka import Producer

    name = topic_name("read")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    blobs = [os.urandom(50 + i) for i in range(20)]
    p = Producer(confluent_conf(kafka, kafka.admin_a))
    for i, b in enumerate(blobs):
        p.produce(
            name,
            value=b,
            key=f"k{i}".encode(),
            partition=1,
            headers=[("i", str(i).encode())],
            timestamp=1_000_000 + i * 1000,
        )
    p.produce(name, value=b'{"a": 1}', partition=0)
    assert p.flush(30) == 0
    client = rest(kafka)

    r = client.get(read_url(kafka, name, 1), {"value_format": "binary", "key_format": "string"})
    assert r.status_code == 200, r.content
    body = r.json()
    assert [base64.b64decode(x["value"]) for x in body["records"]] == blobs
    assert body["records"][3]["key"] == "k3"
    assert body["records"][3]["headers"] == [{"key": "i", "value": "3"}]
    assert body["next_offset"] == 20 and body["high_watermark"] == 20

    # From an offset, bounded by max_records; then by timestamp; then the newest.
    r = client.get(
        read_url(kafka, name, 1), {"offset": 5, "max_records": 3, "value_format": "binary"}
    )
    assert [x["offset"] for x in r.json()["records"]] == [5, 6, 7]
    assert r.json()["next_offset"] == 8
    r = client.get(read_url(kafka, name, 1), {"timestamp": 1_012_500, "max_records": 2})
    assert [x["offset"] for x in r.json()["records"]] == [13, 14]
    r = client.get(read_url(kafka, name, 1), {"position": "newest", "max_records": 2})
    assert [x["offset"] for x in r.json()["records"]] == [18, 19]
    # Values that are not JSON come back as base64, said so on the record.
    assert r.json()["records"][0]["value_format"] == "binary"
    r = client.get(read_url(kafka, name, 0))
    assert r.json()["records"][0]["value"] == {"a": 1}

    # A long poll from the end returns the record produced while it waits.
    def later():
        time.sleep(0.5)
        q = Producer(confluent_conf(kafka, kafka.admin_a))
        q.produce(name, value=b'"late"', partition=1)
        q.flush(10)

    threading.Thread(target=later).start()
    started = time.monotonic()
    r = client.get(read_url(kafka, name, 1), {"position": "latest", "wait_ms": 10_000})
    assert r.status_code == 200
    assert [x["value"] for x in r.json()["records"]] == ["late"]
    assert time.monotonic() - started < 9

    r = client.get(read_url(kafka, name, 1), {"offset": 500})
    assert r.status_code == 416 and r.json()["error"]["code"] == "offset_out_of_range"
    r = client.get(read_url(kafka, name, 7))
    assert r.status_code == 404


def test_rest_read_without_a_format_shows_text_as_text(kafka):
    from confluent_kafka import Producer

    name = topic_name("auto")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    raw = [
        (b"k-json", b'{"a": 1}'),
        (b"\xff\x01", b"plain text"),
        (None, b"\x00\xff"),
        (b"t", None),
    ]
    p = Producer(confluent_conf(kafka, kafka.admin_a))
    for key, value in raw:
        p.produce(name, value=value, key=key, partition=0)
    assert p.flush(30) == 0
    client = rest(kafka)

    records = client.get(read_url(kafka, name, 0)).json()["records"]
    shown = [(r["key"], r.get("key_format"), r["value"], r.get("value_format")) for r in records]
    assert shown == [
        ("k-json", "string", {"a": 1}, "json"),
        ("/wE=", "binary", "plain text", "string"),
        (None, None, "AP8=", "binary"),
        ("t", "string", None, None),
    ]
    # Asking for auto is the default; explicit formats read as they always did.
    assert client.get(read_url(kafka, name, 0), {"value_format": "auto"}).json()["records"] == (
        records
    )
    records = client.get(read_url(kafka, name, 0), {"value_format": "json"}).json()["records"]
    shown = [(r["value"], r.get("value_format")) for r in records]
    assert shown == [
        ({"a": 1}, None),
        ("cGxhaW4gdGV4dA==", "binary"),
        ("AP8=", "binary"),
        (None, None),
    ]
    records = client.get(
        read_url(kafka, name, 0), {"key_format": "string", "value_format": "string"}
    ).json()["records"]
    shown = [(r["key"], r.get("key_format"), r["value"], r.get("value_format")) for r in records]
    assert shown == [
        ("k-json", None, '{"a": 1}', None),
        ("/wE=", "binary", "plain text", None),
        (None, None, "AP8=", "binary"),
        ("t", None, None, None),
    ]
    r = client.get(read_url(kafka, name, 0), {"value_format": "xml"})
    assert r.status_code == 400 and "value_format" in r.json()["error"]["details"]


def end_offsets(kafka, name, partitions):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": "offsets"}))
    ends = [
        c.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1] for p in range(partitions)
    ]
    c.close()
    return ends


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (
            {"records": [{"value": 1}, {"value": "@@", "partition": 0}], "value_format": "binary"},
            400,
            "records[0].value",
        ),
        (
            {
                "records": [
                    {"value": 1},
                    {
                        "value": "not base64!",
                    },
                ],
                "value_format": "binary",
            },
            400,
            "records[0].value",
        ),
        ({"records": [{"value": 1}, {"value": 2, "partition": 9}]}, 400, "records[1].partition"),
        ({"records": [{"value": 1}, {"value": 2, "partition": -1}]}, 400, "records[1].partition"),
        (
            {"records": [{"value": 1}, {"value": 2, "timestamp": "yesterday"}]},
            400,
            "records[1].timestamp",
        ),
        ({"records": [{"value": 1}, {"value": 2, "colour": "red"}]}, 400, "records[1]"),
        (
            {"records": [{"value": 1}, {"value": 2, "headers": [{"value": "x"}]}]},
            400,
            "records[1].headers[0]",
        ),
        ({"records": [{"value": 1}, {"key": None, "value": None}]}, 400, "records[1]"),
        ({"records": []}, 400, "records"),
        ({"records": [{"value": 1}], "acks": "2"}, 400, "acks"),
        ({"records": [{"value": 1}], "value_format": "xml"}, 400, "value_format"),
        (
            {
                "records": [{"value": "x"}],
                "value_format": "string",
                "key_format": "binary",
                "records_": 1,
            },
            400,
            "records_",
        ),
    ],
)
def test_rejected_batches_produce_nothing(kafka, body, status, field):
    name = f"bad-{kafka.tenant_a}"
    from tests.broker.test_clients import confluent_create as create

    try:
        create(kafka, kafka.admin_a, name, partitions=2)
    except Exception:  # noqa: BLE001 - created by an earlier case
        pass
    before = end_offsets(kafka, name, 2)
    r = post(rest(kafka), produce_url(kafka, name), body)
    assert r.status_code == status, r.content
    error = r.json()["error"]
    assert error["code"] == "invalid" and error["message"]
    assert field in error["details"], error
    assert end_offsets(kafka, name, 2) == before


def test_malformed_oversized_unknown(kafka, settings):
    name = topic_name("limits")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = rest(kafka)
    r = client.post(produce_url(kafka, name), "{not json", content_type="application/json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "parse_error"
    settings.MILLRACE_REST_MAX_BODY_BYTES = 2048
    r = post(client, produce_url(kafka, name), {"records": [{"value": "x" * 5000}]})
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert "2048" in r.json()["error"]["message"]
    r = post(client, produce_url(kafka, "no-such-topic"), {"value": 1})
    assert r.status_code == 404 and "no-such-topic" in r.json()["error"]["message"]
    assert end_offsets(kafka, name, 1) == [0]


def test_idempotency_key_replays_the_first_answer(kafka):
    name = topic_name("idem")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = rest(kafka)
    body = {"records": [{"value": i} for i in range(5)]}
    first = post(client, produce_url(kafka, name), body, HTTP_IDEMPOTENCY_KEY="batch-1")
    assert first.status_code == 200
    again = post(client, produce_url(kafka, name), body, HTTP_IDEMPOTENCY_KEY="batch-1")
    assert again.status_code == 200 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert end_offsets(kafka, name, 1) == [5]
    other = post(client, produce_url(kafka, name), {"value": 9}, HTTP_IDEMPOTENCY_KEY="batch-1")
    assert other.status_code == 400 and "different request" in other.json()["error"]["message"]
    fresh = post(client, produce_url(kafka, name), body, HTTP_IDEMPOTENCY_KEY="batch-2")
    assert [r["offset"] for r in fresh.json()["results"]] == [5, 6, 7, 8, 9]
    # A rejected request leaves no receipt: fixing it and retrying with the key works.
    bad = post(
        client,
        produce_url(kafka, name),
        {"value": "??", "value_format": "binary"},
        HTTP_IDEMPOTENCY_KEY="batch-3",
    )
    assert bad.status_code == 400
    good = post(
        client,
        produce_url(kafka, name),
        {"value": "AA==", "value_format": "binary"},
        HTTP_IDEMPOTENCY_KEY="batch-3",
    )
    assert good.status_code == 200 and good.json()["results"][0]["offset"] == 10


def test_acks_zero_and_one(kafka):
    name = topic_name("acks")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = rest(kafka)
    r = post(client, produce_url(kafka, name), {"records": [{"value": 1}], "acks": "1"})
    assert r.json()["results"][0]["offset"] == 0 and r.json()["acks"] == "1"
    r = post(client, produce_url(kafka, name), {"records": [{"value": 2}], "acks": "0"})
    assert r.status_code == 200 and r.json()["results"][0]["offset"] is None
    deadline = time.monotonic() + 10
    while end_offsets(kafka, name, 1) != [2] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert end_offsets(kafka, name, 1) == [2]


def test_acls_and_tenant_isolation(kafka):
    shared = f"shared-{topic_name()}"
    private = topic_name("private")
    confluent_create(kafka, kafka.admin_a, shared, partitions=1)
    confluent_create(kafka, kafka.admin_a, private, partitions=1)
    post(rest(kafka), produce_url(kafka, shared), {"value": "hello"})
    reader = rest(kafka, kafka.reader_a)
    # Read on shared-* only: no write anywhere, no read elsewhere; 403 names what is missing.
    r = post(reader, produce_url(kafka, shared), {"value": 1})
    assert r.status_code == 403 and "WRITE" in r.json()["error"]["message"].upper()
    r = reader.get(read_url(kafka, private, 0))
    assert r.status_code == 403
    r = reader.get(read_url(kafka, shared, 0))
    assert r.status_code == 200 and r.json()["records"][0]["value"] == "hello"
    # Denied before any existence check: a name that does not exist is also 403.
    assert reader.get(read_url(kafka, "nothing-here", 0)).status_code == 403
    # Tenant B's key: tenant A does not exist for it, and its own tenant has no such topic.
    other = rest(kafka, kafka.admin_b)
    assert post(other, produce_url(kafka, shared), {"value": 1}).status_code == 404
    assert other.get(read_url(kafka, shared, 0)).status_code == 404
    r = post(other, produce_url(kafka, shared, tenant=kafka.tenant_b), {"value": 1})
    assert r.status_code == 404
    r = other.get(read_url(kafka, shared, 0, tenant=kafka.tenant_b))
    assert r.status_code == 404
    # No credentials at all; a wrong secret.
    from rest_framework.test import APIClient

    assert APIClient().get(read_url(kafka, shared, 0)).status_code == 401
    from tests.conftest import key_client as kc

    assert kc(kafka.admin_a.key_id, "wrong").get(read_url(kafka, shared, 0)).status_code == 401


def test_a_producer_the_brokers_refuse_fails_each_record_not_the_request(monkeypatch):
    # E.g. an ACL the web tier already sees and a broker does not yet: an answer per
    # record (207), as when metadata fails, rather than a server error.
    import asyncio

    from aiokafka.errors import ClusterAuthorizationFailedError

    from control_plane.streams import codec, services
    from control_plane.streams.kafka import Delegation

    async def refuse(*args):
        raise ClusterAuthorizationFailedError()

    monkeypatch.setattr(services.gateway, "producer", refuse)
    record = codec.OutRecord(key=None, value=b"v", headers=[], partition=None, timestamp_ms=None)
    results = asyncio.run(
        services.produce_records(Delegation("acme", "MRK1"), [], "orders", [record, record], "all")
    )
    assert [r["error"]["code"] for r in results] == ["cluster_authorization_failed"] * 2


def test_rest_reads_committed_records_by_default(kafka):
    """A partition with a committed, an aborted and an open transaction: the REST read
    says read_committed and returns only the committed records, stopping at the open
    transaction (the last stable offset); read_uncommitted returns all of them."""
    from confluent_kafka import Producer

    name = topic_name("rest-tx")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    conf = confluent_conf(kafka, kafka.admin_a)

    def txn(tid: str, values: list[bytes], end: str) -> Producer:
        p = Producer({**conf, "transactional.id": f"{name}-{tid}"})
        p.init_transactions(30)
        p.begin_transaction()
        for v in values:
            p.produce(name, v, partition=0)
        p.flush(30)
        if end == "commit":
            p.commit_transaction(30)
        elif end == "abort":
            p.abort_transaction(30)
        return p

    txn("a", [b"c1", b"c2"], "commit")  # offsets 0-1, marker 2
    txn("b", [b"x1", b"x2"], "abort")  # 3-4, marker 5
    txn("c", [b"c3"], "commit")  # 6, marker 7
    still_open = txn("d", [b"open"], "leave open")  # 8: holds the LSO at 8
    client = rest(kafka)

    r = client.get(read_url(kafka, name, 0), {"value_format": "string"})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["isolation_level"] == "read_committed"
    assert [x["value"] for x in body["records"]] == ["c1", "c2", "c3"]
    assert (body["last_stable_offset"], body["high_watermark"]) == (8, 9)
    assert body["next_offset"] == 7
    # Paging on from there finds nothing more yet, and does not step past the LSO.
    r = client.get(read_url(kafka, name, 0), {"offset": 7, "value_format": "string"})
    assert r.json()["records"] == [] and r.json()["next_offset"] == 8
    # Reading from inside the aborted transaction pages past it.
    r = client.get(read_url(kafka, name, 0), {"offset": 3, "max_records": 1})
    assert [x["offset"] for x in r.json()["records"]] == [6]
    # latest is the last stable offset when reading committed.
    r = client.get(read_url(kafka, name, 0), {"position": "latest"})
    assert r.json()["next_offset"] == 8

    r = client.get(
        read_url(kafka, name, 0), {"isolation_level": "read_uncommitted", "value_format": "string"}
    )
    body = r.json()
    assert body["isolation_level"] == "read_uncommitted"
    assert [x["value"] for x in body["records"]] == ["c1", "c2", "x1", "x2", "c3", "open"]
    r = client.get(read_url(kafka, name, 0), {"isolation_level": "dirty"})
    assert r.status_code == 400 and "isolation_level" in r.json()["error"]["details"]
    still_open.abort_transaction(30)
