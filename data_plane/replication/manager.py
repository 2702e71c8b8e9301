"""The replica manager: every partition replica this broker holds, as leader or follower.

Handlers call :meth:`ReplicaManager.append_records` and :meth:`ReplicaManager.fetch_records`
and turn the results into responses, as Kafka's ``ReplicaManager`` is used. Underneath:

* a :class:`~data_plane.replication.partition.Partition` for every partition this broker
  leads (any replication factor) owns the append, the min-ISR check, the high watermark
  and its waiters;
* a **leader** learns each follower's log end offset from the follower's Fetch (the fetch
  offset: the follower holds everything before it). A follower joins the ISR once it has
  reached the high watermark; it leaves after ``replica_lag_time_max_ms`` without catching
  up to the leader's log end. Every ISR change is proposed to the metadata store
  (``alter_partition``: compare-and-set on the leader and partition epochs) and used only
  once accepted. A leader that was replaced therefore cannot shrink the ISR to itself, and
  cannot acknowledge acks=all writes;
* a **follower** is pulled by one fetcher thread per leader broker (``fetcher.py``);
* high watermarks are checkpointed every few seconds and at shutdown (``checkpoint.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

from data_plane.log.config import LogConfig
from data_plane.log.manager import LogManager, TopicPartition
from data_plane.log.partition import AppendInfo, LogIOError, OffsetOutOfRange, PartitionLog
from data_plane.log.producer_state import CoordinatorFenced, OutOfOrderSequence, ProducerFenced
from data_plane.log.segment import FileSlice
from data_plane.log.transactions import AbortedTxn
from data_plane.metadata.model import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo
from data_plane.protocol.errors import ErrorCode
from data_plane.records.batch import InvalidRecordBatch
from data_plane.replication.checkpoint import read_high_watermarks, write_high_watermarks
from data_plane.replication.fetcher import FollowedPartition, ReplicaFetcher
from data_plane.replication.partition import NotEnoughReplicas, Partition, PartitionWaiters

logger = logging.getLogger("millrace.broker.replication")
E = ErrorCode

# Refused batches whose cause has an error code of its own (the rest: CORRUPT_MESSAGE).
_REFUSED_BATCH = {
    "too_large": E.MESSAGE_TOO_LARGE,
    "no_key": E.INVALID_RECORD,
    "bad_timestamp": E.INVALID_TIMESTAMP,
    "control_batch": E.INVALID_RECORD,
}


class PartitionStateStore(Protocol):
    """The one metadata-store call replication makes: a leader's ISR proposal."""

    def alter_partition(
        self,
        topic_id: str,
        index: int,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
    ) -> tuple[int, int, int, tuple[int, ...]]: ...


class Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class ReplicationMetrics(Protocol):
    @property
    def replication_bytes_in(self) -> Counter: ...

    @property
    def replication_bytes_out(self) -> Counter: ...

    @property
    def isr_shrinks(self) -> Counter: ...

    @property
    def isr_expands(self) -> Counter: ...


@dataclass(frozen=True)
class ReplicationConfig:
    broker_id: int
    data_dir: Path
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_ms: int = 500
    internal_password: str = field(default="", repr=False)


@dataclass
class AppendResult:
    error: int = E.NONE
    message: str | None = None
    info: AppendInfo | None = None
    log_start_offset: int = -1
    record_errors: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class FetchPartition:
    topic: TopicInfo
    index: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass
class FetchResult:
    error: int = E.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FileSlice | None = None
    # read_committed: the aborted transactions overlapping the records (Step 13).
    aborted: list[AbortedTxn] | None = None


def epoch_error(topic: TopicInfo, index: int, current_leader_epoch: int) -> int:
    """KIP-320 fencing: a request that names a leader epoch must name the current one."""
    if current_leader_epoch < 0 or not 0 <= index < topic.partition_count:
        return E.NONE
    epoch = topic.partitions[index].leader_epoch
    if current_leader_epoch < epoch:
        return E.FENCED_LEADER_EPOCH
    if current_leader_epoch > epoch:
        return E.UNKNOWN_LEADER_EPOCH
    return E.NONE


class ReplicaManager:
    def __init__(
        self,
        config: ReplicationConfig,
        logs: LogManager,
        log_config: Callable[[TopicInfo], LogConfig],
        store: PartitionStateStore,
        metrics: ReplicationMetrics,
        live_brokers: Callable[[], Mapping[int, BrokerInfo]],
    ) -> None:
        self.broker_id = config.broker_id
        self.data_dir = config.data_dir
        self.lag_time_s = config.replica_lag_time_max_ms / 1000
        self.fetch_wait_ms = config.replica_fetch_wait_ms
        self.internal_password = config.internal_password
        self.logs = logs
        self.log_config = log_config
        self.store = store
        self.metrics = metrics
        self.live_brokers = live_brokers
        self.waiters = PartitionWaiters()
        self.leaders: dict[TopicPartition, Partition] = {}
        self.followed: dict[TopicPartition, FollowedPartition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._checkpoint: dict[TopicPartition, int] = read_high_watermarks(config.data_dir)
        self._lock = threading.Lock()  # guards ``followed`` against the fetcher threads

    # --- start-up and checkpoints ---------------------------------------------------------

    def open_logs(self) -> None:
        """Open every log on disk, each at its checkpointed high watermark."""
        self.logs.open_all()
        for tp in self.logs.partitions():
            log = self.logs.get(tp)
            if log is not None:
                self._initial_high_watermark(tp, log)

    def _initial_high_watermark(self, tp: TopicPartition, log: PartitionLog) -> None:
        """After opening a log: the checkpointed high watermark, never past the log end."""
        hw = self._checkpoint.pop(tp, None)
        if hw is not None and log.high_watermark < hw:
            log.update_high_watermark(hw)

    def write_checkpoint(self) -> None:
        rows = []
        for tp in self.logs.partitions():
            log = self.logs.get(tp)
            if log is not None:
                rows.append((tp, log.high_watermark))
        write_high_watermarks(self.data_dir, rows)

    async def checkpoint_loop(self, every_s: float = 5.0) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await asyncio.to_thread(self.write_checkpoint)
            except OSError:
                logger.exception("writing the high-watermark checkpoint failed")

    def _open(self, topic: TopicInfo, tp: TopicPartition) -> PartitionLog:
        log = self.logs.get(tp)
        if log is None:
            log = self.logs.get_or_create(tp, self.log_config(topic))
            self._initial_high_watermark(tp, log)
        return log

    # --- roles -----------------------------------------------------------------------------

    def apply(
        self, snapshot: MetadataSnapshot, topics: Collection[uuid.UUID] | None = None
    ) -> None:
        """Take up the roles the snapshot gives this broker (called on the event loop).

        ``topics``: only these topics changed (created, altered or deleted); None: any may
        have (a full snapshot, or the live brokers moved), so every role is checked."""
        changed: set[uuid.UUID] | None = None
        if topics is None:
            wanted = [t for ts in snapshot.topics.values() for t in ts.values()]
        else:
            found = [snapshot.topic_by_id(topic_id) for topic_id in topics]
            wanted = [t for t in found if t is not None]
            changed = set(topics)
        seen: set[TopicPartition] = set()
        for topic in wanted:
            self._take_roles(topic, seen)
        # Roles the snapshot no longer gives (of the changed topics only, given some).
        for tp in [tp for tp in self.leaders if tp not in seen]:
            if changed is None or tp.topic_id in changed:
                self._resign(tp)
        for tp in [tp for tp in self.followed if tp not in seen]:
            if changed is None or tp.topic_id in changed:
                self._stop_following(tp)
        for leader_id in [i for i, f in self.fetchers.items() if not f.partitions()]:
            self.fetchers.pop(leader_id).stop()

    def _take_roles(self, topic: TopicInfo, seen: set[TopicPartition]) -> None:
        me = self.broker_id
        for p in topic.partitions:
            if p.leader != me and me not in p.replicas:
                continue
            tp = TopicPartition(topic.topic_id, p.index)
            seen.add(tp)
            if p.leader == me:
                self._lead(topic, p, tp)
            elif p.leader is not None and len(p.replicas) > 1:
                self._follow(topic, p, tp)
            else:
                self._stop_following(tp)
                self._resign(tp)

    def _lead(self, topic: TopicInfo, p: PartitionInfo, tp: TopicPartition) -> None:
        self._stop_following(tp)
        partition = self.leaders.get(tp)
        if partition is None or partition.leader_epoch != p.leader_epoch:
            if partition is not None:
                self._resign(tp)  # an older leadership of ours: its waiters must not ack
            partition = Partition(
                topic,
                p.index,
                self.broker_id,
                p.leader_epoch,
                p.partition_epoch,
                p.replicas,
                p.isr,
                self._open,
                self.waiters,
            )
            self.leaders[tp] = partition
            if partition.replicated(p.replicas):
                partition.log  # noqa: B018 - opened now: the new epoch starts at its log end
                logger.info("leading %s-%s at epoch %s", topic.name, p.index, p.leader_epoch)
            return
        partition.topic = topic
        if p.replicas != partition.replicas:
            partition.set_replicas(p.replicas)
        if not partition.replicated(p.replicas):
            partition.isr = (self.broker_id,)  # a single replica is an ISR of itself
        elif not partition.proposing and p.partition_epoch > partition.partition_epoch:
            partition.partition_epoch, partition.isr = p.partition_epoch, p.isr
        partition.maybe_advance_high_watermark()

    def _resign(self, tp: TopicPartition) -> None:
        """Stop leading ``tp``; writes waiting for its ISR learn it at once."""
        partition = self.leaders.pop(tp, None)
        if partition is not None:
            partition.resigned()

    def _follow(self, topic: TopicInfo, p: PartitionInfo, tp: TopicPartition) -> None:
        self._resign(tp)
        assert p.leader is not None
        with self._lock:
            current = self.followed.get(tp)
            if (
                current is not None
                and current.leader == p.leader
                and current.leader_epoch == p.leader_epoch
            ):
                current.topic = topic
                return
        leader = self.live_brokers().get(p.leader)
        if leader is None:
            self._stop_following(tp)
            return  # the leader is not live; the controller will move leadership
        self._stop_following(tp)
        log = self._open(topic, tp)
        with self._lock:
            self.followed[tp] = FollowedPartition(topic, p.index, log, p.leader, p.leader_epoch)
        fetcher = self.fetchers.get(p.leader)
        if fetcher is None or fetcher.address != (leader.host, leader.port):
            if fetcher is not None:
                fetcher.stop()
            fetcher = ReplicaFetcher(self, p.leader, (leader.host, leader.port))
            self.fetchers[p.leader] = fetcher
            fetcher.start()
        logger.info(
            "following %s-%s from broker %s at epoch %s",
            topic.name,
            p.index,
            p.leader,
            p.leader_epoch,
        )

    def _stop_following(self, tp: TopicPartition) -> None:
        with self._lock:
            entry = self.followed.pop(tp, None)
        if entry is not None:
            with entry.lock:
                entry.stopped = True

    def holds_role(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self.leaders or tp in self.followed

    def followed_from(self, leader_id: int) -> list[tuple[TopicPartition, FollowedPartition]]:
        with self._lock:
            return [(tp, f) for tp, f in self.followed.items() if f.leader == leader_id]

    def replicated_in(self, nbytes: int) -> None:
        self.metrics.replication_bytes_in.inc(nbytes)

    def replicated_leaderships(self) -> list[Partition]:
        """Partitions led here that have followers (a copy: safe from other threads)."""
        return [p for p in list(self.leaders.values()) if p.followers]

    # --- the leader's side --------------------------------------------------------------------

    def leader_partition(self, topic: TopicInfo, index: int) -> tuple[Partition | None, int]:
        """This broker's leadership of a partition, or the error to answer with."""
        if not 0 <= index < topic.partition_count:
            return None, E.UNKNOWN_TOPIC_OR_PARTITION
        info = topic.partitions[index]
        if info.leader is None:
            return None, E.LEADER_NOT_AVAILABLE
        if info.leader != self.broker_id:
            return None, E.NOT_LEADER_OR_FOLLOWER
        partition = self.leaders.get(TopicPartition(topic.topic_id, index))
        if partition is None:
            return None, E.NOT_LEADER_OR_FOLLOWER  # the metadata is newer than our roles
        return partition, E.NONE

    async def append_records(
        self,
        entries: Sequence[tuple[TopicInfo, int, bytes | bytearray | memoryview]],
        required_acks: int,
        timeout_ms: int,
        *,
        markers: bool = False,
    ) -> list[AppendResult]:
        """Append each entry's batches as leader; with acks=all, wait until the ISR holds
        them (at most ``timeout_ms``). One result per entry, in order. ``markers``: the
        batches are a transaction coordinator's commit or abort markers."""
        results: list[AppendResult] = []
        waiting: list[tuple[AppendResult, Partition]] = []
        for topic, index, records in entries:
            result = AppendResult()
            results.append(result)
            partition, result.error = self.leader_partition(topic, index)
            if partition is None:
                continue
            log = partition.log
            try:
                result.info = await partition.append_as_leader(
                    records, required_acks, markers=markers
                )
            except NotEnoughReplicas as exc:
                result.error, result.message = E.NOT_ENOUGH_REPLICAS, str(exc)
            except InvalidRecordBatch as exc:
                result.error = _REFUSED_BATCH.get(exc.reason, E.CORRUPT_MESSAGE)
                result.message = str(exc)
                if exc.record_index is not None:
                    result.record_errors = [(exc.record_index, str(exc))]
            except ProducerFenced as exc:
                result.error, result.message = E.INVALID_PRODUCER_EPOCH, str(exc)
            except CoordinatorFenced as exc:
                result.error, result.message = E.TRANSACTION_COORDINATOR_FENCED, str(exc)
            except OutOfOrderSequence as exc:
                result.error, result.message = E.OUT_OF_ORDER_SEQUENCE_NUMBER, str(exc)
            except LogIOError as exc:
                result.error, result.message = E.KAFKA_STORAGE_ERROR, str(exc)
            result.log_start_offset = log.log_start_offset
            if required_acks == -1 and result.info is not None:
                waiting.append((result, partition))
        if waiting:
            deadline = time.monotonic() + max(0, timeout_ms) / 1000
            for result, partition in waiting:
                assert result.info is not None
                await self._wait_for_commit(result, partition, result.info.last_offset, deadline)
        return results

    async def _wait_for_commit(
        self, result: AppendResult, partition: Partition, offset: int, deadline: float
    ) -> None:
        """acks=all: until the ISR holds ``offset``. If this broker stopped leading
        meanwhile, the offset may now hold another leader's record, so the write is not
        acknowledged (NOT_LEADER_OR_FOLLOWER)."""
        while True:
            if self.leaders.get(partition.key) is not partition:
                result.error = E.NOT_LEADER_OR_FOLLOWER
                result.message = "this broker stopped leading the partition meanwhile"
                return
            if partition.log.high_watermark > offset:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                result.error = E.REQUEST_TIMED_OUT
                result.message = "the in-sync replicas did not confirm the write in time"
                return
            await self.waiters.hw_moved.wait((partition.key,), remaining)
        if partition.under_min_isr:
            result.error = E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            result.message = (
                f"written, but the ISR shrank to {len(partition.isr)} "
                f"(min.insync.replicas {partition.min_insync})"
            )

    async def fetch_records(
        self,
        replica_id: int,
        partitions: Sequence[FetchPartition],
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        isolation_level: int = 0,
    ) -> tuple[list[FetchResult], int]:
        """Read the partitions; wait (up to ``max_wait_ms``) until ``min_bytes`` are there.

        Consumers read up to the high watermark (``isolation_level`` 1, read_committed:
        up to the last stable offset, with the aborted transactions in what is read) and
        wait for it to move; a follower (``replica_id`` >= 0) reads up to the log end,
        waits for appends, and tells the leader where it is (once per request). Returns
        one result per partition and the bytes found."""
        committed = isolation_level == 1 and replica_id < 0
        deadline = time.monotonic() + max(0, max_wait_ms) / 1000
        waiters = self.waiters.appended if replica_id >= 0 else self.waiters.hw_moved
        keys: list[TopicPartition] = []
        where: dict[TopicPartition, int] = {}
        results, total = self._read(
            replica_id, partitions, max_bytes, True, keys, where, committed=committed
        )
        if total >= min_bytes or not keys:
            return results, total
        # Waiting: each wake-up re-reads only the partition that moved, to see whether
        # min_bytes is there (a fetch of many partitions that each get a record now and
        # then would otherwise re-read all of them every time); the answer, once enough is
        # there or the wait is over, reads them all afresh, as Kafka's DelayedFetch does.
        with waiters.watching(keys) as watch:
            while (remaining := deadline - time.monotonic()) > 0:
                moved = await watch.next(remaining)
                if moved is None:
                    break  # waited out
                i = where.get(cast(TopicPartition, moved))
                if i is None:
                    continue
                held = results[i].records
                had = held.length if held is not None else 0
                [again], found = self._read(
                    replica_id,
                    [partitions[i]],
                    max_bytes,
                    False,
                    None,
                    already=total - had,
                    committed=committed,
                )
                results[i] = again
                total += found - had
                if total >= min_bytes:
                    break  # enough: answer with everything there now, as Kafka completes
        return self._read(replica_id, partitions, max_bytes, False, None, committed=committed)

    def _read(
        self,
        replica_id: int,
        partitions: Sequence[FetchPartition],
        max_bytes: int,
        record_position: bool,
        keys: list[TopicPartition] | None,
        where: dict[TopicPartition, int] | None = None,
        already: int = 0,
        committed: bool = False,
    ) -> tuple[list[FetchResult], int]:
        """Read ``partitions`` within ``max_bytes``; ``already``: bytes the response holds
        besides these (they count against ``max_bytes``, and a first batch is only
        guaranteed when nothing is there yet). Returns the results and the bytes read."""
        total = already
        results: list[FetchResult] = []
        for i, want in enumerate(partitions):
            result = FetchResult()
            results.append(result)
            partition, result.error = self.leader_partition(want.topic, want.index)
            if partition is not None:
                result.error = epoch_error(want.topic, want.index, want.current_leader_epoch)
            if partition is None or result.error != E.NONE:
                continue
            if keys is not None:
                keys.append(partition.key)
            if where is not None:
                where[partition.key] = i
            log = partition.log
            lso = log.last_stable_offset
            upto: int | None = lso if committed else log.high_watermark
            if replica_id >= 0:
                if not partition.followers:
                    result.error = E.NOT_LEADER_OR_FOLLOWER
                    continue
                if record_position and partition.follower_fetched(replica_id, want.fetch_offset):
                    if replica_id in self.live_brokers():  # a fenced broker is not eligible
                        self.propose_isr(partition, (*partition.isr, replica_id))
                upto = None
            result.high_watermark = log.high_watermark
            result.last_stable_offset = lso
            result.log_start_offset = log.log_start_offset
            limit = min(want.max_bytes, max(0, max_bytes - total))
            try:
                found = log.read(want.fetch_offset, limit, max_offset=upto, min_one=total == 0)
            except OffsetOutOfRange:
                result.error = E.OFFSET_OUT_OF_RANGE
                continue
            if found is not None and found.length:
                result.records = found
                total += found.length
            if committed:
                result.aborted = (
                    log.aborted_transactions(want.fetch_offset, found.next_offset)
                    if found is not None and found.length
                    else []
                )
        return results, total - already

    # --- the ISR ------------------------------------------------------------------------------

    def propose_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Ask the metadata store to change the ISR; use it only once accepted."""
        if partition.proposing or set(isr) == set(partition.isr):
            return
        partition.proposing = True
        wanted = [b for b in partition.replicas if b in set(isr)]
        asyncio.get_running_loop().create_task(self._propose(partition, wanted))

    async def _propose(self, partition: Partition, isr: list[int]) -> None:
        try:
            result = await asyncio.to_thread(
                self.store.alter_partition,
                str(partition.topic.topic_id),
                partition.index,
                self.broker_id,
                partition.leader_epoch,
                partition.partition_epoch,
                isr,
            )
        except Exception:
            logger.exception(
                "AlterPartition for %s-%s failed", partition.topic.name, partition.index
            )
            result = None
        finally:
            partition.proposing = False
        if result is None:
            return
        error, leader_epoch, partition_epoch, accepted = result
        name = f"{partition.topic.name}-{partition.index}"
        if error == E.NONE:
            logger.info("%s: ISR now %s", name, list(accepted))
            if len(accepted) < len(partition.isr):
                self.metrics.isr_shrinks.inc()
            elif len(accepted) > len(partition.isr):
                self.metrics.isr_expands.inc()
            partition.isr, partition.partition_epoch = tuple(accepted), partition_epoch
            partition.maybe_advance_high_watermark()
        elif partition_epoch > partition.partition_epoch and leader_epoch == partition.leader_epoch:
            partition.isr, partition.partition_epoch = tuple(accepted), partition_epoch
        else:
            for replica in set(isr) - set(partition.isr):
                follower = partition.followers.get(replica)
                if follower is not None:
                    follower.retry_isr_after = time.monotonic() + 1.0
            logger.info(
                "%s: ISR change refused (%s); waiting for metadata", name, ErrorCode(error).name
            )

    async def shrink_isr_loop(self) -> None:
        """Drop followers that have not caught up for ``replica_lag_time_max_ms``."""
        while True:
            await asyncio.sleep(max(0.05, self.lag_time_s / 2))
            now = time.monotonic()
            for partition in self.replicated_leaderships():
                laggards = partition.lagging_followers(now, self.lag_time_s)
                if laggards:
                    self.propose_isr(
                        partition, tuple(r for r in partition.isr if r not in laggards)
                    )

    def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        for fetcher in self.fetchers.values():
            fetcher.join(10)
        self.fetchers.clear()
