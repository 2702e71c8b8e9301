"""Consumer groups through the REST API, against a real broker: details, lag, reset, delete.

The control plane reads log offsets and record timestamps from the broker as the internal
principal; these tests check what it reads against what real clients produced and
committed, and that a reset made over REST is where the next real consumer starts.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from control_plane.groups import lag
from control_plane.groups.models import LagSample
from control_plane.tenancy.models import Tenant
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer, wait_assigned
from tests.conftest import key_client

# The broker (another process) must see what the REST API writes, so this module's test
# commits; the database is flushed after it, which is why the module holds one test.
pytestmark = pytest.mark.django_db(transaction=True)

HOUR_MS = 3_600_000


@pytest.fixture(autouse=True)
def _key_hashes(settings):
    # The broker fixture's keys were hashed (Argon2) before tests/conftest.py switched to
    # a fast hasher; the REST API must still verify them.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


def produce_at(kafka, name, partition, count, timestamp_ms):
    """``count`` records to one partition, all with the same CreateTime."""
    from confluent_kafka import Producer

    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"linger.ms": 5}))
    for i in range(count):
        producer.produce(
            name, value=f"{partition}-{i}".encode(), partition=partition, timestamp=timestamp_ms + i
        )
    assert producer.flush(30) == 0


def rest(kafka, key=None):
    key = key or kafka.admin_a
    return key_client(key.key_id, key.secret)


def tenant(kafka, which="a"):
    return Tenant.objects.get(slug=kafka.tenant_a if which == "a" else kafka.tenant_b)


def url(kafka, group="", suffix=""):
    base = f"/api/v1/tenants/{kafka.tenant_a}/consumer-groups/"
    return f"{base}{group}/{suffix}" if group else base


def commit(c, name, offsets):
    from confluent_kafka import TopicPartition

    c.commit(offsets=[TopicPartition(name, p, o) for p, o in offsets.items()], asynchronous=False)


def first_offsets(kafka, group, name, partitions):
    """The offset the next consumer of ``group`` reads first on each of ``partitions``."""
    c = consumer(kafka, group, **{"auto.offset.reset": "latest"})
    c.subscribe([name])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while not set(partitions) <= set(first) and time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            first.setdefault(msg.partition(), msg.offset())
    c.close()
    return {p: o for p, o in first.items() if p in partitions}


def wait_empty(api, kafka, group):
    deadline = time.monotonic() + 10
    while api.get(url(kafka, group)).json()["state"] != "Empty":
        assert time.monotonic() < deadline, "the group never became Empty"
        time.sleep(0.1)


def test_group_details_lag_reset_and_delete_over_rest(kafka):
    name = topic_name("lag")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    base = int(time.time() * 1000) - HOUR_MS
    produce_at(kafka, name, 0, 10, base)
    produce_at(kafka, name, 1, 6, base + 1000)
    group = f"g-{name}"
    c = consumer(kafka, group, **{"client.id": "lag-test-client"})
    c.subscribe([name])
    wait_assigned([c], [2])
    commit(c, name, {0: 3, 1: 6})
    api = rest(kafka)

    got = api.get(url(kafka, group))
    assert got.status_code == 200, got.content
    body = got.json()
    assert (body["state"], body["protocol_type"], body["member_count"]) == ("Stable", "consumer", 1)
    (member,) = body["members"]
    assert member["client_id"] == "lag-test-client" and member["host"]
    assert member["subscription"] == [name]
    assert member["assignment"] == [{"topic": name, "partitions": [0, 1]}]
    rows = {o["partition"]: o for o in body["offsets"]}
    assert (rows[0]["committed_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (3, 10, 7)
    assert (rows[1]["committed_offset"], rows[1]["log_end_offset"], rows[1]["lag"]) == (6, 6, 0)
    assert rows[1]["lag_seconds"] == 0.0
    # The record at offset 3 was stamped base+3, about an hour ago.
    assert HOUR_MS / 1000 - 5 < rows[0]["lag_seconds"] < HOUR_MS / 1000 + 120
    assert rows[0]["member_id"] == member["member_id"] and rows[0]["log_start_offset"] == 0
    assert body["total_lag"] == 7 and body["offsets_error"] is None

    listed = api.get(url(kafka)).json()["results"]
    mine = [g for g in listed if g["group_id"] == group]
    assert mine and mine[0]["total_lag"] == 7 and mine[0]["max_lag_seconds"] > 3000

    # The lag job records what the API shows.
    assert lag.sample_lag() >= 2
    history = api.get(url(kafka, group, "lag-history/")).json()
    assert {(h["partition"], h["lag"]) for h in history} >= {(0, 7), (1, 0)}

    # While the member is there, reset and delete are refused and change nothing.
    refused = api.post(url(kafka, group, "reset-offsets/"), {"to": "earliest"}, format="json")
    assert refused.status_code == 409 and "members" in refused.json()["error"]["message"]
    assert api.delete(url(kafka, group)).status_code == 409
    c.close()  # leaves the group: Empty
    wait_empty(api, kafka, group)

    # A dry run previews and changes nothing.
    preview = api.post(
        url(kafka, group, "reset-offsets/"), {"to": "earliest", "dry_run": True}, format="json"
    ).json()
    assert preview["dry_run"] is True
    assert [
        (o["partition"], o["previous_offset"], o["new_offset"]) for o in preview["offsets"]
    ] == [
        (0, 3, 0),
        (1, 6, 0),
    ]
    assert {
        o["partition"]: o["committed_offset"] for o in api.get(url(kafka, group)).json()["offsets"]
    } == {0: 3, 1: 6}

    ends = {0: 10, 1: 6}

    def reset(payload, expected):
        answer = api.post(url(kafka, group, "reset-offsets/"), payload, format="json")
        assert answer.status_code == 200, answer.content
        assert {o["partition"]: o["new_offset"] for o in answer.json()["offsets"]} == expected
        readable = {p: o for p, o in expected.items() if o < ends[p]}
        if readable:  # the next real consumer starts exactly there
            assert first_offsets(kafka, group, name, set(readable)) == readable
            wait_empty(api, kafka, group)

    reset({"to": "earliest"}, {0: 0, 1: 0})
    reset({"to": "offset", "offset": 5, "topics": [{"topic": name, "partitions": [0]}]}, {0: 5})
    # base+1003 is after every record of partition 0 (base..base+9), so that one goes to
    # the log end; on partition 1 (base+1000..base+1005) it is offset 3.
    stamp = datetime.fromtimestamp((base + 1003) / 1000, tz=UTC).isoformat()
    reset({"to": "timestamp", "timestamp": stamp}, {0: 10, 1: 3})
    reset({"to": "latest"}, {0: 10, 1: 6})
    answer = api.post(
        url(kafka, group, "reset-offsets/"), {"to": "offset", "offset": 99}, format="json"
    )
    assert {o["partition"]: o["new_offset"] for o in answer.json()["offsets"]} == {0: 10, 1: 6}

    # Bad requests are specific and change nothing.
    for payload, field in (
        ({"to": "sideways"}, "to"),
        ({"to": "timestamp"}, "timestamp"),
        ({"to": "offset"}, "offset"),
        ({"to": "earliest", "topics": [{"topic": "nope"}]}, "topics"),
        ({"to": "earliest", "topics": [{"topic": name, "partitions": [7]}]}, "topics"),
    ):
        bad = api.post(url(kafka, group, "reset-offsets/"), payload, format="json")
        assert bad.status_code == 400 and field in bad.json()["error"]["details"], bad.content

    # Another tenant does not see the group; a key without group ACLs may not.
    other = rest(kafka, kafka.admin_b)
    assert (
        other.get(f"/api/v1/tenants/{kafka.tenant_b}/consumer-groups/{group}/").status_code == 404
    )
    assert other.get(url(kafka, group)).status_code == 404
    reader = rest(kafka, kafka.reader_a)
    assert reader.get(url(kafka, group)).status_code == 403
    assert group not in [g["group_id"] for g in reader.get(url(kafka)).json()["results"]]

    assert api.delete(url(kafka, group)).status_code == 204
    assert api.get(url(kafka, group)).status_code == 404
    assert not LagSample.objects.filter(group__group_id=group).exists()
