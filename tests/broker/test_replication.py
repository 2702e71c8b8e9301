"""Replication across three real broker processes: acks=all, the ISR, failover, truncation.

The test process plays the controller: it runs ``controller_tick`` (the body of the Celery
beat task) while waiting for a failover.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from bench import perf
from control_plane.catalog.models import Partition, Topic
from control_plane.controller import services as controller
from data_plane.protocol.errors import ErrorCode as E
from data_plane.records.batch import Record, RecordBatch
from tests.broker.conftest import _brokers, confluent_conf, start_broker, stop_broker
from tests.broker.test_clients import topic_name
from tests.broker.test_wire import RawClient

pytestmark = pytest.mark.django_db
LEASE_S = 4


# Broker settings for replication tests: a short ISR lag and lease, quick follower fetches.
REPLICATION_ENV = {
    "MILLRACE_REPLICA_LAG_TIME_MAX_MS": "1500",
    "MILLRACE_REPLICA_FETCH_WAIT_MS": "100",
    "MILLRACE_BROKER_LEASE_SECONDS": str(LEASE_S),
}


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _brokers(django_db_blocker, tmp_path_factory, 3, REPLICATION_ENV)


@pytest.fixture(autouse=True)
def _lease(settings):
    settings.MILLRACE_BROKER_LEASE_SECONDS = LEASE_S


def create(cluster, name, partitions=1, min_isr=2):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_conf(cluster[0], cluster[0].admin_a))
    new = NewTopic(name, partitions, 3, config={"min.insync.replicas": str(min_isr)})
    perf.create_topics(admin, [new])
    return Topic.objects.get(name=name)


def row(topic, index=0):
    return Partition.objects.get(topic=topic, index=index)


def by_id(cluster, broker_id):
    return next(k for k in cluster if k.broker_id == broker_id)


def log_bytes(env, topic, index=0):
    directory = Path(env.data_dir) / f"{topic.topic_id}-{index}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def wait_identical(cluster, topic, partitions=1, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        same = all(len({log_bytes(k, topic, i) for k in cluster}) == 1 for i in range(partitions))
        if same:
            return
        time.sleep(0.2)
    sizes = [[len(log_bytes(k, topic, i)) for k in cluster] for i in range(partitions)]
    raise AssertionError(f"replicas differ after {seconds} s: sizes {sizes}")


def tick():
    """One controller pass, committed (a thread has its own autocommit connection, as a
    Celery worker would; the test's own connection is inside the test's transaction)."""

    def run():
        try:
            controller.controller_tick()
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)


def wait_for(predicate, seconds, what, tick_controller=False):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if tick_controller:
            tick()
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def produce(cluster, name, values, acks="all"):
    """Produce ``values``; returns the acknowledged ones (in acknowledgement order)."""
    from confluent_kafka import Producer

    acked: list[int] = []
    producer = Producer(
        confluent_conf(
            cluster[0],
            cluster[0].admin_a,
            **{"acks": acks, "linger.ms": 5, "message.timeout.ms": 60_000},
        )
    )

    errors: list[str] = []

    def done(err, msg):
        if err is None:
            acked.append(int(msg.value()))
        else:
            errors.append(f"{msg.partition()}: {err}")

    for v in values:
        producer.produce(name, key=str(v).encode(), value=str(v).encode(), on_delivery=done)
        producer.poll(0)
    assert producer.flush(90) == 0
    produce.errors = errors  # type: ignore[attr-defined]
    return acked


def consume_all(cluster, name, expected=None, partitions=1):
    """Every record up to each partition's high watermark (client retries can leave more
    records than acknowledged values, so a count is not the end); ``expected`` unused."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        confluent_conf(
            cluster[0],
            cluster[0].admin_a,
            **{"group.id": f"check-{name}", "enable.auto.commit": False},
        )
    )
    ends = {
        p: c.get_watermark_offsets(TopicPartition(name, p), timeout=20)[1]
        for p in range(partitions)
    }
    c.assign([TopicPartition(name, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, int]] = []
    nxt = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 60
    while any(nxt[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append((msg.partition(), msg.offset(), int(msg.value())))
            nxt[msg.partition()] = msg.offset() + 1
    c.close()
    return got


def raw_produce(env, name, acks, values=(0,), client=None):
    """One batch holding ``values`` to partition 0 of ``env``'s broker; the error code."""
    own = client is None
    if client is None:
        client = RawClient(env)
        client.login(env.admin_a)
    now = int(time.time() * 1000)
    records = tuple(Record(i, now, None, str(v).encode()) for i, v in enumerate(values))
    batch = RecordBatch(0, records).encode()
    answer = client.request(
        0,
        9,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 5000,
            "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    if own:
        client.close()
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def test_acks_all_reaches_every_replica_byte_for_byte(cluster):
    name = topic_name("rep")
    topic = create(cluster, name, partitions=3)
    assert all(len(row(topic, i).replicas) == 3 for i in range(3))
    acked = produce(cluster, name, range(3000))
    assert sorted(acked) == list(range(3000)), produce.errors[:5]
    wait_identical(cluster, topic, partitions=3)
    assert all(log_bytes(cluster[0], topic, i) for i in range(3))  # keys spread the records
    got = consume_all(cluster, name, 3000, partitions=3)
    assert sorted(v for _, _, v in got) == list(range(3000))
    assert all(row(topic, i).isr == row(topic, i).replicas for i in range(3))


def test_isr_below_min_insync_refuses_acks_all_but_not_acks_1(cluster):
    import signal

    name = topic_name("minisr")
    topic = create(cluster, name, min_isr=2)
    p = row(topic)
    leader = by_id(cluster, p.leader)
    followers = [by_id(cluster, b) for b in p.replicas if b != p.leader]
    assert raw_produce(leader, name, -1) == E.NONE
    for f in followers:
        f.process.send_signal(signal.SIGSTOP)
    try:
        # The leader drops followers that stop fetching (replica.lag.time.max.ms 1.5 s).
        wait_for(lambda: row(topic).isr == [p.leader], 15, "the ISR to shrink")
        assert raw_produce(leader, name, -1) == E.NOT_ENOUGH_REPLICAS
        assert raw_produce(leader, name, 1) == E.NONE
    finally:
        for f in followers:
            f.process.send_signal(signal.SIGCONT)
    # They catch up and rejoin; acks=all works again.
    wait_for(lambda: len(row(topic).isr) == 3, 30, "the followers to rejoin", tick_controller=True)
    assert raw_produce(leader, name, -1) == E.NONE
    wait_identical(cluster, topic)


def test_killing_the_leader_loses_no_acknowledged_record(cluster):
    name = topic_name("failover")
    topic = create(cluster, name)
    old = row(topic)
    victim = by_id(cluster, old.leader)
    acked: list[int] = []
    producer = threading.Thread(target=lambda: acked.extend(produce(cluster, name, range(4000))))
    producer.start()
    wait_for(lambda: log_bytes(victim, topic) != b"", 20, "records on the leader")
    time.sleep(0.3)
    stop_broker(victim, "kill")
    wait_for(
        lambda: row(topic).leader not in (None, old.leader),
        30,
        "a new leader",
        tick_controller=True,
    )
    new = row(topic)
    assert new.leader_epoch > old.leader_epoch and old.leader not in new.isr
    producer.join(120)
    assert not producer.is_alive()
    start_broker(victim)  # rejoins as a follower: truncates, catches up
    wait_for(lambda: len(row(topic).isr) == 3, 60, "the old leader to rejoin", tick_controller=True)
    wait_identical(cluster, topic)
    got = consume_all(cluster, name, len(acked))
    values = [v for _, _, v in got]
    assert set(acked) <= set(values), f"lost: {sorted(set(acked) - set(values))[:20]}"
    offsets = [o for _, o, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def fail_over(cluster, topic, victim_id):
    """kill -9 a broker and run the controller until another replica leads."""
    stop_broker(by_id(cluster, victim_id), "kill")
    wait_for(
        lambda: row(topic).leader not in (None, victim_id),
        30,
        f"a leader other than {victim_id}",
        tick_controller=True,
    )
    return row(topic)


def restart_all_and_converge(cluster, topic):
    for k in cluster:
        if k.process is None or k.process.poll() is not None:
            start_broker(k)
    wait_for(lambda: len(row(topic).isr) == 3, 60, "every replica in sync", tick_controller=True)
    wait_identical(cluster, topic)


def assert_nothing_acked_lost(cluster, name, acked, partitions=1):
    got = consume_all(cluster, name, partitions=partitions)
    values = {v for _, _, v in got}
    assert set(acked) <= values, f"lost: {sorted(set(acked) - values)[:20]}"
    offsets = [(p, o) for p, o, _ in got]
    assert len(set(offsets)) == len(offsets)  # one record per offset


def test_kip101_restarted_follower_then_leader_dies(cluster):
    """KIP-101: a follower restarts (it must not truncate to its stale high watermark),
    then the leader dies and that follower may lead: nothing acknowledged is lost and all
    replicas end byte-identical."""
    name = topic_name("kip101")
    topic = create(cluster, name)
    acked = produce(cluster, name, range(1500))
    p = row(topic)
    follower = by_id(cluster, next(b for b in p.replicas if b != p.leader))
    stop_broker(follower)  # clean restart...
    start_broker(follower)
    fail_over(cluster, topic, p.leader)  # ...and at once the leader dies
    acked += produce(cluster, name, range(1500, 2000))
    restart_all_and_converge(cluster, topic)
    assert_nothing_acked_lost(cluster, name, acked)


def test_double_fast_failover_and_an_empty_disk(cluster):
    """KIP-279: two leaders die in quick succession, one replica comes back with an empty
    disk; the replicas converge and nothing acknowledged is lost."""
    import shutil

    name = topic_name("kip279")
    topic = create(cluster, name)
    acked = produce(cluster, name, range(1000))
    first = row(topic).leader
    second = fail_over(cluster, topic, first).leader
    acked += produce(cluster, name, range(1000, 1500))
    start_broker(by_id(cluster, first))
    wait_for(
        lambda: first in row(topic).isr, 60, "the first leader to rejoin", tick_controller=True
    )
    fail_over(cluster, topic, second)
    acked += produce(cluster, name, range(1500, 2000))
    emptied = by_id(cluster, second)
    shutil.rmtree(emptied.data_dir)  # it comes back with nothing
    restart_all_and_converge(cluster, topic)
    assert_nothing_acked_lost(cluster, name, acked)


@pytest.mark.parametrize("extra_epoch", [0, 5])
def test_a_follower_with_a_divergent_tail_truncates_to_the_leaders_epoch_end(cluster, extra_epoch):
    """Records only a follower holds (same epoch, or an epoch the leader never had) are cut
    at the point OffsetForLeaderEpoch gives, never kept and never served."""
    from data_plane.log.config import LogConfig
    from data_plane.log.partition import PartitionLog

    name = topic_name("diverge")
    topic = create(cluster, name)
    acked = produce(cluster, name, range(500))
    wait_identical(cluster, topic)
    p = row(topic)
    follower = by_id(cluster, next(b for b in p.replicas if b != p.leader))
    stop_broker(follower)
    log = PartitionLog.open(Path(follower.data_dir) / f"{topic.topic_id}-0", LogConfig())
    now = int(time.time() * 1000)
    for i in range(3):  # a tail the leader never had
        batch = RecordBatch(0, (Record(0, now, None, b"ghost-%d" % i),)).encode()
        log.append(batch, leader_epoch=p.leader_epoch + extra_epoch)
    assert log.log_end_offset == 503
    log.close()
    # One batch of 200 from the leader: it spans the follower's ghost offsets 500-502.
    assert raw_produce(by_id(cluster, p.leader), name, -1, range(500, 700)) == E.NONE
    acked += list(range(500, 700))
    start_broker(follower)
    wait_identical(cluster, topic)
    assert_nothing_acked_lost(cluster, name, acked)
    values = [v for _, _, v in consume_all(cluster, name, len(acked))]
    assert set(values) == set(acked)  # no ghost survived anywhere (it would not parse)


def test_a_paused_old_leader_cannot_acknowledge_a_write(cluster):
    """The leader is paused (SIGSTOP) long enough to be fenced and replaced; when it wakes,
    a write sent to it at once is not acknowledged, and it never reaches the log."""
    import signal

    name = topic_name("zombie")
    topic = create(cluster, name)
    acked = produce(cluster, name, range(300))
    old = row(topic)
    zombie = by_id(cluster, old.leader)
    client = RawClient(zombie)  # connected and authenticated before the pause
    client.login(zombie.admin_a)
    zombie.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: row(topic).leader not in (None, old.leader),
            30,
            "a new leader",
            tick_controller=True,
        )
        acked += produce(cluster, name, range(300, 400))
    finally:
        zombie.process.send_signal(signal.SIGCONT)
    code = raw_produce(zombie, name, -1, [999_999], client=client)
    client.close()
    assert code != E.NONE
    wait_for(lambda: len(row(topic).isr) == 3, 60, "the old leader to rejoin", tick_controller=True)
    wait_identical(cluster, topic)
    # Everything acknowledged, and nothing else.
    values = [v for _, _, v in consume_all(cluster, name)]
    assert 999_999 not in values and set(values) == set(acked)


def test_five_leader_bounces_while_producing_lose_nothing(cluster):
    """Kafka's ReplicationTest pattern: RF 3, min ISR 2, the current leader killed with
    kill -9 or restarted cleanly five times in a row under a steady acks=all producer;
    not one of the (at least 10,000) acknowledged records is lost."""
    from confluent_kafka import Producer

    name = topic_name("bounce")
    topic = create(cluster, name)
    acked: list[int] = []
    stop = threading.Event()
    sent = [0]

    def run():
        producer = Producer(
            confluent_conf(
                cluster[0],
                cluster[0].admin_a,
                **{"acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000},
            )
        )

        def done(err, msg):
            if err is None:
                acked.append(int(msg.value()))

        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            for _ in range(50):  # about 500 records/s
                producer.produce(name, value=str(sent[0]).encode(), on_delivery=done)
                sent[0] += 1
            producer.poll(0.1)
        producer.flush(90)

    writer = threading.Thread(target=run)
    writer.start()
    try:
        for bounce in range(5):
            target = 1000 * (bounce + 1)
            wait_for(lambda t=target: len(acked) > t, 60, "records before a bounce")
            leader = row(topic).leader
            if bounce % 2 == 0:
                fail_over(cluster, topic, leader)
            else:
                stop_broker(by_id(cluster, leader))  # clean: SIGTERM
                wait_for(
                    lambda old=leader: row(topic).leader not in (None, old),
                    30,
                    "a new leader after a clean stop",
                    tick_controller=True,
                )
            start_broker(by_id(cluster, leader))
            wait_for(lambda: len(row(topic).isr) == 3, 60, "a full ISR", tick_controller=True)
        wait_for(lambda: len(acked) >= 10_000, 60, "10,000 acknowledged records")
    finally:
        stop.set()
        writer.join(120)
    assert len(acked) >= 10_000
    wait_identical(cluster, topic)
    assert_nothing_acked_lost(cluster, name, acked)


def test_sigterm_hands_leaderships_over_before_the_broker_stops(cluster):
    """Controlled shutdown: SIGTERM the leader of an RF 3 topic under an acks=all load.
    Its leaderships move before the process exits, with no controller pass (the broker
    asks for it), the producer sees no error (librdkafka retries the retriable
    NOT_LEADER answers itself), and every acknowledged record is there."""
    from confluent_kafka import Producer

    name = topic_name("controlled")
    topic = create(cluster, name, partitions=3)
    restart_all_and_converge(cluster, topic)
    victim_id = row(topic).leader
    led = [i for i in range(3) if row(topic, i).leader == victim_id]
    acked: list[int] = []
    errors: list[str] = []
    stop = threading.Event()

    def run():
        producer = Producer(
            confluent_conf(
                cluster[0],
                cluster[0].admin_a,
                **{"acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000},
            )
        )

        def done(err, msg):
            if err is None:
                acked.append(int(msg.value()))
            else:
                errors.append(f"{msg.partition()}: {err}")

        sent, deadline = 0, time.monotonic() + 90
        while not stop.is_set() and time.monotonic() < deadline:
            for _ in range(50):
                producer.produce(name, value=str(sent).encode(), on_delivery=done)
                sent += 1
            producer.poll(0.05)
        assert producer.flush(90) == 0

    writer = threading.Thread(target=run)
    writer.start()
    victim = by_id(cluster, victim_id)
    try:
        wait_for(lambda: len(acked) > 1000, 60, "records before the SIGTERM")
        assert stop_broker(victim) == 0  # SIGTERM; returns the exit code
        for index in led:  # moved by the broker's own request: no tick was run
            moved = row(topic, index)
            assert moved.leader not in (None, victim_id), (index, moved.leader)
            assert victim_id not in moved.isr
        before = len(acked)
        wait_for(lambda: len(acked) > before + 1000, 60, "records after the SIGTERM")
    finally:
        stop.set()
        writer.join(120)
    assert not writer.is_alive()
    assert errors == []
    log = victim.log_tail()
    assert "controlled shutdown done" in log, log  # not "timed out"
    start_broker(victim)
    restart_all_and_converge(cluster, topic)
    assert_nothing_acked_lost(cluster, name, acked, partitions=3)


def test_a_dead_coordinators_groups_move_to_a_live_broker(cluster):
    """Group coordination follows the live brokers: once the controller fences a dead
    coordinator, another broker coordinates the group, from the offsets in the store."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    name = topic_name("coord")
    topic = create(cluster, name)
    produce(cluster, name, range(100))
    group = f"g-{name}"
    conf = confluent_conf(
        cluster[0],
        cluster[0].admin_a,
        **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False},
    )

    def coordinator():
        admin = AdminClient(confluent_conf(cluster[0], cluster[0].admin_a))
        return admin.describe_consumer_groups([group])[group].result(timeout=20).coordinator.id

    def read(consumer, count):
        got = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.offset())
        return got

    first = Consumer(conf)
    first.subscribe([name])
    assert read(first, 40) == list(range(40))
    first.commit(asynchronous=False)
    first.close()
    victim = coordinator()
    stop_broker(by_id(cluster, victim), "kill")
    wait_for(
        lambda: victim not in controller.live_broker_ids(), 30, "the fence", tick_controller=True
    )
    second = Consumer(conf)
    second.subscribe([name])
    assert read(second, 60) == list(range(40, 100))  # from the committed offset
    second.commit(asynchronous=False)
    second.close()
    assert coordinator() != victim
    restart_all_and_converge(cluster, topic)
