"""Console consumer group, overview and cluster pages against a real broker: lag that
moves, its history chart, offset reset with preview and confirmation, throughput samples,
storage from DescribeLogDirs, and the operators' cluster page."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from django.test import Client

from control_plane.audit.models import AuditEvent
from control_plane.catalog import usage
from control_plane.catalog.models import TopicSample
from control_plane.groups import lag as group_lag
from control_plane.groups import topic_samples
from control_plane.groups.models import CommittedOffset, LagSample
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role, Tenant
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer
from tests.conftest import SYSTEM, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def members(kafka):
    suffix = uuid.uuid4().hex[:6]
    tenant = Tenant.objects.get(slug=kafka.tenant_a)
    out = {}
    for name, role in (("viewer", Role.VIEWER), ("dev", Role.DEVELOPER), ("admin", Role.ADMIN)):
        user = make_user(f"{name}-{suffix}")
        tenancy_services.add_member(SYSTEM, tenant, user=user, role=role)
        client = Client()
        client.force_login(user)
        out[name] = client
    outsider = make_user(f"out-{suffix}")
    tenancy_services.add_member(
        SYSTEM, Tenant.objects.get(slug=kafka.tenant_b), user=outsider, role=Role.OWNER
    )
    out["outsider"] = Client()
    out["outsider"].force_login(outsider)
    return out


def produce(kafka, topic, count, start=0):
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for i in range(start, start + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(20) == 0


def consume_and_commit(kafka, topic, group, count):
    c = consumer(kafka, group)
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 30
    while got < count and time.monotonic() < deadline:
        for m in c.consume(count - got, timeout=1):
            assert m.error() is None
            got += 1
    c.commit(offsets=[TopicPartition(topic, 0, count)], asynchronous=False)
    c.close()


def lag_cell(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'<td class="lag">(\d+)</td>', html)]


def test_group_lag_moves_has_history_and_resets_with_a_preview(kafka, members):
    topic, group = topic_name("lag"), f"g-{uuid.uuid4().hex[:6]}"
    confluent_create(kafka, kafka.admin_a, topic, partitions=1)
    produce(kafka, topic, 20)
    consume_and_commit(kafka, topic, group, 5)
    base = f"/t/{kafka.tenant_a}/groups/"
    listing = members["viewer"].get(base).content.decode()
    assert group in listing
    page = members["viewer"].get(f"{base}{group}/").content.decode()
    assert lag_cell(page) == [15]
    assert "No lag samples" in page

    assert group_lag.sample_lag() >= 1
    produce(kafka, topic, 10, start=20)
    assert group_lag.sample_lag() >= 1
    page = members["viewer"].get(f"{base}{group}/").content.decode()
    assert lag_cell(page) == [25]  # the lag moved
    data = json.loads(page.split('id="lag-history-data" type="application/json">')[1].split("<")[0])
    assert data["series"][0]["values"][-2:] == [15, 25]
    assert LagSample.objects.filter(group__group_id=group).count() == 2
    # A viewer sees no reset form and cannot post one.
    assert "Preview reset" not in page
    reset = f"{base}{group}/reset/"
    assert members["viewer"].post(reset, {"to": "earliest", "preview": "1"}).status_code == 403

    dev = members["dev"]
    assert "Preview reset" in dev.get(f"{base}{group}/").content.decode()
    preview = dev.post(reset, {"to": "offset", "offset": "12", "preview": "1"})
    assert preview.status_code == 200
    html = preview.content.decode()
    assert f'value="{topic}:0=12"' in html and "Nothing has changed yet" in html
    assert CommittedOffset.objects.get(group__group_id=group).offset == 5  # only a preview
    bad = dev.post(reset, {"to": "timestamp", "timestamp": "soon", "preview": "1"})
    assert bad.status_code == 400 and "enter a date and time" in bad.content.decode()
    done = dev.post(reset, {"confirm": "1", "offset_for": [f"{topic}:0=12"]})
    assert done.status_code == 302
    assert CommittedOffset.objects.get(group__group_id=group).offset == 12
    assert AuditEvent.objects.filter(action="group.reset_offsets", object_repr=group).exists()
    assert lag_cell(dev.get(f"{base}{group}/").content.decode()) == [18]

    # Another tenant's member sees none of it.
    outsider = members["outsider"]
    assert outsider.get(f"{base}{group}/").status_code == 404
    assert outsider.post(reset, {"to": "earliest", "preview": "1"}).status_code == 404

    # Delete needs the typed id.
    delete = f"{base}{group}/delete/"
    dev.post(delete, {"confirm": "wrong"})
    assert CommittedOffset.objects.filter(group__group_id=group).exists()
    assert dev.post(delete, {"confirm": group}).status_code == 302
    assert group not in dev.get(base).content.decode().split('id="groups"')[1]


def test_overview_shows_storage_throughput_and_lagging_groups(kafka, members):
    topic, group = topic_name("ov"), f"ov-{uuid.uuid4().hex[:6]}"
    confluent_create(kafka, kafka.admin_a, topic, partitions=1)
    produce(kafka, topic, 50)
    consume_and_commit(kafka, topic, group, 10)
    assert topic_samples.sample_topics() >= 1
    time.sleep(1.1)
    produce(kafka, topic, 30, start=50)
    assert topic_samples.sample_topics() >= 1
    sample = TopicSample.objects.filter(topic__name=topic).latest("at")
    assert sample.end_offset == 80 and sample.consumed == 10 and sample.size_bytes > 0
    # Its rates since the sample before: 30 records produced in a little over a second.
    assert 0 < sample.produced_per_s <= 30 / 1.1 and sample.consumed_per_s == 0
    tenant = Tenant.objects.get(slug=kafka.tenant_a)
    chart = usage.throughput(tenant, 1)
    assert chart["x"] and chart["series"][0]["values"][-1] > 0

    page = members["viewer"].get(f"/t/{kafka.tenant_a}/").content.decode()
    assert 'id="throughput-data"' in page
    assert group in page.split('id="worst-groups"')[1]
    used = page.split('id="storage-used">')[1].split("<")[0]
    assert used.strip() not in ("0 B", "")
    assert "Recent changes" not in page  # audit is for admins
    admin_page = members["admin"].get(f"/t/{kafka.tenant_a}/").content.decode()
    assert "Recent changes" in admin_page and "topic.create" in admin_page
    topics = members["viewer"].get(f"/t/{kafka.tenant_a}/topics/").content.decode()
    row = topics.split(f">{topic}</a>")[1].split("</tr>")[0]
    assert "B</td>" in row or "KiB</td>" in row  # a size
    assert "/s</td>" in row  # a produce rate
    outsider_page = members["outsider"].get(f"/t/{kafka.tenant_b}/").content.decode()
    assert topic not in outsider_page and group not in outsider_page


def test_cluster_page_is_for_operators(kafka, members):
    assert members["admin"].get("/cluster/").status_code == 403
    operator = Client()
    operator.force_login(make_user(f"op-{uuid.uuid4().hex[:6]}", staff=True))
    page = operator.get("/cluster/").content.decode()
    assert 'id="brokers"' in page and "live" in page
    assert f"127.0.0.1:{kafka.port}" in page
    assert "SASL_PLAINTEXT" in page and "development listener" not in page
    preview = operator.post("/cluster/rebalance/")
    assert preview.status_code == 200 and "Nothing has changed yet" in preview.content.decode()
    # One broker: a decommission has nowhere to put the replicas, and says so.
    refused = operator.post("/cluster/brokers/1/", {"action": "decommission"}, follow=True)
    assert refused.status_code == 200
    assert members["admin"].post("/cluster/rebalance/").status_code == 403

    # One partition: preview, refusals with the controller's reasons, confirm.
    topic = topic_name("move")
    confluent_create(kafka, kafka.admin_a, topic, partitions=1)
    where = {"tenant": kafka.tenant_a, "topic": topic, "partition": "0"}
    preview = operator.post("/cluster/reassign/", {**where, "replicas": "1"})
    assert (
        preview.status_code == 200 and f'name="topic" value="{topic}"' in preview.content.decode()
    )
    for replicas, message in (("9", "broker 9 is not live"), ("1,1", "must not repeat")):
        page = operator.post("/cluster/reassign/", {**where, "replicas": replicas}, follow=True)
        assert message in page.content.decode()
    missing = operator.post("/cluster/reassign/", {**where, "partition": "7"}, follow=True)
    assert "no partition" in missing.content.decode()
    cancel = operator.post("/cluster/reassign/", {**where, "action": "cancel"}, follow=True)
    assert "is not being reassigned" in cancel.content.decode()
    same = operator.post(
        "/cluster/reassign/", {**where, "replicas": "1", "confirm": "1"}, follow=True
    )
    assert "already has those replicas" in same.content.decode()
    assert members["admin"].post("/cluster/reassign/", where).status_code == 403
