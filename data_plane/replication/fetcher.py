"""Followers pull from leaders: one fetcher thread per leader broker.

When this broker becomes a follower (or the leader epoch moves), it asks the leader where
its last epoch ends (OffsetForLeaderEpoch, KIP-101/279) and truncates there, never to the
high watermark. Then it appends what it fetches with the leader's offsets and epochs. Its
high watermark is the leader's, capped by its own log end.

The replica connection authenticates as the broker-internal principal
(``internal_auth.BROKER_USER``). That principal belongs to no tenant, so it names topics by
topic id: Fetch v15 (``topic_id``; the replica id in ``replica_state``) when the leader
serves it, else Fetch v12 and OffsetForLeaderEpoch with the id as the topic's name.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from data_plane import internal_auth
from data_plane.client.connection import Connection, KafkaClientError
from data_plane.log.manager import TopicPartition
from data_plane.log.partition import PartitionLog
from data_plane.metadata.model import TopicInfo
from data_plane.protocol.errors import ErrorCode
from data_plane.records.batch import InvalidRecordBatch, read_header

logger = logging.getLogger("millrace.broker.replication")
E = ErrorCode
FETCH, OFFSET_FOR_LEADER_EPOCH, API_VERSIONS = 1, 23, 18
# The Fetch versions a fetcher sends: by topic id when the leader serves it (a leader not
# yet upgraded, in a rolling upgrade, gets the id as the topic's name at v12).
FETCH_BY_ID, FETCH_BY_NAME = 15, 12


@dataclass
class FollowedPartition:
    topic: TopicInfo
    index: int
    log: PartitionLog
    leader: int
    leader_epoch: int
    needs_truncation: bool = True
    # Held by the fetcher while it changes the log; ``stopped`` is set under it, so once
    # the manager stops following no fetcher touches the log (it may then be deleted).
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: bool = False


class FetcherHost(Protocol):
    """What a fetcher needs from the replica manager that runs it."""

    broker_id: int
    fetch_wait_ms: int
    internal_password: str

    def followed_from(self, leader_id: int) -> list[tuple[TopicPartition, FollowedPartition]]: ...

    def replicated_in(self, nbytes: int) -> None: ...


class ReplicaFetcher(threading.Thread):
    """Pulls every partition this broker follows from one leader broker."""

    def __init__(self, manager: FetcherHost, leader_id: int, address: tuple[str, int]) -> None:
        super().__init__(name=f"replica-fetcher-{leader_id}", daemon=True)
        self.manager = manager
        self.leader_id = leader_id
        self.address = address
        self._stopped = threading.Event()
        self._conn: Connection | None = None
        self._fetch_version = FETCH_BY_NAME  # the connection's, from the leader's ApiVersions
        self._max_wait_ms = manager.fetch_wait_ms
        self._password = manager.internal_password

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
            self._fetch_version = _fetch_version(conn)
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
        version = self._fetch_version
        request = {
            "replica_id": self.manager.broker_id,  # v12
            "replica_state": {"replica_id": self.manager.broker_id, "replica_epoch": -1},  # v15
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
        answer = conn.request(FETCH, version, request)
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
        by_id = version >= 13
        index: dict[tuple[uuid.UUID | None, int], tuple[TopicPartition, FollowedPartition]]
        index = {(f.topic.topic_id, f.index): (tp, f) for tp, f in followed}
        for t in answer["responses"]:
            topic_id = t["topic_id"] if by_id else _topic_id(t["topic"])
            for p in t["partitions"]:
                found = index.get((topic_id, p["partition_index"]))
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
                    self.manager.replicated_in(len(data))
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
        index: dict[tuple[uuid.UUID | None, int], FollowedPartition]
        index = {(f.topic.topic_id, f.index): f for _, f in pending}
        for t in answer["topics"]:
            topic_id = _topic_id(t["topic"])
            for p in t["partitions"]:
                f = index.get((topic_id, p["partition"]))
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
    """The partitions by topic, each topic named both ways: by id (``topic_id``, Fetch v13+)
    and by the id as its name (``topic``, older versions); a version encodes its own."""
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for _, f in entries:
        topics.setdefault(f.topic.topic_id, []).append(partition(f))
    return [{"topic": str(t), "topic_id": t, "partitions": ps} for t, ps in topics.items()]


def _topic_id(name: str) -> uuid.UUID | None:
    """A topic id the leader sent as a topic's name (None if it is not one)."""
    try:
        return uuid.UUID(name)
    except ValueError:
        return None


def _fetch_version(conn: Connection) -> int:
    """The Fetch version to send the leader: by topic id if it serves it."""
    answer = conn.request(
        API_VERSIONS,
        3,
        {"client_software_name": "millrace-replica", "client_software_version": "1"},
    )
    if answer["error_code"] != E.NONE:
        raise KafkaClientError(
            f"ApiVersions refused: {ErrorCode(answer['error_code']).name}",
            answer["error_code"],
        )
    for api in answer["api_keys"]:
        if api["api_key"] == FETCH:
            if api["min_version"] <= FETCH_BY_ID <= api["max_version"]:
                return FETCH_BY_ID
            return FETCH_BY_NAME
    return FETCH_BY_NAME
