"""``Partition``: this broker's leadership of one partition, whatever its replication factor.

It is the one owner of the commit point. A partition with one replica is an ISR of itself,
so the same code decides every high watermark: the smallest log end offset in the ISR.
It appends as leader (after the min-ISR check), learns its followers' positions from their
fetches, advances the high watermark and wakes the requests waiting on it
(``waiters.Waiters``: replica fetches on appends, consumer fetches and acks=all produces on
the high watermark).

Everything here runs on the broker's event loop. An append that could block (a segment
roll's fsync, ``flush.messages``, the maintenance thread holding the log) runs on a worker
thread, so one partition's disk never stalls every connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from data_plane.log.manager import TopicPartition
from data_plane.log.partition import AppendInfo, PartitionLog
from data_plane.metadata.model import TopicInfo
from data_plane.protocol.errors import ErrorCode
from data_plane.replication.waiters import Waiters
from data_plane.topic_config import effective_configs

E = ErrorCode


class NotEnoughReplicas(Exception):
    """acks=all refused before appending: the ISR is smaller than min.insync.replicas."""


@dataclass
class FollowerState:
    log_end_offset: int = -1
    last_caught_up: float = 0.0  # monotonic time it last reached the leader's log end
    last_fetch_leader_leo: int = -1
    last_fetch_time: float = 0.0
    retry_isr_after: float = 0.0  # after a refused expansion, wait before asking again


class PartitionWaiters:
    """The two kinds of parked request, keyed by ``TopicPartition``."""

    def __init__(self) -> None:
        self.appended = Waiters()  # replica fetches: anything new in the log
        self.hw_moved = Waiters()  # consumer fetches, acks=all produces: the commit point


def min_insync(topic: TopicInfo) -> int:
    return int(effective_configs(topic.configs)["min.insync.replicas"])


class Partition:
    """What the leader of one partition knows about its replicas, and its log."""

    def __init__(
        self,
        topic: TopicInfo,
        index: int,
        broker_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        open_log: Callable[[TopicInfo, TopicPartition], PartitionLog],
        waiters: PartitionWaiters,
    ) -> None:
        self.topic = topic
        self.index = index
        self.key = TopicPartition(topic.topic_id, index)
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas: tuple[int, ...] = ()
        self.isr = isr if self.replicated(replicas) else (broker_id,)
        self.followers: dict[int, FollowerState] = {}
        self.proposing = False  # an ISR change is with the metadata store
        self._open_log = open_log
        self._log: PartitionLog | None = None
        self._waiters = waiters
        self.set_replicas(replicas)

    def replicated(self, replicas: tuple[int, ...]) -> bool:
        return len(replicas) > 1 or (len(replicas) == 1 and replicas[0] != self.broker_id)

    @property
    def log(self) -> PartitionLog:
        """The partition's log, opened on first use (a replicated leadership opens it at
        once, to start the epoch; a single replica's waits for its first request)."""
        log = self._log
        if log is None:
            log = self._log = self._open_log(self.topic, self.key)
            if self.followers:
                # A new leadership: new batches start this epoch at the current log end.
                log.leader_epochs.assign(self.leader_epoch, log.log_end_offset)
            self.maybe_advance_high_watermark()
        return log

    @property
    def log_opened(self) -> bool:
        return self._log is not None

    @property
    def min_insync(self) -> int:
        return min_insync(self.topic)

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.min_insync

    def set_replicas(self, replicas: tuple[int, ...]) -> None:
        """Track the replicas the metadata names (a reassignment adds or removes some)."""
        now = time.monotonic()
        self.replicas = replicas
        for follower in replicas:
            if follower != self.broker_id and follower not in self.followers:
                self.followers[follower] = FollowerState(last_caught_up=now)
        for follower in [f for f in self.followers if f not in replicas]:
            del self.followers[follower]

    # --- appends ------------------------------------------------------------------------------

    async def append_as_leader(
        self, records: bytes | bytearray | memoryview, required_acks: int, *, markers: bool = False
    ) -> AppendInfo:
        """Append a producer's batches at this leadership's epoch and move the commit point.

        Raises NotEnoughReplicas (acks=all with too small an ISR), or what
        ``PartitionLog.append`` raises (the log is then unchanged)."""
        if required_acks == -1 and self.under_min_isr:
            raise NotEnoughReplicas(
                f"the ISR has {len(self.isr)} replicas; min.insync.replicas is {self.min_insync}"
            )
        log = self.log
        if log.append_may_block(len(records)):
            info = await asyncio.to_thread(
                log.append, records, leader_epoch=self.leader_epoch, markers=markers
            )
        else:
            info = log.append(records, leader_epoch=self.leader_epoch, markers=markers)
        self._waiters.appended.notify(self.key)  # followers first: they move the commit point
        self.maybe_advance_high_watermark()
        return info

    # --- the commit point ---------------------------------------------------------------------

    def maybe_advance_high_watermark(self) -> None:
        log = self._log
        if log is None:
            return
        candidate = log.log_end_offset
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            candidate = min(candidate, follower.log_end_offset if follower is not None else -1)
        if candidate > log.high_watermark:
            log.update_high_watermark(candidate)
            self._waiters.hw_moved.notify(self.key)

    def follower_fetched(self, replica: int, fetch_offset: int) -> bool:
        """A follower fetched from ``fetch_offset``: it holds everything before it.

        True when the follower has caught up enough to join the ISR (the caller proposes
        the change to the metadata store)."""
        follower = self.followers.get(replica)
        if follower is None:
            return False
        now = time.monotonic()
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            follower.last_caught_up = now
        elif fetch_offset >= follower.last_fetch_leader_leo >= 0:
            follower.last_caught_up = max(follower.last_caught_up, follower.last_fetch_time)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_leo, follower.last_fetch_time = leo, now
        self.maybe_advance_high_watermark()
        return (
            replica not in self.isr
            and fetch_offset >= self.log.high_watermark
            and fetch_offset >= self._epoch_start()
            and now >= follower.retry_isr_after
        )

    @property
    def high_watermark_lagging(self) -> bool:
        """A new leader's high watermark behind the start of its epoch: until its ISR has
        caught up, the high watermark it knows can be older than the one the previous
        leader exposed, so Kafka answers ListOffsets with OFFSET_NOT_AVAILABLE (retriable)
        instead of an offset that could move a consumer back."""
        return self.log.high_watermark < self._epoch_start()

    def _epoch_start(self) -> int:
        for epoch, start in reversed(self.log.leader_epochs.entries):
            if epoch == self.leader_epoch:
                return start
        return 0

    def lagging_followers(self, now: float, lag_time_s: float) -> set[int]:
        """ISR members that have not caught up to the log end for ``lag_time_s``."""
        return {
            r
            for r in self.isr
            if r != self.broker_id
            and now - self.followers.get(r, FollowerState()).last_caught_up > lag_time_s
        }

    def resigned(self) -> None:
        """This leadership ended: requests waiting on it answer now, not at their timeout."""
        self._waiters.hw_moved.notify(self.key)
        self._waiters.appended.notify(self.key)
