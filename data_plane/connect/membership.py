"""A member of a classic Kafka group with any protocol type, on the project's own client.

Distributed Connect workers form a group with protocol type ``connect`` on the group
coordinator (JoinGroup, SyncGroup, Heartbeat, LeaveGroup); the coordinator does not look
into the protocol, it only elects a leader and relays the leader's assignment, so the
worker protocol (metadata and assignments) is the workers' own business
(:mod:`data_plane.connect.distributed`).

:class:`GroupMember` is blocking and used by one thread (the herder's). Errors that
mean "join again" raise :class:`RebalanceNeeded`; a lost coordinator is found again on
the next request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from data_plane.client.connection import Connection, KafkaClientError
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
_REJOIN = {
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
}
_COORDINATOR_MOVED = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


class RebalanceNeeded(Exception):
    """The group is rebalancing, or this member's generation is over: join again."""


class GroupError(Exception):
    """The group refused this member for good (e.g. not authorized)."""


@dataclass(frozen=True)
class JoinResult:
    generation: int
    member_id: str
    leader_id: str
    protocol: str
    members: list[tuple[str, bytes]]  # the leader gets every member's metadata

    @property
    def leader(self) -> bool:
        return self.member_id == self.leader_id


@dataclass(frozen=True)
class Credentials:
    mechanism: str
    username: str
    password: str


class GroupMember:
    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        group_id: str,
        protocol_type: str,
        credentials: Credentials | None,
        *,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        client_id: str = "millrace-connect",
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.group_id = group_id
        self.protocol_type = protocol_type
        self.credentials = credentials
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.client_id = client_id
        self.member_id = ""
        self.generation = -1
        self._coordinator: Connection | None = None

    # --- connections ------------------------------------------------------------------------

    def _connect(self, host: str, port: int) -> Connection:
        conn = Connection(
            host, port, client_id=self.client_id, timeout=self.rebalance_timeout_ms / 1000 + 10
        )
        if self.credentials is not None:
            c = self.credentials
            conn.authenticate(c.mechanism, c.username, c.password)
        return conn

    def _find_coordinator(self) -> Connection:
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                conn = self._connect(host, port)
            except KafkaClientError as exc:
                last = exc
                continue
            try:
                body: bodies.FindCoordinatorRequest = {"key": self.group_id, "key_type": 0}
                answer = conn.request(FIND_COORDINATOR, 3, body, bodies.FindCoordinatorResponse)
            finally:
                conn.close()
            code = answer.get("error_code", 0)
            if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                raise GroupError(f"not authorized for group {self.group_id!r}")
            if code != ErrorCode.NONE:
                last = KafkaClientError(f"FindCoordinator: {ErrorCode(code).name}", code)
                continue
            return self._connect(answer["host"], answer["port"])
        raise KafkaClientError(f"no coordinator for group {self.group_id!r}: {last}")

    def _request(self, api: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        if self._coordinator is None:
            self._coordinator = self._find_coordinator()
        try:
            result = self._coordinator.request(api, version, body)
        except KafkaClientError:
            self.close_connection()
            raise
        code = result.get("error_code", 0)
        if code in _COORDINATOR_MOVED:
            self.close_connection()
            raise RebalanceNeeded(f"coordinator moved ({ErrorCode(code).name})")
        return result

    def close_connection(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None

    # --- the protocol -----------------------------------------------------------------------

    def join(self, protocols: Sequence[tuple[str, bytes]], reason: str | None = None) -> JoinResult:
        """JoinGroup until answered (a first join learns its member id first)."""
        while True:
            body: bodies.JoinGroupRequest = {
                "group_id": self.group_id,
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "member_id": self.member_id,
                "group_instance_id": None,
                "protocol_type": self.protocol_type,
                "protocols": [{"name": n, "metadata": m} for n, m in protocols],
                "reason": reason,
            }
            answer = self._request(JOIN_GROUP, 8, body)
            code = answer["error_code"]
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = answer["member_id"]
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if code != ErrorCode.NONE:
                raise GroupError(f"JoinGroup {self.group_id!r}: {ErrorCode(code).name}")
            self.member_id = answer["member_id"]
            self.generation = answer["generation_id"]
            return JoinResult(
                generation=answer["generation_id"],
                member_id=answer["member_id"],
                leader_id=answer["leader"],
                protocol=answer.get("protocol_name") or "",
                members=[(m["member_id"], bytes(m["metadata"])) for m in answer["members"]],
            )

    def sync(self, protocol: str, assignments: dict[str, bytes]) -> bytes:
        """SyncGroup: the leader sends everyone's assignment; each gets its own."""
        body: bodies.SyncGroupRequest = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": None,
            "protocol_type": self.protocol_type,
            "protocol_name": protocol,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()],
        }
        answer = self._request(SYNC_GROUP, 5, body)
        self._check(answer["error_code"], "SyncGroup")
        return bytes(answer["assignment"])

    def heartbeat(self) -> None:
        body: bodies.HeartbeatRequest = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": None,
        }
        answer = self._request(HEARTBEAT, 4, body)
        self._check(answer["error_code"], "Heartbeat")

    def leave(self, reason: str = "the worker is stopping") -> None:
        if not self.member_id:
            return
        body: bodies.LeaveGroupRequest = {
            "group_id": self.group_id,
            "members": [{"member_id": self.member_id, "group_instance_id": None, "reason": reason}],
        }
        try:
            self._request(LEAVE_GROUP, 5, body)
        except (KafkaClientError, RebalanceNeeded) as exc:
            logger.info("leaving group %s: %s", self.group_id, exc)
        finally:
            self.member_id, self.generation = "", -1
            self.close_connection()

    def _check(self, code: int, what: str) -> None:
        if code == ErrorCode.NONE:
            return
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code in _REJOIN:
            raise RebalanceNeeded(f"{what}: {ErrorCode(code).name}")
        raise GroupError(f"{what} {self.group_id!r}: {ErrorCode(code).name}")
