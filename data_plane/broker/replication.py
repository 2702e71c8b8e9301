"""Replication between brokers: leaders track their followers, followers pull from leaders.

* A **leader** learns each follower's log end offset from the follower's Fetch (the fetch
  offset: the follower holds everything before it). The high watermark is the smallest log
  end offset in the ISR. A follower joins the ISR once it has reached the high watermark;
  it leaves after ``replica_lag_time_max_ms`` without catching up to the leader's log end.
  Every ISR change is proposed to the metadata store (``alter_partition``: compare-and-set
  on the leader and partition epochs) and used only once accepted. A leader that was
  replaced therefore cannot shrink the ISR to itself, and cannot acknowledge acks=all writes.
* A **follower** runs one fetcher thread per leader broker. When it becomes a follower (or
  the leader epoch moves), it asks the leader where its last epoch ends
  (OffsetForLeaderEpoch, KIP-101/279) and truncates there, never to the high watermark.
  Then it appends what it fetches with the leader's offsets and epochs. Its high watermark
  is the leader's, capped by its own log end.
* The replica connection authenticates as the broker-internal principal
  (``internal_auth.BROKER_USER``). That principal names topics by topic id, since it
  belongs to no tenant.
* High watermarks are checkpointed (``replication-offset-checkpoint``) every few seconds
  and at shutdown, so a restarted replica never exposes more than was committed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data_plane import internal_auth
from data_plane.broker.model import MetadataSnapshot, PartitionInfo, TopicInfo
from data_plane.client.connection import Connection, KafkaClientError
from data_plane.log.checkpoint import write_atomically
from data_plane.log.manager import TopicPartition
from data_plane.log.partition import PartitionLog
from data_plane.protocol.errors import ErrorCode
from data_plane.records.batch import InvalidRecordBatch, read_header

if TYPE_CHECKING:
    from data_plane.broker.server import Broker

logger = logging.getLogger("millrace.broker.replication")
E = ErrorCode
FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23
CHECKPOINT = "replication-offset-checkpoint"


@dataclass
class FollowerState:
    log_end_offset: int = -1
    last_caught_up: float = 0.0  # monotonic time it last reached the leader's log end
    last_fetch_leader_leo: int = -1
    last_fetch_time: float = 0.0
    retry_isr_after: float = 0.0  # after a refused expansion, wait before asking again


@dataclass
class LeaderState:
    """What the leader of one partition knows about its replicas."""

    topic: TopicInfo
    index: int
    log: PartitionLog
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    followers: dict[int, FollowerState] = field(default_factory=dict)
    proposing: bool = False


@dataclass
class FollowedPartition:
    topic: TopicInfo
    index: int
    log: PartitionLog
    leader: int
    leader_epoch: int
    needs_truncation: bool = True
    # Held by the fetcher while it changes the log; ``stopped`` is set under it, so once
    # ``_stop_following`` returns no fetcher touches the log (it may then be deleted).
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: bool = False


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.broker_id = broker.config.broker_id
        self.lag_time_s = broker.config.replica_lag_time_max_ms / 1000
        self.leaders: dict[TopicPartition, LeaderState] = {}
        self.followed: dict[TopicPartition, FollowedPartition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._checkpoint: dict[TopicPartition, int] = self._read_checkpoint()
        self._lock = threading.Lock()  # guards ``followed`` against the fetcher threads

    # --- checkpoint --------------------------------------------------------------------------

    @property
    def _checkpoint_path(self) -> Path:
        return self.broker.config.data_dir / CHECKPOINT

    def _read_checkpoint(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        try:
            lines = self._checkpoint_path.read_text().split("\n")
        except OSError:
            return out
        for line in lines[2:]:
            parts = line.split()
            if len(parts) == 3:
                out[TopicPartition(uuid.UUID(parts[0]), int(parts[1]))] = int(parts[2])
        return out

    def write_checkpoint(self) -> None:
        rows = []
        for tp in self.broker.logs.partitions():
            log = self.broker.logs.get(tp)
            if log is not None:
                rows.append(f"{tp.topic_id} {tp.partition} {log.high_watermark}\n")
        self.broker.config.data_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self._checkpoint_path, f"0\n{len(rows)}\n{''.join(rows)}")

    def initial_high_watermark(self, tp: TopicPartition, log: PartitionLog) -> None:
        """After opening a log: the checkpointed high watermark, never past the log end."""
        hw = self._checkpoint.pop(tp, None)
        if hw is not None and log.high_watermark < hw:
            log.update_high_watermark(hw)

    # --- roles -----------------------------------------------------------------------------

    def apply(self, snapshot: MetadataSnapshot) -> None:
        """Take up the roles the snapshot gives this broker (called on the event loop)."""
        me = self.broker_id
        seen: set[TopicPartition] = set()
        for topics in snapshot.topics.values():
            for topic in topics.values():
                for p in topic.partitions:
                    if me not in p.replicas or len(p.replicas) < 2:
                        continue
                    tp = TopicPartition(topic.topic_id, p.index)
                    seen.add(tp)
                    if p.leader == me:
                        self._lead(topic, p, tp)
                    elif p.leader is not None:
                        self._follow(topic, p, tp)
                    else:
                        self._stop_following(tp)
                        self._resign(tp)
        for tp in [tp for tp in self.leaders if tp not in seen]:
            self._resign(tp)
        for tp in [tp for tp in self.followed if tp not in seen]:
            self._stop_following(tp)
        for leader_id in [i for i, f in self.fetchers.items() if not f.partitions()]:
            self.fetchers.pop(leader_id).stop()

    def _open(self, topic: TopicInfo, tp: TopicPartition) -> PartitionLog:
        log = self.broker.logs.get(tp)
        if log is None:
            log = self.broker.logs.get_or_create(tp, self.broker.config_for(topic))
            self.initial_high_watermark(tp, log)
        return log

    def _lead(self, topic: TopicInfo, p: PartitionInfo, tp: TopicPartition) -> None:
        self._stop_following(tp)
        state = self.leaders.get(tp)
        log = self._open(topic, tp)
        if state is None or state.leader_epoch != p.leader_epoch:
            if state is not None:
                self._resign(tp)  # an older leadership of ours: its waiters must not ack
            # A new leadership: new batches start this epoch at the current log end.
            log.leader_epochs.assign(p.leader_epoch, log.log_end_offset)
            now = time.monotonic()
            state = LeaderState(
                topic, p.index, log, p.leader_epoch, p.partition_epoch, p.replicas, p.isr
            )
            for follower in p.replicas:
                if follower != self.broker_id:
                    state.followers[follower] = FollowerState(last_caught_up=now)
            self.leaders[tp] = state
            logger.info("leading %s-%s at epoch %s", topic.name, p.index, p.leader_epoch)
        else:
            state.topic = topic
            if p.replicas != state.replicas:
                self._set_replicas(state, p.replicas)
            if not state.proposing and p.partition_epoch > state.partition_epoch:
                state.partition_epoch, state.isr = p.partition_epoch, p.isr
        self.maybe_advance_high_watermark(state)

    def _set_replicas(self, state: LeaderState, replicas: tuple[int, ...]) -> None:
        """A reassignment added or removed replicas: track the new ones, forget the old."""
        now = time.monotonic()
        state.replicas = replicas
        for follower in replicas:
            if follower != self.broker_id and follower not in state.followers:
                state.followers[follower] = FollowerState(last_caught_up=now)
        for follower in [f for f in state.followers if f not in replicas]:
            del state.followers[follower]

    def _resign(self, tp: TopicPartition) -> None:
        """Stop leading ``tp``; writes waiting for its ISR learn it at once."""
        if self.leaders.pop(tp, None) is not None:
            self.broker.hw_moved.notify(tp)
            self.broker.appended.notify(tp)  # parked follower fetches: answer, not wait

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
        leader = self.broker.snapshot.brokers.get(p.leader)
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

    # --- the leader's side --------------------------------------------------------------------

    def leader_state(self, topic: TopicInfo, index: int) -> LeaderState | None:
        return self.leaders.get(TopicPartition(topic.topic_id, index))

    def follower_fetched(self, state: LeaderState, replica: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset``: it has everything before it."""
        follower = state.followers.get(replica)
        if follower is None:
            return
        now = time.monotonic()
        leo = state.log.log_end_offset
        if fetch_offset >= leo:
            follower.last_caught_up = now
        elif fetch_offset >= follower.last_fetch_leader_leo >= 0:
            follower.last_caught_up = max(follower.last_caught_up, follower.last_fetch_time)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_leo, follower.last_fetch_time = leo, now
        if (
            replica not in state.isr
            and fetch_offset >= state.log.high_watermark
            and fetch_offset >= self._epoch_start(state)
            and replica in self.broker.snapshot.brokers  # a fenced broker is not eligible
            and now >= follower.retry_isr_after
        ):
            self.propose_isr(state, (*state.isr, replica))
        self.maybe_advance_high_watermark(state)

    @staticmethod
    def _epoch_start(state: LeaderState) -> int:
        for epoch, start in reversed(state.log.leader_epochs.entries):
            if epoch == state.leader_epoch:
                return start
        return 0

    def maybe_advance_high_watermark(self, state: LeaderState) -> None:
        ends = [state.log.log_end_offset]
        for replica in state.isr:
            if replica == self.broker_id:
                continue
            follower = state.followers.get(replica)
            ends.append(follower.log_end_offset if follower is not None else -1)
        candidate = min(ends)
        if candidate > state.log.high_watermark:
            state.log.update_high_watermark(candidate)
            self.broker.hw_moved.notify(TopicPartition(state.topic.topic_id, state.index))

    def is_leading(self, state: LeaderState) -> bool:
        """Still the leader this state was made for (same leadership, same epoch)."""
        return self.leaders.get(TopicPartition(state.topic.topic_id, state.index)) is state

    async def wait_for_high_watermark(
        self, state: LeaderState, offset: int, deadline: float
    ) -> int:
        """acks=all: wait until the ISR holds ``offset``. NONE, REQUEST_TIMED_OUT, or
        NOT_LEADER_OR_FOLLOWER if this broker stopped leading meanwhile: then the offset
        may now hold another leader's record, so the write must not be acknowledged."""
        key = TopicPartition(state.topic.topic_id, state.index)
        while True:
            if not self.is_leading(state):
                return E.NOT_LEADER_OR_FOLLOWER
            if state.log.high_watermark > offset:
                return E.NONE
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return E.REQUEST_TIMED_OUT
            await self.broker.hw_moved.wait((key,), remaining)

    def propose_isr(self, state: LeaderState, isr: tuple[int, ...]) -> None:
        """Ask the metadata store to change the ISR; use it only once accepted."""
        if state.proposing or set(isr) == set(state.isr):
            return
        state.proposing = True
        wanted = [b for b in state.replicas if b in set(isr)]
        asyncio.get_running_loop().create_task(self._propose(state, wanted))

    async def _propose(self, state: LeaderState, isr: list[int]) -> None:
        try:
            result = await self.broker.call_store(
                self.broker.store.alter_partition,
                str(state.topic.topic_id),
                state.index,
                self.broker_id,
                state.leader_epoch,
                state.partition_epoch,
                isr,
            )
        except Exception:
            logger.exception("AlterPartition for %s-%s failed", state.topic.name, state.index)
            result = None
        finally:
            state.proposing = False
        if result is None:
            return
        error, leader_epoch, partition_epoch, accepted = result
        if error == E.NONE:
            logger.info("%s-%s: ISR now %s", state.topic.name, state.index, list(accepted))
            metrics = self.broker.metrics
            if len(accepted) < len(state.isr):
                metrics.isr_shrinks.inc()
            elif len(accepted) > len(state.isr):
                metrics.isr_expands.inc()
            state.isr, state.partition_epoch = tuple(accepted), partition_epoch
            self.maybe_advance_high_watermark(state)
        elif partition_epoch > state.partition_epoch and leader_epoch == state.leader_epoch:
            state.isr, state.partition_epoch = tuple(accepted), partition_epoch
        else:
            for replica in set(isr) - set(state.isr):
                follower = state.followers.get(replica)
                if follower is not None:
                    follower.retry_isr_after = time.monotonic() + 1.0
            logger.info(
                "%s-%s: ISR change refused (%s); waiting for metadata",
                state.topic.name,
                state.index,
                ErrorCode(error).name,
            )

    async def shrink_isr_loop(self) -> None:
        """Drop followers that have not caught up for ``replica_lag_time_max_ms``."""
        while True:
            await asyncio.sleep(max(0.05, self.lag_time_s / 2))
            now = time.monotonic()
            for state in list(self.leaders.values()):
                laggards = {
                    r
                    for r in state.isr
                    if r != self.broker_id
                    and now - state.followers.get(r, FollowerState()).last_caught_up
                    > self.lag_time_s
                }
                if laggards:
                    self.propose_isr(state, tuple(r for r in state.isr if r not in laggards))

    async def checkpoint_loop(self, every_s: float = 5.0) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await asyncio.to_thread(self.write_checkpoint)
            except OSError:
                logger.exception("writing the high-watermark checkpoint failed")

    def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        for fetcher in self.fetchers.values():
            fetcher.join(10)
        self.fetchers.clear()


class ReplicaFetcher(threading.Thread):
    """Pulls every partition this broker follows from one leader broker."""

    def __init__(self, manager: ReplicaManager, leader_id: int, address: tuple[str, int]) -> None:
        super().__init__(name=f"replica-fetcher-{leader_id}", daemon=True)
        self.manager = manager
        self.leader_id = leader_id
        self.address = address
        self._stopped = threading.Event()
        self._conn: Connection | None = None
        config = manager.broker.config
        self._max_wait_ms = config.replica_fetch_wait_ms
        self._password = config.internal_password

    def partitions(self) -> list[tuple[TopicPartition, FollowedPartition]]:
        return self.manager.followed_from(self.leader_id)

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        backoff = 0.1
        while not self._stopped.is_set():
            try:
                if not self.fetch_once():
                    self._stopped.wait(0.05)
                backoff = 0.1
            except KafkaClientError as exc:
                logger.info("fetching from broker %s: %s", self.leader_id, exc)
                self._close()
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:
                logger.exception("replica fetcher for broker %s failed", self.leader_id)
                self._close()
                self._stopped.wait(1.0)
        self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = Connection(
                *self.address,
                client_id=f"millrace-replica-{self.manager.broker_id}",
                timeout=max(10.0, self._max_wait_ms / 1000 + 5),
            )
            conn.authenticate(internal_auth.MECHANISM, internal_auth.BROKER_USER, self._password)
            self._conn = conn
        return self._conn

    def fetch_once(self) -> bool:
        """One round: truncate what needs it, then one Fetch. False if nothing to do."""
        followed = self.partitions()
        if not followed:
            return False
        conn = self._connection()
        pending = [(tp, f) for tp, f in followed if f.needs_truncation]
        if pending:
            self._truncate(conn, pending)
            followed = [(tp, f) for tp, f in self.partitions() if not f.needs_truncation]
            if not followed:
                return True
        request = {
            "replica_id": self.manager.broker_id,
            "max_wait_ms": self._max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 64 * 2**20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": _by_topic(
                followed,
                lambda f: {
                    "partition": f.index,
                    "current_leader_epoch": f.leader_epoch,
                    "fetch_offset": f.log.log_end_offset,
                    "last_fetched_epoch": f.log.leader_epochs.latest_epoch,
                    "log_start_offset": f.log.log_start_offset,
                    "partition_max_bytes": 8 * 2**20,
                },
            ),
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        answer = conn.request(FETCH, 12, request)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "fetched from %s: %s",
                self.leader_id,
                [
                    (p["partition_index"], p["error_code"], p["high_watermark"], len(p["records"]))
                    for t in answer["responses"]
                    for p in t["partitions"]
                ],
            )
        index = {(str(f.topic.topic_id), f.index): (tp, f) for tp, f in followed}
        for t in answer["responses"]:
            for p in t["partitions"]:
                found = index.get((t["topic"], p["partition_index"]))
                if found is None:
                    continue
                with found[1].lock:
                    if not found[1].stopped:
                        self._apply(found[1], p)
        return True

    def _apply(self, f: FollowedPartition, p: dict[str, Any]) -> None:
        code = p["error_code"]
        log = f.log
        if code == E.NONE:
            records = p["records"]
            if records:
                data = bytes(records)
                first = read_header(data).base_offset
                if log.log_start_offset <= first < log.log_end_offset:
                    # The leader's batch holding our fetch offset starts before it: our
                    # copy of that batch is not the leader's (it can only come from a
                    # tail we should not have). Take the leader's batch whole.
                    logger.warning(
                        "%s-%s: leader's batch starts at %s, inside our log (end %s); "
                        "truncating to it",
                        f.topic.name,
                        f.index,
                        first,
                        log.log_end_offset,
                    )
                    log.truncate_to(first)
                try:
                    log.append(data, assign_offsets=False)
                    self.manager.broker.metrics.replication_bytes_in.inc(len(data))
                except InvalidRecordBatch as exc:
                    # The leader's log moved under us (truncated): find the point again.
                    logger.warning("replica append refused: %s; re-checking divergence", exc)
                    f.needs_truncation = True
                    return
            hw = min(p["high_watermark"], log.log_end_offset)
            if hw > log.high_watermark:
                log.update_high_watermark(hw)
            return
        if code == E.OFFSET_OUT_OF_RANGE:
            leader_start = p["log_start_offset"]
            if leader_start > log.log_end_offset:
                # Everything we hold is gone from the leader: start again at its log start.
                log.truncate_fully_and_start_at(leader_start)
            else:
                f.needs_truncation = True  # we are ahead of the leader: find the divergence
        elif code in (E.FENCED_LEADER_EPOCH, E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_LEADER_EPOCH):
            self._stopped.wait(0.05)  # metadata will tell us who leads now
        else:
            logger.info("fetch of %s-%s: %s", f.topic.name, f.index, ErrorCode(code).name)

    def _truncate(
        self, conn: Connection, pending: list[tuple[TopicPartition, FollowedPartition]]
    ) -> None:
        """KIP-101/279: truncate each log to where its last epoch ends on the leader."""
        request = {
            "replica_id": self.manager.broker_id,
            "topics": _by_topic(
                pending,
                lambda f: {
                    "partition": f.index,
                    "current_leader_epoch": f.leader_epoch,
                    "leader_epoch": f.log.leader_epochs.latest_epoch,
                },
            ),
        }
        answer = conn.request(OFFSET_FOR_LEADER_EPOCH, 4, request)
        index = {(str(f.topic.topic_id), f.index): f for _, f in pending}
        for t in answer["topics"]:
            for p in t["partitions"]:
                f = index.get((t["topic"], p["partition"]))
                if f is None or p["error_code"] != E.NONE:
                    continue  # an error is retried on the next round
                with f.lock:
                    if not f.stopped:
                        self._truncate_one(f, p)

    @staticmethod
    def _truncate_one(f: FollowedPartition, p: dict[str, Any]) -> None:
        log = f.log
        if log.leader_epochs.latest_epoch < 0:
            target = min(log.high_watermark, log.log_end_offset)
        elif p["leader_epoch"] < 0:
            target = log.log_start_offset
        else:
            _, own_end = log.leader_epochs.end_offset_for(p["leader_epoch"], log.log_end_offset)
            target = min(p["end_offset"], own_end)
        if target < log.log_end_offset:
            logger.info(
                "truncating %s-%s from %s to %s (leader epoch %s ends at %s)",
                f.topic.name,
                f.index,
                log.log_end_offset,
                target,
                p["leader_epoch"],
                p["end_offset"],
            )
            log.truncate_to(max(target, log.log_start_offset))
        f.needs_truncation = False


def _by_topic(
    entries: list[tuple[TopicPartition, FollowedPartition]],
    partition: Callable[[FollowedPartition], dict[str, Any]],
) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for _, f in entries:
        topics.setdefault(str(f.topic.topic_id), []).append(partition(f))
    return [{"topic": t, "partitions": ps} for t, ps in topics.items()]
