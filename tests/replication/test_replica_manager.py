"""The replica manager and its partitions, in-process: no broker, no database, no sockets.

One owner of the commit point for every replication factor: a single replica is an ISR of
itself, a replicated partition commits what its ISR holds, and acks=all answers only once
the commit point passed the write (or says why not).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from data_plane.log.config import LogConfig
from data_plane.log.manager import LogManager, TopicPartition
from data_plane.metadata.model import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo
from data_plane.protocol.errors import ErrorCode
from data_plane.replication.manager import (
    FetchPartition,
    ReplicaManager,
    ReplicationConfig,
)
from tests.log.helpers import batch

E = ErrorCode
ME = 1


class Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class Metrics:
    def __init__(self) -> None:
        self.replication_bytes_in = Counter()
        self.replication_bytes_out = Counter()
        self.isr_shrinks = Counter()
        self.isr_expands = Counter()


class Store:
    """Accepts every ISR proposal (bumping the partition epoch) and records it."""

    def __init__(self) -> None:
        self.proposals: list[list[int]] = []
        self.refuse = False

    def alter_partition(
        self,
        topic_id: str,
        index: int,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
    ) -> tuple[int, int, int, tuple[int, ...]]:
        self.proposals.append(isr)
        if self.refuse:
            return E.INVALID_UPDATE_VERSION, leader_epoch, partition_epoch, ()
        return E.NONE, leader_epoch, partition_epoch + 1, tuple(isr)


def topic(replicas: tuple[int, ...], isr: tuple[int, ...] | None = None, **configs: Any):
    return TopicInfo(
        tenant_id=7,
        name="orders",
        topic_id=uuid.UUID(int=42),
        partitions=(PartitionInfo(0, ME, 3, replicas, replicas if isr is None else isr, 5),),
        configs=configs,
    )


def snapshot(t: TopicInfo) -> MetadataSnapshot:
    brokers = {i: BrokerInfo(i, "127.0.0.1", 9000 + i, None) for i in (1, 2, 3)}
    return MetadataSnapshot(topics={t.tenant_id: {t.name: t}}, brokers=brokers)


@pytest.fixture
def manager(tmp_path: Path):
    store = Store()
    logs = LogManager(tmp_path, lambda _: LogConfig())
    m = ReplicaManager(
        ReplicationConfig(broker_id=ME, data_dir=tmp_path, replica_lag_time_max_ms=200),
        logs,
        lambda _: LogConfig(),
        store,
        Metrics(),
        lambda: {i: BrokerInfo(i, "127.0.0.1", 9000 + i, None) for i in (1, 2, 3)},
    )
    m.store_fake = store  # type: ignore[attr-defined]
    yield m
    m.stop()
    logs.close_all()


def run(coro):
    return asyncio.run(coro)


def test_a_single_replica_commits_its_own_appends(manager):
    t = topic((ME,))
    manager.apply(snapshot(t))
    [result] = run(manager.append_records([(t, 0, batch(3))], -1, 1000))
    assert (result.error, result.info.first_offset, result.info.last_offset) == (E.NONE, 0, 2)
    partition, code = manager.leader_partition(t, 0)
    assert code == E.NONE and partition.isr == (ME,)
    assert partition.log.high_watermark == 3


def test_a_single_replica_leadership_opens_its_log_on_first_use(manager, tmp_path):
    t = topic((ME,))
    manager.apply(snapshot(t))
    assert manager.logs.partitions() == []  # nothing on disk for a partition never used
    partition, _ = manager.leader_partition(t, 0)
    assert partition.log.log_end_offset == 0
    assert manager.logs.partitions() == [TopicPartition(t.topic_id, 0)]


def test_replicated_partition_commits_what_the_isr_holds(manager):
    t = topic((ME, 2, 3))
    manager.apply(snapshot(t))
    [result] = run(manager.append_records([(t, 0, batch(4))], 1, 1000))
    assert result.error == E.NONE
    partition, _ = manager.leader_partition(t, 0)
    assert partition.log.log_end_offset == 4
    assert partition.log.high_watermark == 0  # the followers hold nothing yet

    async def followers_fetch(offset2: int, offset3: int) -> None:
        for replica, offset in ((2, offset2), (3, offset3)):
            await manager.fetch_records(
                replica, [FetchPartition(t, 0, offset, 1 << 20, 3)], 1 << 20, 0, 0
            )

    run(followers_fetch(4, 2))
    assert partition.log.high_watermark == 2  # the slowest ISR member
    run(followers_fetch(4, 4))
    assert partition.log.high_watermark == 4


def test_acks_all_waits_for_the_isr_and_times_out_saying_so(manager):
    t = topic((ME, 2))
    manager.apply(snapshot(t))

    async def scenario():
        write = asyncio.create_task(manager.append_records([(t, 0, batch(2))], -1, 5000))
        await asyncio.sleep(0.05)
        assert not write.done()  # the follower has not fetched the write yet
        await manager.fetch_records(2, [FetchPartition(t, 0, 2, 1 << 20, 3)], 1 << 20, 0, 0)
        [done] = await asyncio.wait_for(write, 2)
        [late] = await manager.append_records([(t, 0, batch(1))], -1, 50)
        return done, late

    done, late = run(scenario())
    assert done.error == E.NONE and done.info.last_offset == 1
    assert late.error == E.REQUEST_TIMED_OUT and "in time" in late.message


def test_acks_all_below_min_insync_is_refused_before_appending(manager):
    t = topic((ME, 2, 3), isr=(ME,), **{"min.insync.replicas": 2})
    manager.apply(snapshot(t))
    [refused] = run(manager.append_records([(t, 0, batch(2))], -1, 1000))
    assert refused.error == E.NOT_ENOUGH_REPLICAS and refused.info is None
    partition, _ = manager.leader_partition(t, 0)
    assert partition.log.log_end_offset == 0  # nothing was written
    [ok] = run(manager.append_records([(t, 0, batch(2))], 1, 1000))  # acks=1 still works
    assert ok.error == E.NONE


def test_losing_leadership_answers_a_waiting_write_at_once(manager):
    t = topic((ME, 2))
    manager.apply(snapshot(t))
    moved = TopicInfo(
        t.tenant_id,
        t.name,
        t.topic_id,
        (PartitionInfo(0, 2, 4, (ME, 2), (2,), 6),),
        t.configs,
    )

    async def scenario():
        write = asyncio.create_task(manager.append_records([(t, 0, batch(1))], -1, 30_000))
        await asyncio.sleep(0.05)
        manager.apply(MetadataSnapshot(topics={7: {"orders": moved}}))  # broker 2 leads now
        return await asyncio.wait_for(write, 2)

    [result] = run(scenario())
    assert result.error == E.NOT_LEADER_OR_FOLLOWER


def test_a_consumer_fetch_reads_only_committed_records_and_waits_for_more(manager):
    t = topic((ME, 2))
    manager.apply(snapshot(t))
    run(manager.append_records([(t, 0, batch(3))], 1, 1000))

    async def scenario():
        # Nothing committed yet: the fetch parks until the high watermark moves.
        fetch = asyncio.create_task(
            manager.fetch_records(-1, [FetchPartition(t, 0, 0, 1 << 20)], 1 << 20, 1, 5000)
        )
        await asyncio.sleep(0.05)
        assert not fetch.done()
        await manager.fetch_records(2, [FetchPartition(t, 0, 3, 1 << 20, 3)], 1 << 20, 0, 0)
        return await asyncio.wait_for(fetch, 2)

    [result], total = run(scenario())
    assert result.error == E.NONE and result.high_watermark == 3
    assert result.records is not None and total == result.records.length > 0


def test_a_stale_leader_epoch_is_fenced(manager):
    t = topic((ME,))
    manager.apply(snapshot(t))
    results, _ = run(
        manager.fetch_records(-1, [FetchPartition(t, 0, 0, 1 << 20, 2)], 1 << 20, 0, 0)
    )
    assert results[0].error == E.FENCED_LEADER_EPOCH


def test_a_lagging_follower_is_proposed_out_of_the_isr_and_back_in(manager):
    t = topic((ME, 2))
    manager.apply(snapshot(t))
    run(manager.append_records([(t, 0, batch(2))], 1, 1000))

    async def scenario():
        loop = asyncio.create_task(manager.shrink_isr_loop())
        await asyncio.sleep(0.5)  # > replica_lag_time_max_ms without the follower fetching
        loop.cancel()
        partition, _ = manager.leader_partition(t, 0)
        assert partition.isr == (ME,)
        # Caught up again: it rejoins.
        await manager.fetch_records(2, [FetchPartition(t, 0, 2, 1 << 20, 3)], 1 << 20, 0, 0)
        await asyncio.sleep(0.05)
        return partition

    partition = run(scenario())
    assert manager.store_fake.proposals == [[ME], [ME, 2]]
    assert partition.isr == (ME, 2) and partition.log.high_watermark == 2


def test_an_append_that_rolls_a_segment_runs_off_the_event_loop(manager):
    t = topic((ME,))
    manager.log_config = lambda _: LogConfig(segment_bytes=300)
    manager.apply(snapshot(t))
    threads: list[str] = []
    partition, _ = manager.leader_partition(t, 0)
    log = partition.log
    original = log.append

    def spy(*args: Any, **kwargs: Any):
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    log.append = spy  # type: ignore[method-assign]
    run(manager.append_records([(t, 0, batch(3, size=100))], 1, 1000))
    run(manager.append_records([(t, 0, batch(3, size=100))], 1, 1000))  # rolls
    main = threading.main_thread().name
    assert threads[0] == main and threads[1] != main
    assert len(log.segments) == 2


def test_a_partial_apply_touches_only_the_changed_topics(manager):
    t = topic((ME,))
    other = TopicInfo(7, "payments", uuid.UUID(int=43), t.partitions, {})
    both = MetadataSnapshot(topics={7: {t.name: t, other.name: other}})
    manager.apply(both)
    kept, _ = manager.leader_partition(other, 0)
    # "orders" is deleted; the partial apply names only it.
    manager.apply(MetadataSnapshot(topics={7: {other.name: other}}), topics=[t.topic_id])
    assert manager.leader_partition(t, 0)[0] is None
    assert manager.leader_partition(other, 0)[0] is kept  # untouched, not rebuilt
    # A partial apply that does not name a topic leaves its role alone even if the
    # snapshot it is given lacks it; a full apply does not.
    manager.apply(MetadataSnapshot(), topics=[])
    assert manager.leader_partition(other, 0)[0] is kept
    manager.apply(MetadataSnapshot())
    assert manager.leader_partition(other, 0)[0] is None


def test_a_waiting_fetch_rereads_only_the_partition_that_moved(manager):
    """A fetch of many partitions waiting for min_bytes: each append wakes it, and only the
    partition appended to is read again; once min_bytes is there it answers with a fresh
    read of both."""
    t = TopicInfo(
        tenant_id=7,
        name="orders",
        topic_id=uuid.UUID(int=43),
        partitions=tuple(PartitionInfo(i, ME, 3, (ME,), (ME,), 5) for i in (0, 1)),
        configs={},
    )
    manager.apply(snapshot(t))
    one = len(bytes(batch(3)))
    read: list[int] = []
    real = manager._read

    def counting(replica_id, partitions, *args, **kwargs):
        read.append(len(partitions))
        return real(replica_id, partitions, *args, **kwargs)

    manager._read = counting

    async def scenario():
        wants = [FetchPartition(t, i, 0, 1 << 20) for i in (0, 1)]
        fetch = asyncio.create_task(manager.fetch_records(-1, wants, 1 << 20, 2 * one, 5000))
        await asyncio.sleep(0.02)
        await manager.append_records([(t, 0, batch(3))], 1, 1000)
        await asyncio.sleep(0.02)
        assert not fetch.done()  # one batch is less than min_bytes
        await manager.append_records([(t, 1, batch(3))], 1, 1000)
        return await asyncio.wait_for(fetch, 2)

    results, total = run(scenario())
    assert [r.records.length for r in results] == [one, one] and total == 2 * one
    assert read == [2, 1, 1, 2]  # the first read, one per wake-up, the answer


def test_a_new_leaders_high_watermark_lags_its_epoch_until_the_isr_catches_up(manager):
    """Records the followers do not hold yet, then a new leader epoch (a re-election): the
    high watermark is behind the new epoch's start, what ListOffsets answers with
    OFFSET_NOT_AVAILABLE, until the followers have fetched up to it."""
    t = topic((ME, 2))
    manager.apply(snapshot(t))
    run(manager.append_records([(t, 0, batch(4))], 1, 1000))
    partition, _ = manager.leader_partition(t, 0)
    assert partition.log.high_watermark == 0 and not partition.high_watermark_lagging
    info = t.partitions[0]
    reelected = TopicInfo(
        t.tenant_id,
        t.name,
        t.topic_id,
        (PartitionInfo(0, ME, info.leader_epoch + 1, info.replicas, info.isr, 6),),
        t.configs,
    )
    manager.apply(snapshot(reelected))
    partition, _ = manager.leader_partition(reelected, 0)
    assert partition.leader_epoch == info.leader_epoch + 1
    assert partition.log.high_watermark == 0 and partition.high_watermark_lagging
    run(manager.fetch_records(2, [FetchPartition(reelected, 0, 4, 1 << 20, -1)], 1 << 20, 0, 0))
    assert partition.log.high_watermark == 4 and not partition.high_watermark_lagging
