"""The control plane's own Kafka client, as the internal principal, against a real broker."""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from control_plane.catalog.brokers import broker_client
from data_plane import internal_auth
from data_plane.client import EARLIEST, LATEST, AuthenticationFailed, ClusterClient, Connection
from data_plane.protocol.errors import ErrorCode as E
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer
from tests.broker.test_groups_rest import (
    HOUR_MS,
    _key_hashes,
    commit,
    produce_at,
    rest,
    tenant,
    url,
)

pytestmark = pytest.mark.django_db

__all__ = ["_key_hashes"]  # the autouse fixture, shared with the REST test


def test_internal_client_reads_offsets_and_timestamps(kafka):
    name = topic_name("ic")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    base = int(time.time() * 1000) - HOUR_MS
    produce_at(kafka, name, 0, 10, base)
    with broker_client(tenant(kafka)) as client:
        ends = client.list_offsets({(name, 0): LATEST, (name, 1): LATEST, (name, 9): LATEST})
        assert (ends[(name, 0)].offset, ends[(name, 1)].offset) == (10, 0)
        assert ends[(name, 9)].error == E.UNKNOWN_TOPIC_OR_PARTITION
        assert client.list_offsets({(name, 0): EARLIEST})[(name, 0)].offset == 0
        assert client.list_offsets({(name, 0): base + 4})[(name, 0)].offset == 4
        assert client.list_offsets({(name, 0): base + 99})[(name, 0)].offset == -1
        at = client.positions({(name, 0): 7, (name, 1): 0})
        assert at[(name, 0)].timestamp == base + 7 and at[(name, 0)].high_watermark == 10
        assert at[(name, 1)].timestamp is None  # nothing to read there
        # Another tenant's topic of the same name does not exist for this tenant.
        missing = client.list_offsets({("nope-" + name, 0): LATEST})
        assert missing[("nope-" + name, 0)].error == E.UNKNOWN_TOPIC_OR_PARTITION
    with broker_client(tenant(kafka, "b")) as other:
        assert other.list_offsets({(name, 0): LATEST})[(name, 0)].error == (
            E.UNKNOWN_TOPIC_OR_PARTITION
        )


def test_internal_principal_is_read_only_and_needs_the_secret(kafka):
    name = topic_name("ro")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    host, port = "127.0.0.1", kafka.port
    user = internal_auth.username(kafka.tenant_a)
    with pytest.raises(AuthenticationFailed):
        Connection(host, port).authenticate(internal_auth.MECHANISM, user, "wrong")
    secret = internal_auth.password(settings.MILLRACE_INTERNAL_SECRET)
    with pytest.raises(AuthenticationFailed):  # SCRAM only: PLAIN never sees the secret
        Connection(host, port).authenticate("PLAIN", user, secret)
    with pytest.raises(AuthenticationFailed):  # no such tenant
        Connection(host, port).authenticate(
            internal_auth.MECHANISM, internal_auth.username("no-such-tenant"), secret
        )
    conn = Connection(host, port)
    conn.authenticate(internal_auth.MECHANISM, user, secret)
    from data_plane.records.batch import Record, RecordBatch

    batch = RecordBatch(0, (Record(0, int(time.time() * 1000), None, b"x"),)).encode()
    answer = conn.request(
        0,
        9,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == (
        E.TOPIC_AUTHORIZATION_FAILED
    )
    conn.close()
    with ClusterClient(
        [(host, port)], username=user, password=secret
    ) as client:  # it can still read
        assert client.list_offsets({(name, 0): LATEST})[(name, 0)].offset == 0


def test_group_detail_says_why_log_offsets_are_missing(kafka, monkeypatch):
    from confluent_kafka import TopicPartition

    name = topic_name("down")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    group = f"g-{name}"
    c = consumer(kafka, group)
    c.assign([TopicPartition(name, 0, 0)])
    commit(c, name, {0: 0})
    c.close()
    monkeypatch.setattr(settings, "MILLRACE_INTERNAL_SECRET", "not-the-brokers-secret")
    body = rest(kafka).get(url(kafka, group)).json()
    assert body["offsets"][0]["committed_offset"] == 0
    assert body["offsets"][0]["log_end_offset"] is None and body["offsets"][0]["lag"] is None
    assert "authentication" in body["offsets_error"]
    refused = rest(kafka).post(url(kafka, group, "reset-offsets/"), {"to": "latest"}, format="json")
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"
