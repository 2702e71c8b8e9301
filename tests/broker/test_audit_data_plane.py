"""Changes made over the Kafka protocol that touch no metadata row are audited too:
DeleteRecords and OffsetDelete, each with the acting principal."""

from __future__ import annotations

import pytest

from control_plane.audit.models import AuditEvent
from data_plane.protocol.errors import ErrorCode
from data_plane.records import Record, RecordBatch
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer, wait_assigned
from tests.broker.test_wire import RawClient, produce

pytestmark = pytest.mark.django_db

DELETE_RECORDS, OFFSET_DELETE = 21, 47


def test_delete_records_is_audited_with_the_acting_key(kafka):
    name = topic_name("trim")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    batch = RecordBatch(base_offset=0, records=tuple(Record(i, 1, b"k", b"v") for i in range(4)))
    assert produce(client, name, batch.encode())["error_code"] == ErrorCode.NONE
    body = {
        "topics": [
            {
                "name": name,
                "partitions": [
                    {"partition_index": 0, "offset": 3},
                    {"partition_index": 1, "offset": -5},  # refused: not audited
                ],
            }
        ],
        "timeout_ms": 5000,
    }
    client.request(DELETE_RECORDS, 2, body)
    client.close()
    [event] = AuditEvent.objects.filter(action="records.delete", object_repr=name)
    assert event.tenant.slug == kafka.tenant_a
    assert kafka.admin_a.key_id in event.actor
    assert event.after["low_watermarks"] == {"0": 3}
    assert event.after["principal"] == kafka.admin_a.principal


def test_offset_delete_is_audited_with_the_acting_key(kafka):
    from confluent_kafka import TopicPartition

    name = topic_name("offs")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    group = f"g-{name}"
    c = consumer(kafka, group)
    c.subscribe([name])
    wait_assigned([c], [1])
    c.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    c.close()  # OffsetDelete refuses topics the group still subscribes to
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    body = {"group_id": group, "topics": [{"name": name, "partitions": [{"partition_index": 0}]}]}
    answer = client.request(OFFSET_DELETE, 0, body)
    client.close()
    assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    [event] = AuditEvent.objects.filter(action="group.delete_offsets", object_repr=group)
    assert event.after == {"principal": kafka.admin_a.principal, "partitions": [f"{name}-0"]}
    assert kafka.admin_a.key_id in event.actor
