"""The mirror source connector without brokers: offset translation (MirrorMaker 2's rule)
and its edge cases, confirming derived target offsets, checkpoints that do not go back,
topic naming and filtering, the split of partitions among tasks, client settings, config
validation naming the key, and the task's poll / acknowledge / confirm / group-sync loop
against fake clients."""

from __future__ import annotations

import bisect
import json
import random
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from data_plane.connect.connectors.mirror import (
    CONFIG,
    TASK_CONFIG,
    MirroredPartition,
    MirrorSourceConnector,
    MirrorSourceTask,
    Naming,
    OffsetSyncs,
    checkpoint_moves,
    group_wanted,
    owner,
    source_client_config,
    target_client_config,
)
from data_plane.connect.data import OPTIONAL_BYTES_SCHEMA

BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"

# --- translation ------------------------------------------------------------------------------


def test_no_sync_yet_no_translation() -> None:
    assert OffsetSyncs().translate(0) is None
    assert OffsetSyncs().translate(1234) is None


def test_an_offset_before_the_first_sync_is_not_translated() -> None:
    syncs = OffsetSyncs()
    syncs.add(10, 100)
    assert syncs.translate(0) is None
    assert syncs.translate(9) is None
    assert syncs.translate(10) == 100


def test_exact_match_and_after_the_last_sync() -> None:
    syncs = OffsetSyncs()
    syncs.add(10, 100)
    assert syncs.translate(10) == 100  # the group's next record is the synced one
    assert syncs.translate(11) == 101  # it read the synced one: the next downstream
    assert syncs.translate(500) == 101  # far ahead of the mirror: still just after it


def test_between_sparse_syncs_the_earlier_one_plus_one() -> None:
    syncs = OffsetSyncs()
    syncs.add(10, 100)
    syncs.add(20, 110)
    assert len(syncs) == 2  # not one run: nothing is known of 11..19
    assert [syncs.translate(u) for u in (10, 11, 15, 19, 20, 21)] == [100, 101, 101, 101, 110, 111]


def test_consecutive_pairs_make_one_run_translated_exactly() -> None:
    syncs = OffsetSyncs()
    for i in range(50):
        syncs.add(1000 + i, 7 + i)
    assert len(syncs) == 1
    assert [syncs.translate(1000 + i) for i in range(51)] == [7 + i for i in range(51)]


@pytest.mark.parametrize("kind", ["compaction", "transaction markers"])
def test_gaps_upstream_translate_to_the_next_record_downstream(kind: str) -> None:
    # Offsets 3-4 compacted away / 7-8 a commit marker and an aborted record: the target
    # holds the six records at 0..5.
    upstream = [0, 1, 2, 5, 6, 9] if kind == "compaction" else [0, 1, 2, 3, 4, 5, 6, 9]
    syncs = OffsetSyncs()
    for downstream, offset in enumerate(upstream):
        syncs.add(offset, downstream)
    for position in range(upstream[-1] + 3):
        # A group whose next record is `position` resumes at the first copied record at
        # or after it: exactly, because every pair is known.
        assert syncs.translate(position) == bisect.bisect_left(upstream, position), position


def test_records_sent_again_after_a_restart_replace_the_later_pairs() -> None:
    syncs = OffsetSyncs()
    syncs.add(0, 0, 10)  # upstream 0..9 at 0..9; the restart resumes after 5
    syncs.add(6, 10, 4)  # 6..9 again at 10..13
    assert list(syncs.runs()) == [(0, 0, 6), (6, 10, 4)]
    assert syncs.translate(5) == 5
    assert syncs.translate(7) == 11
    assert syncs.translate(10) == 14


def test_a_truncated_target_forgets_the_pairs_beyond_its_end() -> None:
    syncs = OffsetSyncs()
    syncs.add(0, 0, 10)
    syncs.forget_from(downstream=4)
    assert syncs.latest() == (3, 3)
    assert syncs.translate(8) == 4  # never past what the target holds
    syncs.add(20, 2)  # going back downstream forgets from there
    assert list(syncs.runs()) == [(0, 0, 2), (20, 2, 1)]


def test_a_bounded_store_forgets_old_runs_but_stays_safe() -> None:
    syncs = OffsetSyncs(limit=8)
    pairs = [(u * 3, u) for u in range(100)]  # every run one pair: gaps of 2 upstream
    for u, d in pairs:
        syncs.add(u, d)
    assert len(syncs) <= 8
    assert syncs.translate(297) == 99  # the latest is kept
    for u in range(300):
        translated = syncs.translate(u)
        if translated is not None:
            assert translated <= (u + 2) // 3  # never past the first record at or after u


@pytest.mark.parametrize("seed", range(40))
def test_translation_never_skips_a_record(seed: int) -> None:
    """Random logs with gaps, mirrored by lifetimes that crash and send records again,
    with only some pairs known: a consumer resuming at the translated offset still finds
    every record at or after its upstream position."""
    rng = random.Random(seed)
    offsets, o = [], rng.randrange(0, 5)
    for _ in range(rng.randrange(5, 60)):
        offsets.append(o)
        o += 1 if rng.random() < 0.7 else rng.randrange(2, 6)
    target: list[int] = []  # the upstream offset of each downstream record
    syncs = OffsetSyncs(limit=rng.choice([2, 4, 1024]))

    def lifetime(start: int, stop: int) -> None:
        for i in range(start, stop):
            if rng.random() < 0.5:  # only some pairs are known (confirmed, or kept)
                syncs.add(offsets[i], len(target))
            target.append(offsets[i])

    start = 0
    for _ in range(rng.randrange(0, 6)):  # lifetimes that stop somewhere and restart
        stop = rng.randrange(start, len(offsets) + 1)
        lifetime(start, stop)
        start = rng.randrange(start, stop + 1)  # the committed offset: not past what was sent
    lifetime(start, len(offsets))  # the last one copies the rest
    last = {u: pos for pos, u in enumerate(target)}
    for position in range(offsets[-1] + 3):
        translated = syncs.translate(position)
        if translated is None:
            continue
        assert translated <= len(target)
        later = [u for u in offsets if u >= position]
        assert all(last[u] >= translated for u in later), (position, translated, target)


def test_checkpoints_move_forward_unless_the_group_went_back() -> None:
    assert checkpoint_moves(None, 10, 5)
    assert not checkpoint_moves((10, 5), 10, 5)  # unchanged: not written again
    assert checkpoint_moves((10, 5), 12, 7)
    assert not checkpoint_moves((10, 5), 11, 4)  # fewer pairs known: not back
    assert checkpoint_moves((10, 5), 3, 2)  # the group was reset upstream


# --- target offsets derived from acknowledgements -----------------------------------------


def test_confirmed_pairs_become_known_and_the_first_and_latest_are_written() -> None:
    part = MirroredPartition("t", 0, "source.t", next_down=40)
    part.sent = 3
    assert not part.quiet
    for upstream in (7, 8, 11):  # 9-10: a transaction marker and an aborted record
        part.acknowledged(upstream)
    assert part.quiet and not part.syncs
    assert part.confirm(43) == [(7, 40), (11, 42)]
    assert not part.pending
    assert [part.syncs.translate(u) for u in (7, 8, 9, 11, 12)] == [40, 41, 42, 42, 43]
    part.sent += 1
    part.acknowledged(12)
    assert part.confirm(44) == [(12, 43)]  # later: only the latest


def test_an_end_offset_other_than_derived_forgets_the_pending_pairs() -> None:
    part = MirroredPartition("t", 0, "source.t", next_down=0)
    for upstream in range(5):  # one of these was dropped by a transform: 4 written
        part.sent += 1
        part.acknowledged(upstream)
    assert part.confirm(4) is None
    assert not part.syncs and not part.pending
    assert part.next_down == 4  # counting on from what the target holds
    part.sent += 1
    part.acknowledged(5)
    assert part.confirm(5) == [(5, 4)]
    assert part.syncs.translate(5) == 4
    assert part.syncs.translate(2) is None


# --- naming, filtering, ownership, clients ------------------------------------------------------


def _parsed(**extra: str) -> dict[str, Any]:
    return TASK_CONFIG.parse({"source.cluster.bootstrap.servers": "src:9092", **extra})


def test_topic_names_and_filters() -> None:
    default = Naming.from_config(_parsed())
    assert default.target_topic("orders") == "source.orders"
    for internal in ("_schemas", "__consumer_offsets", "mm2-offset-syncs.x.internal",
                     "source.checkpoints.internal", "app-internal", "x.replica"):  # fmt: skip
        assert not default.mirrored(internal), internal
    assert default.mirrored("orders") and default.mirrored("source.orders")
    assert not default.mirrored("target.orders")  # came from the target: no cycle
    named = Naming.from_config(
        _parsed(**{
            "source.cluster.alias": "east", "replication.policy.separator": "_",
            "topics": "orders.*, pay", "topics.exclude": "orders-tmp.*",
        })
    )  # fmt: skip
    assert named.target_topic("orders") == "east_orders"
    assert named.mirrored("orders-1") and named.mirrored("pay")
    assert not named.mirrored("payments")  # whole names match
    assert not named.mirrored("orders-tmp-3")
    identity = Naming.from_config(
        _parsed(**{"replication.policy.class": "IdentityReplicationPolicy"})
    )
    assert identity.target_topic("orders") == "orders"
    assert identity.mirrored("target.orders")


def test_groups_filter() -> None:
    defaults = CONFIG.parse({"source.cluster.bootstrap.servers": "x:1"})
    include, exclude = defaults["groups"], defaults["groups.exclude"]
    assert group_wanted("billing", include, exclude)
    assert not group_wanted("connect-sink", include, exclude)
    assert not group_wanted("console-consumer-123", include, exclude)
    assert not group_wanted("billing", ["orders-.*"], [])


def test_every_partition_has_one_task_and_a_topic_spreads_over_them() -> None:
    for tasks in (1, 2, 3, 7):
        for topic in ("a", "orders", "source.x"):
            owners = [owner(topic, p, tasks) for p in range(12)]
            assert all(0 <= o < tasks for o in owners)
            assert len(set(owners[:tasks])) == tasks  # the first `tasks` go round them
    assert owner("orders", 5, 3) == owner("orders", 5, 3)


def test_client_settings_for_both_clusters() -> None:
    jaas = 'ScramLoginModule required username="u" password="p\\"w";'
    config = _parsed(**{
        "source.cluster.bootstrap.servers": "a:9092, b:9092",
        "source.cluster.security.protocol": "sasl_ssl",
        "source.cluster.sasl.mechanism": "SCRAM-SHA-512",
        "source.cluster.sasl.jaas.config": jaas,
    })  # fmt: skip
    assert source_client_config(config) == {
        "bootstrap.servers": "a:9092,b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u",
        "sasl.password": 'p"w',
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert source_client_config(_parsed()) == {
        "bootstrap.servers": "src:9092",
        "security.protocol": "PLAINTEXT",
    }
    worker = {
        "bootstrap.servers": "k:9092", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "offset.flush.interval.ms": "500",
        "sasl.jaas.config": 'x required username="key" password="secret";',
    }  # fmt: skip
    assert target_client_config(worker) == {
        "bootstrap.servers": "k:9092", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "key", "sasl.password": "secret",
    }  # fmt: skip


# --- config validation ----------------------------------------------------------------------


def _errors(config: dict[str, str], worker: dict[str, str] | None = None) -> dict[str, list[str]]:
    connector = MirrorSourceConnector()
    connector.worker_config = worker or {"bootstrap.servers": "target:9092"}
    base = {
        "name": "m",
        "connector.class": "MirrorSource",
        "key.converter": BYTES,
        "value.converter": BYTES,
        "source.cluster.bootstrap.servers": "source:9092",
    }
    return {k: v for k, v in connector.validate({**base, **config}).items() if v}


def test_a_minimal_config_is_valid() -> None:
    assert _errors({}) == {}
    assert _errors({"key.converter": "ByteArrayConverter"}) == {}


def test_validation_names_the_key() -> None:
    assert set(_errors({"source.cluster.bootstrap.servers": ""})) == {
        "source.cluster.bootstrap.servers"
    }
    bad = {
        "topics": "orders, (",
        "topics.exclude": "[",
        "groups": "*",
        "replication.policy.class": "com.example.Mine",
        "source.cluster.alias": "us.east",
        "emit.checkpoints.interval.seconds": "0",
        "sync.group.offsets.enabled": "maybe",
        "refresh.topics.interval.seconds": "-1",
        "source.cluster.security.protocol": "SASL_TLS",
    }
    assert set(_errors(bad)) == set(bad)


def test_converters_must_pass_bytes_through() -> None:
    errors = _errors({"key.converter": "", "value.converter": ""})
    assert set(errors) == {"key.converter", "value.converter"}
    assert BYTES in errors["key.converter"][0] and "JsonConverter" in errors["key.converter"][0]
    worker = {"bootstrap.servers": "t:1", "key.converter": BYTES, "value.converter": BYTES}
    assert _errors({"key.converter": "", "value.converter": ""}, worker) == {}
    strings = "org.apache.kafka.connect.storage.StringConverter"
    assert set(_errors({"value.converter": strings}, worker)) == {"value.converter"}


def test_sasl_needs_a_mechanism_and_credentials() -> None:
    sasl = {"source.cluster.security.protocol": "SASL_SSL"}
    assert set(_errors(sasl)) == {
        "source.cluster.sasl.mechanism",
        "source.cluster.sasl.username",
        "source.cluster.sasl.password",
    }
    jaas = 'x required username="u" password="p";'
    complete = {**sasl, "source.cluster.sasl.mechanism": "PLAIN",
                "source.cluster.sasl.jaas.config": jaas}  # fmt: skip
    assert _errors(complete) == {}


def test_only_known_source_settings_and_no_target_ones() -> None:
    errors = _errors({
        "source.cluster.plugin.library.paths": "/tmp/evil.so",
        "target.cluster.bootstrap.servers": "elsewhere:9092",
        "target.cluster.alias": "dc2",
    })  # fmt: skip
    assert set(errors) == {
        "source.cluster.plugin.library.paths",
        "target.cluster.bootstrap.servers",
    }


def test_a_hosted_worker_limits_the_source_hosts() -> None:
    worker = {"bootstrap.servers": "t:1", "mirror.allowed.hosts": "kafka.partner.example:9093"}
    assert _errors({"source.cluster.bootstrap.servers": "kafka.partner.example:9093"}, worker) == {}
    errors = _errors({"source.cluster.bootstrap.servers": "10.0.0.5:9092"}, worker)
    assert set(errors) == {"source.cluster.bootstrap.servers"}
    assert "10.0.0.5:9092" in errors["source.cluster.bootstrap.servers"][0]


def test_the_worker_cluster_as_the_same_principal_is_refused() -> None:
    worker = {"bootstrap.servers": "k:9092", "sasl.username": "key-a"}
    same = {"source.cluster.bootstrap.servers": "k:9092", "source.cluster.sasl.username": "key-a"}
    assert set(_errors(same, worker)) == {"source.cluster.bootstrap.servers"}
    other = {**same, "source.cluster.sasl.username": "key-b"}  # another tenant: fine
    assert _errors(other, worker) == {}


def test_tasks_carry_the_worker_config_in_their_class_not_their_config() -> None:
    connector = MirrorSourceConnector()
    connector.worker_config = {"bootstrap.servers": "t:1", "sasl.password": "worker-secret"}
    connector.start({"name": "m", "source.cluster.bootstrap.servers": "s:1"})
    kind = connector.task_class()
    assert issubclass(kind, MirrorSourceTask)
    assert kind.worker_config["sasl.password"] == "worker-secret"
    assert MirrorSourceTask.worker_config == {}
    configs = connector.task_configs(3)
    assert [(c["mirror.task.index"], c["mirror.task.count"]) for c in configs] == [
        ("0", "3"), ("1", "3"), ("2", "3")]  # fmt: skip
    assert not any("worker-secret" in json.dumps(c) for c in configs)


# --- the task against fake clients ----------------------------------------------------------


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None = b"k",
                 value: bytes | None = b"v", headers: list | None = None,
                 timestamp: tuple[int, int] = (1, 1_700_000_000_000)) -> None:  # fmt: skip
        self._t, self._p, self._o = topic, partition, offset
        self._k, self._v, self._h, self._ts = key, value, headers, timestamp

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def headers(self) -> list | None:
        return self._h

    def timestamp(self) -> tuple[int, int]:
        return self._ts


class FakeConsumer:
    def __init__(self) -> None:
        self.queue: list[FakeMessage] = []
        self.assigned: list[tuple[str, int, int]] = []
        self.paused: set[tuple[str, int]] = set()

    def consume(self, count: int, timeout: float) -> list[FakeMessage]:
        out, self.queue = self.queue[:count], self.queue[count:]
        return out

    def incremental_assign(self, partitions: list) -> None:
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def pause(self, partitions: list) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions: list) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in partitions}

    def incremental_unassign(self, partitions: list) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned = [a for a in self.assigned if a[:2] not in gone]


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, Any]] = []

    def produce(self, topic: str, value: bytes, key: bytes) -> None:
        self.sent.append((topic, json.loads(key), json.loads(value)))

    def poll(self, timeout: float) -> int:
        return 0


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class FakeAdmin:
    """Groups and their offsets, as list/describe/alter see them."""

    def __init__(self, offsets: dict[str, dict[tuple[str, int], int]],
                 members: dict[str, int] | None = None) -> None:  # fmt: skip
        self.offsets = offsets
        self.members = members or {}
        self.altered: list[tuple[str, list[tuple[str, int, int]]]] = []

    def list_consumer_groups(self, **_: Any) -> Future:
        listing = [SimpleNamespace(group_id=g) for g in self.offsets]
        return _done(SimpleNamespace(valid=listing))

    def list_consumer_group_offsets(self, request: list, **_: Any) -> dict[str, Future]:
        group = request[0].group_id
        parts = [
            SimpleNamespace(topic=t, partition=p, offset=o, error=None)
            for (t, p), o in self.offsets.get(group, {}).items()
        ]
        return {group: _done(SimpleNamespace(topic_partitions=parts))}

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Future]:
        return {
            g: _done(SimpleNamespace(members=[object()] * self.members.get(g, 0))) for g in groups
        }

    def alter_consumer_group_offsets(self, request: list, **_: Any) -> dict[str, Future]:
        group = request[0].group_id
        moved = [(tp.topic, tp.partition, tp.offset) for tp in request[0].topic_partitions]
        self.altered.append((group, moved))
        for t, p, o in moved:
            self.offsets.setdefault(group, {})[(t, p)] = o
        return {group: _done(None)}


class FakeContext:
    def __init__(self, stored: dict[tuple[str, int], int]) -> None:
        self.stored = stored

    def offset(self, partition: dict[str, Any]) -> dict[str, Any] | None:
        found = self.stored.get((partition["topic"], partition["partition"]))
        return None if found is None else {"offset": found}


def _task(ends: dict[tuple[str, int], int], **config: str) -> MirrorSourceTask:
    task = MirrorSourceTask()
    task.config = _parsed(**config)
    task.naming = Naming.from_config(task.config)
    task.alias, task.index, task.count, task.timeout = "source", 0, 1, 5.0
    task._consumer, task._producer = FakeConsumer(), FakeProducer()
    task._end_offsets = lambda partitions, timeout: {p: ends[p] for p in partitions if p in ends}
    task.initialize(FakeContext({("orders", 1): 41}))
    return task


def test_the_task_copies_records_as_they_are_and_resumes_after_the_committed_offset() -> None:
    task = _task({("source.orders", 0): 0, ("source.orders", 1): 7})
    task._wanted = {("orders", 0): "source.orders", ("orders", 1): "source.orders"}
    task._consumer.queue = [
        FakeMessage("orders", 1, 42, b"k1", b"v1", [("h", b"x"), ("n", None)], (1, 123)),
        FakeMessage("orders", 0, 0, None, None, None, (0, -1)),
    ]
    records = task.poll()
    assert sorted(task._consumer.assigned) == [("orders", 0, -2), ("orders", 1, 42)]
    first, second = records
    assert (first.topic, first.partition, first.key, first.value) == (
        "source.orders",
        1,
        b"k1",
        b"v1",
    )
    assert first.headers == (("h", b"x"), ("n", None)) and first.timestamp == 123
    assert first.key_schema == first.value_schema == OPTIONAL_BYTES_SCHEMA
    assert first.source_partition == {"cluster": "source", "topic": "orders", "partition": 1}
    assert first.source_offset == {"offset": 42}
    assert (second.key, second.value, second.timestamp, second.headers) == (None, None, None, ())
    task.commit_record(first)
    assert task._parts[("orders", 1)].pending.latest() == (42, 7)  # the target's end: 7


def test_records_in_flight_are_held_back_until_the_target_offsets_are_confirmed() -> None:
    ends = {("source.orders", 0): 0}
    task = _task(ends)
    task._wanted = {("orders", 0): "source.orders"}
    task._consumer.queue = [FakeMessage("orders", 0, o) for o in (0, 1, 2)]
    batch = task.poll()
    for record in batch[:2]:
        task.commit_record(record)  # the third is still in flight
    task._next_confirm = 0.0
    task._consumer.queue = [FakeMessage("orders", 0, o) for o in (5, 6)]  # 3-4: a gap
    assert task.poll() == []  # held back: the partition is draining
    part = task._parts[("orders", 0)]
    assert len(part.held) == 2 and not part.syncs
    assert task._consumer.paused == {("orders", 0)}  # and not fetched meanwhile
    task.commit_record(batch[2])
    ends[("source.orders", 0)] = 3
    released = task.poll()  # quiet now: confirmed, and the held records go out in order
    assert [r.source_offset["offset"] for r in released] == [5, 6]
    assert part.draining_since is None and part.syncs.translate(2) == 2
    assert task._consumer.paused == set()
    assert task._producer.sent == [
        ("mm2-offset-syncs.source.internal", {"topic": "orders", "partition": 0},
         {"upstream": 0, "downstream": 0}),
        ("mm2-offset-syncs.source.internal", {"topic": "orders", "partition": 0},
         {"upstream": 2, "downstream": 2}),
    ]  # fmt: skip
    for record in released:
        task.commit_record(record)
    task._next_confirm = 0.0
    ends[("source.orders", 0)] = 6  # another writer added a record meanwhile
    task.poll()
    assert part.syncs.translate(5) == 3  # 5 was not confirmed: after the last known, 2 → 3
    assert part.next_down == 6


def test_groups_are_checkpointed_and_synced_only_forward_and_only_when_idle() -> None:
    ends = {("source.orders", 0): 100}
    task = _task(ends)
    task._wanted = {("orders", 0): "source.orders"}
    task._consumer.queue = [FakeMessage("orders", 0, o) for o in range(10, 20)]
    for record in task.poll():
        task.commit_record(record)
    task._next_confirm = 0.0
    ends[("source.orders", 0)] = 110
    task.poll()  # confirmed: upstream 10..19 at 100..109
    task._source_admin = FakeAdmin({
        "billing": {("orders", 0): 15, ("other", 0): 3},
        "ahead": {("orders", 0): 25},
        "behind": {("orders", 0): 5},  # before the first known pair: no translation
        "busy": {("orders", 0): 12},
        "connect-sink": {("orders", 0): 12},  # excluded by default
    })  # fmt: skip
    task._target_admin = FakeAdmin(
        {"billing": {("source.orders", 0): 103}, "busy": {}}, members={"busy": 1}
    )
    task._producer.sent.clear()
    task._checkpoint()
    assert {(k["group"], v["upstream"], v["downstream"]) for _, k, v in task._producer.sent} == {
        ("billing", 15, 105), ("ahead", 25, 110), ("busy", 12, 102)}  # fmt: skip
    assert all(t == "source.checkpoints.internal" for t, _, _ in task._producer.sent)
    task._producer.sent.clear()
    task._checkpoint()
    assert task._producer.sent == []  # nothing moved
    task._sync_groups()
    assert sorted(task._target_admin.altered) == [
        ("ahead", [("source.orders", 0, 110)]),
        ("billing", [("source.orders", 0, 105)]),
    ]  # "busy" has a member in the target
    task._target_admin.offsets["billing"][("source.orders", 0)] = 108  # consumed there since
    task._target_admin.altered.clear()
    task._sync_groups()
    assert task._target_admin.altered == []  # never back
