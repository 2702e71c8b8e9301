"""KIP-848 consumer groups with confluent-kafka's ``group.protocol=consumer`` against a real
broker process that serves the consumer protocol."""

from __future__ import annotations

import threading
import time

import pytest
from django.test import Client
from django.urls import reverse

from control_plane.core.actor import Actor
from control_plane.groups import lag
from control_plane.groups.models import ConsumerGroup
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role, Tenant
from tests.broker.conftest import _brokers, confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import produce
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

HEARTBEAT_MS = 300
SYSTEM = Actor.system()


@pytest.fixture(scope="module")
def kafka(django_db_setup, django_db_blocker, tmp_path_factory):
    extra = {
        "MILLRACE_GROUP_PROTOCOLS": "classic,consumer",
        "MILLRACE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_MS),
        "MILLRACE_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "3000",
    }
    for envs in _brokers(django_db_blocker, tmp_path_factory, 1, extra_env=extra):
        yield envs[0]


def consumer(kafka, group, key=None, **extra):
    from confluent_kafka import Consumer

    conf = confluent_conf(
        kafka,
        key or kafka.admin_a,
        **{
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        },
    )
    return Consumer(conf)


def wait_assigned(consumers, sizes, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if sorted(len(c.assignment()) for c in consumers) == sorted(sizes):
            return [sorted((tp.topic, tp.partition) for tp in c.assignment()) for c in consumers]
    raise AssertionError(
        f"assignments {[len(c.assignment()) for c in consumers]} never became {sizes}"
    )


def test_two_members_split_the_partitions_and_consume_everything(kafka):
    name = topic_name("kip848")
    confluent_create(kafka, kafka.admin_a, name, partitions=6)
    group = f"g-{name}"
    consumers = [consumer(kafka, group) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([name])
        assignments = wait_assigned(consumers, [3, 3])
        assert sorted(p for a in assignments for _, p in a) == list(range(6))
        produce(kafka, name, 120, 6)
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 120 and time.monotonic() < deadline:
            for c in consumers:
                msg = c.poll(0.05)
                if msg is not None and msg.error() is None:
                    got.append(int(msg.value()))
        assert sorted(got) == list(range(120))
    finally:
        for c in consumers:
            c.close()


def drain(consumers, want, seconds=30):
    """Poll until ``want`` values were seen (or time is up); values and per-consumer lists."""
    got: dict[int, list[int]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + seconds
    while sum(len(v) for v in got.values()) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                got[i].append(int(msg.value()))
    return got


def test_a_member_leaving_and_one_killed_hand_their_partitions_on(kafka, tmp_path):
    """join, clean leave, kill -9: the survivors end with every partition, and the member
    whose partitions did not move never lost them."""
    import subprocess
    import sys

    name = topic_name("kip848-leave")
    confluent_create(kafka, kafka.admin_a, name, partitions=6)
    group = f"g-{name}"
    a, b = consumer(kafka, group), consumer(kafka, group)
    a.subscribe([name])
    b.subscribe([name])
    wait_assigned([a, b], [3, 3])
    b.close()  # a clean leave (epoch -1): a takes everything at once
    wait_assigned([a], [6], seconds=10)
    # A member in another process, killed with SIGKILL: its session (3 s) runs out.
    script = tmp_path / "member.py"
    script.write_text(
        "import sys, json, time\n"
        "from confluent_kafka import Consumer\n"
        "c = Consumer(json.loads(sys.argv[1]))\n"
        "c.subscribe([sys.argv[2]])\n"
        "deadline = time.monotonic() + 60\n"
        "while time.monotonic() < deadline:\n"
        "    c.poll(0.1)\n"
        "    if c.assignment():\n"
        "        print('assigned', len(c.assignment()), flush=True)\n"
        "        break\n"
        "while time.monotonic() < deadline:\n"
        "    c.poll(0.1)\n"
    )
    import json

    conf = confluent_conf(kafka, kafka.admin_a, **{"group.id": group, "group.protocol": "consumer"})
    child = subprocess.Popen(
        [sys.executable, str(script), json.dumps(conf), name],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "member.err").open("w"),
        text=True,
    )
    try:
        # Keep polling a (it must revoke what the newcomer gets) while the child settles.
        lines: list[str] = []
        assert child.stdout is not None
        reader = threading.Thread(target=lambda: lines.append(child.stdout.readline()))
        reader.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not lines:
            a.poll(0.05)
        assert lines and lines[0].startswith("assigned"), (tmp_path / "member.err").read_text()
        wait_assigned([a], [3], seconds=15)
        kept = {tp.partition for tp in a.assignment()}
        child.kill()
        child.wait(10)
        assignment = wait_assigned([a], [6], seconds=15)
        assert {p for _, p in assignment[0]} >= kept
        produce(kafka, name, 60, 6)
        got = drain([a], 60)
        assert sorted(got[0]) == list(range(60))
    finally:
        if child.poll() is None:
            child.kill()
        a.close()


def test_commits_carry_the_member_epoch_and_offsets_never_move_back(kafka):
    from confluent_kafka import TopicPartition

    name = topic_name("kip848-commit")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    group = f"g-{name}"
    a = consumer(kafka, group)
    a.subscribe([name])
    wait_assigned([a], [2])
    produce(kafka, name, 40, 2)
    got = drain([a], 40)
    assert sorted(got[0]) == list(range(40))
    a.commit(asynchronous=False)
    committed = a.committed([TopicPartition(name, 0), TopicPartition(name, 1)], timeout=10)
    assert [tp.offset for tp in committed] == [20, 20]
    # A second member joins; the partition that moves starts at the committed offset.
    b = consumer(kafka, group)
    b.subscribe([name])
    try:
        wait_assigned([a, b], [1, 1])
        produce(kafka, name, 10, 2, start=40)
        got = drain([a, b], 10)
        assert sorted(got[0] + got[1]) == list(range(40, 50))
        for c in (a, b):
            c.commit(asynchronous=False)
        after = a.committed([TopicPartition(name, 0), TopicPartition(name, 1)], timeout=10)
        assert [tp.offset for tp in after] == [25, 25]
    finally:
        a.close()
        b.close()


def test_static_members_come_back_to_their_partitions(kafka):
    name = topic_name("kip848-static")
    confluent_create(kafka, kafka.admin_a, name, partitions=4)
    group = f"g-{name}"
    a = consumer(kafka, group, **{"group.instance.id": "host-a"})
    b = consumer(kafka, group, **{"group.instance.id": "host-b"})
    for c in (a, b):
        c.subscribe([name])
    try:
        before = wait_assigned([a, b], [2, 2])
        a_parts = {p for _, p in before[0]} if len(before[0]) else set()
        a_parts = {tp.partition for tp in a.assignment()}
        a.close()  # a static member leaves with epoch -2: its partitions wait for it
        time.sleep(1)
        assert len(b.assignment()) == 2
        a = consumer(kafka, group, **{"group.instance.id": "host-a"})
        a.subscribe([name])
        wait_assigned([a, b], [2, 2], seconds=15)
        assert {tp.partition for tp in a.assignment()} == a_parts
    finally:
        a.close()
        b.close()


def test_a_regex_subscription_picks_up_a_topic_created_later(kafka):
    prefix = topic_name("kip848-re")
    confluent_create(kafka, kafka.admin_a, f"{prefix}-one", partitions=2)
    group = f"g-{prefix}"
    a = consumer(kafka, group, **{"topic.metadata.refresh.interval.ms": 1000})
    a.subscribe([f"^{prefix}-.*"])
    try:
        wait_assigned([a], [2])
        confluent_create(kafka, kafka.admin_a, f"{prefix}-two", partitions=3)
        assignment = wait_assigned([a], [5], seconds=30)
        assert {t for t, _ in assignment[0]} == {f"{prefix}-one", f"{prefix}-two"}
    finally:
        a.close()


def test_admin_client_describes_and_lists_consumer_groups(kafka):
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    name = topic_name("kip848-admin")
    confluent_create(kafka, kafka.admin_a, name, partitions=3)
    group = f"g-{name}"
    a = consumer(kafka, group)
    a.subscribe([name])
    try:
        wait_assigned([a], [3])
        admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
        [described] = admin.describe_consumer_groups([group])[group].result(30) and [
            admin.describe_consumer_groups([group])[group].result(30)
        ]
        assert described.type == ConsumerGroupType.CONSUMER
        assert [len(m.assignment.topic_partitions) for m in described.members] == [3]
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30)
        assert group in {g.group_id for g in listed.valid}
        classic_only = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(30)
        assert group not in {g.group_id for g in classic_only.valid}
        # Another tenant names the same group: it is not there.
        other = AdminClient(confluent_conf(kafka, kafka.admin_b))
        theirs = other.list_consumer_groups().result(30)
        assert group not in {g.group_id for g in theirs.valid}
        # The console shows the group's epochs and each member's epoch and assignment,
        # as the coordinator stored them.
        tenant = Tenant.objects.get(slug=kafka.tenant_a)
        stored = ConsumerGroup.objects.get(tenant=tenant, group_id=group)
        assert stored.group_type == "consumer"
        [member] = lag.describe(tenant, stored)["members"]
        assert member["member_epoch"] == stored.generation
        assert member["assignment"] == [{"topic": name, "partitions": [0, 1, 2]}]
        viewer = make_user(f"viewer-{name}")
        tenancy_services.add_member(SYSTEM, tenant, user=viewer, role=Role.VIEWER)
        browser = Client()
        browser.force_login(viewer)
        page = browser.get(reverse("frontend:group", args=[tenant.slug, group]))
        assert page.status_code == 200
        html = page.content.decode()
        assert 'id="assignment-epoch"' in html and "consumer (KIP-848)" in html
        assert f"{name}</span>: 0, 1, 2" in html
    finally:
        a.close()


def classic_consumer(kafka, group, **extra):
    from confluent_kafka import Consumer

    return Consumer(
        confluent_conf(
            kafka,
            kafka.admin_a,
            **{
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "cooperative-sticky",
                **extra,
            },
        )
    )


def test_an_online_upgrade_and_downgrade_lose_nothing(kafka):
    """A running classic group (cooperative-sticky) gets a consumer-protocol member: the
    group becomes a consumer group with both kinds of member; when that member leaves, it
    is a classic group again. Every record is consumed and commits never move back."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    name = topic_name("kip848-mixed")
    confluent_create(kafka, kafka.admin_a, name, partitions=6)
    group = f"g-{name}"
    old = [classic_consumer(kafka, group) for _ in range(2)]
    for c in old:
        c.subscribe([name])
    new = None
    try:
        wait_assigned(old, [3, 3])
        produce(kafka, name, 60, 6)
        seen = drain(old, 60)
        assert sorted(seen[0] + seen[1]) == list(range(60))
        for c in old:
            c.commit(asynchronous=False)
        admin = AdminClient(confluent_conf(kafka, kafka.admin_a))

        def group_type():
            [listing] = [
                g for g in admin.list_consumer_groups().result(30).valid if g.group_id == group
            ]
            return listing.type.name

        assert group_type() == "CLASSIC"
        new = consumer(kafka, group)
        new.subscribe([name])
        wait_assigned([*old, new], [2, 2, 2], seconds=45)
        assert group_type() == "CONSUMER"
        produce(kafka, name, 60, 6, start=60)
        seen = drain([*old, new], 60)
        assert sorted(v for vs in seen.values() for v in vs) == list(range(60, 120))
        for c in (*old, new):
            c.commit(asynchronous=False)
        new.close()
        new = None
        wait_assigned(old, [3, 3], seconds=45)
        assert group_type() == "CLASSIC"
        produce(kafka, name, 60, 6, start=120)
        seen = drain(old, 60)
        assert sorted(seen[0] + seen[1]) == list(range(120, 180))
        for c in old:
            c.commit(asynchronous=False)
        committed = old[0].committed([TopicPartition(name, p) for p in range(6)], timeout=10)
        assert [tp.offset for tp in committed] == [30] * 6
    finally:
        for c in old:
            c.close()
        if new is not None:
            new.close()


def test_an_eager_kafka_python_member_shares_a_group_with_a_consumer_protocol_member(kafka):
    """kafka-python (classic protocol, eager range assignor) joins a group that a
    confluent-kafka member runs with the consumer protocol: the group stays a consumer
    group, the coordinator assigns both, and every record is read once."""
    from kafka import KafkaConsumer

    from tests.broker.conftest import kafka_python_conf

    name = topic_name("kip848-eager")
    confluent_create(kafka, kafka.admin_a, name, partitions=4)
    group = f"g-{name}"
    new = consumer(kafka, group)
    new.subscribe([name])
    wait_assigned([new], [4])
    old = KafkaConsumer(
        name,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        **kafka_python_conf(kafka, kafka.admin_a),
    )
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            old.poll(timeout_ms=50)
            new.poll(0.05)
            if len(old.assignment()) == 2 and len(new.assignment()) == 2:
                break
        assert (len(old.assignment()), len(new.assignment())) == (2, 2)
        mine = {tp.partition for tp in old.assignment()}
        theirs = {tp.partition for tp in new.assignment()}
        assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
        produce(kafka, name, 40, 4)
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            for records in old.poll(timeout_ms=50).values():
                got.extend(int(r.value) for r in records)
            msg = new.poll(0.05)
            if msg is not None and msg.error() is None:
                got.append(int(msg.value()))
        assert sorted(got) == list(range(40))
    finally:
        old.close()
        new.close()
