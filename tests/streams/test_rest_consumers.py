"""Consumer instances over HTTP: a REST member and a real Kafka member in one group."""

from __future__ import annotations

import json
import time

import pytest

from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer
from tests.streams.test_rest_produce import post, produce_url, rest

pytestmark = pytest.mark.django_db


def base(kafka, tenant=None):
    return f"/api/v1/tenants/{tenant or kafka.tenant_a}/consumers/"


def poll_until(client, url, predicate, seconds=30, **params):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        r = client.get(url, {"wait_ms": 500, **params})
        assert r.status_code == 200, r.content
        if predicate(r.json()):
            return r.json()
    raise AssertionError("condition not reached")


def test_rest_member_shares_a_group_with_a_kafka_member(kafka):
    name = topic_name("inst")
    group = f"g-{name}"
    confluent_create(kafka, kafka.admin_a, name, partitions=4)
    client = rest(kafka)
    post(
        client,
        produce_url(kafka, name),
        {"records": [{"value": i, "partition": i % 4} for i in range(40)]},
    )

    r = post(
        client, base(kafka), {"group": group, "topics": [name], "auto_offset_reset": "earliest"}
    )
    assert r.status_code == 201, r.content
    instance = r.json()
    assert (instance["key_format"], instance["value_format"]) == ("auto", "auto")
    url = f"{base(kafka)}{instance['id']}/"
    # Alone in the group: it owns the 4 partitions and reads all 40 records.
    got = []

    def all_read(body):
        got.extend(body["records"])
        return len(got) >= 40

    poll_until(client, url + "records/", all_read)
    assert sorted(rec["value"] for rec in got) == list(range(40))
    assert {rec["value_format"] for rec in got} == {"json"}  # named under the default, auto
    r = post(client, url + "commit/", {})
    assert r.status_code == 200 and {c["offset"] for c in r.json()["committed"]} == {10}

    # A Kafka client joins: the group rebalances and the two members share the partitions.
    c = consumer(kafka, group)
    c.subscribe([name])
    deadline = time.monotonic() + 30
    mine = theirs = []
    while time.monotonic() < deadline:
        c.poll(0.2)
        theirs = c.assignment()
        body = client.get(url + "records/", {"wait_ms": 200}).json()
        mine = body["assignment"]
        if len(mine) == 2 and len(theirs) == 2:
            break
    assert len(mine) == 2 and len(theirs) == 2, kafka.log_tail()
    assert {(m["topic"], m["partition"]) for m in mine}.isdisjoint(
        {(t.topic, t.partition) for t in theirs}
    )

    # Records polled but not committed go to the next owner: delete the instance (it
    # leaves the group), and the Kafka member gets every partition and those records.
    post(
        client,
        produce_url(kafka, name),
        {"records": [{"value": 100 + p, "partition": p} for p in range(4)]},
    )
    seen = poll_until(client, url + "records/", lambda b: len(b["records"]) == 2)
    assert {rec["value"] for rec in seen["records"]} <= {100, 101, 102, 103}
    assert client.delete(url).status_code == 204
    assert client.get(url).status_code == 404
    values = set()
    deadline = time.monotonic() + 30
    while len(values) < 4 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            values.add(json.loads(m.value()))
    c.close()
    assert values == {100, 101, 102, 103}


def test_instances_are_private_and_need_acls(kafka):
    shared = f"shared-{topic_name()}"
    confluent_create(kafka, kafka.admin_a, shared, partitions=1)
    client = rest(kafka)
    r = post(client, base(kafka), {"group": "private-g", "topics": [shared]})
    assert r.status_code == 201
    url = f"{base(kafka)}{r.json()['id']}/"
    # Another key of the same tenant, and a key of another tenant: not found.
    assert rest(kafka, kafka.reader_a).get(url).status_code == 404
    assert rest(kafka, kafka.admin_b).get(url).status_code == 404
    other_tenant_url = url.replace(kafka.tenant_a, kafka.tenant_b)
    assert rest(kafka, kafka.admin_b).get(other_tenant_url + "records/").status_code == 404
    # The reader may read shared-* topics but has no Read on any group.
    r = post(rest(kafka, kafka.reader_a), base(kafka), {"group": "g", "topics": [shared]})
    assert r.status_code == 403 and "GROUP" in r.json()["error"]["message"].upper()
    # Bad input names the field; unknown topics are 404; a bad commit is 400.
    r = post(client, base(kafka), {"group": "g", "topics": []})
    assert r.status_code == 400 and "topics" in r.json()["error"]["details"]
    r = post(client, base(kafka), {"group": "g", "topics": ["missing-topic"]})
    assert r.status_code == 404
    r = post(
        client, url + "commit/", {"offsets": [{"topic": shared, "partition": 0, "offset": -4}]}
    )
    assert r.status_code == 400
    assert client.delete(url).status_code == 204
