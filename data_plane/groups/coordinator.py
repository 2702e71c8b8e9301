"""The group coordinator: Kafka's classic consumer-group protocol, on the event loop.

One :class:`Group` per (tenant, group id). Every state change happens synchronously on the
event loop (no awaits in the middle of a transition), so no locks are needed; requests
that must wait (JoinGroup until the rebalance completes, SyncGroup until the leader hands
out assignments) park on futures that transitions resolve.

States, as in Kafka::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
      ^                  ^      |                                         |
      |                  |      +--no members left--> Empty               | leader's SyncGroup
      +--last member leaves / expires--------------+                      v
                         +--join, leave, expiry, metadata change------ Stable

Persistence goes through a :class:`GroupStore` (the broker's metadata port): the group's
state, generation, protocol, leader and members with their assignments are written after
every transition (coalesced, in order, off the event loop), and the leader's SyncGroup is
answered only once the assignments are stored. A coordinator that starts (or takes over a
group) rebuilds it from that record: a Stable group comes back Stable, so members keep
heartbeating with their generation; anything mid-rebalance comes back rebalancing.
Committed offsets are not cached here: each commit is one store transaction and each
OffsetFetch reads the store, so offsets reset by the control plane are seen at once.

All timing (session timeouts, the join timer, the initial rebalance delay, KIP-394 pending
member ids, ``state_since_ms``, the store retry backoff) goes through a :class:`Clock`: the
running loop's by default, a :class:`~data_plane.groups.clock.FakeClock` in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass, field
from typing import Any, Protocol

from data_plane.groups.clock import Clock, LoopClock, TimerHandle
from data_plane.groups.model import (
    GroupRecord,
    GroupState,
    GroupType,
    MemberRecord,
    OffsetRecord,
)
from data_plane.groups.persistence import wait_persisted, write_group
from data_plane.protocol.errors import ErrorCode

logger = logging.getLogger("millrace.groups")

E = ErrorCode
S = GroupState


class GroupStore(Protocol):
    def load_group(self, tenant_id: int, group_id: str) -> GroupRecord | None: ...

    def save_group(self, record: GroupRecord) -> None: ...

    def commit_offsets(self, tenant_id: int, group_id: str, offsets: list[OffsetRecord]) -> None:
        """All of one request's offsets in one transaction (creating the group row)."""
        ...

    def fetch_offsets(self, tenant_id: int, group_id: str) -> list[OffsetRecord]: ...

    def delete_offsets(
        self, tenant_id: int, group_id: str, partitions: list[tuple[str, int]]
    ) -> None: ...

    def list_groups(self, tenant_id: int) -> list[GroupRecord]: ...


Call = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class CoordinatorConfig:
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_group_size: int = 1_000  # group.max.size
    max_member_metadata_bytes: int = 1 * 2**20  # all of one member's protocol metadata
    offset_metadata_max_bytes: int = 4_096  # offset.metadata.max.bytes


class GroupError(Exception):
    """A request refused with a protocol error code."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[dict[str, Any]] | None = None
    sync_future: asyncio.Future[bytes] | None = None
    expiry: TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    @property
    def awaiting(self) -> bool:
        return any(f is not None and not f.done() for f in (self.join_future, self.sync_future))


@dataclass
class Group:
    tenant_id: int
    group_id: str
    state: GroupState = S.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, TimerHandle] = field(default_factory=dict)  # MEMBER_ID_REQUIRED
    join_timer: TimerHandle | None = None
    initial_deadline: float | None = None  # set while in the initial rebalance delay
    state_since_ms: int = 0  # wall ms; the coordinator sets it from its clock
    version: int = 0  # bumped by every change to persist
    persisted: int = 0
    writer: asyncio.Task[None] | None = None

    def set_state(self, state: GroupState, now_ms: int) -> None:
        if state != self.state:
            self.state = state
            self.state_since_ms = now_ms

    def record(self) -> GroupRecord:
        return GroupRecord(
            tenant_id=self.tenant_id,
            group_id=self.group_id,
            state=self.state,
            generation=self.generation,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader,
            members=tuple(
                MemberRecord(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    client_id=m.client_id,
                    host=m.host,
                    session_timeout_ms=m.session_timeout_ms,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    metadata=m.metadata(self.protocol_name),
                    assignment=m.assignment,
                )
                for m in self.members.values()
            ),
            state_since_ms=self.state_since_ms,
        )

    @property
    def rebalance_timeout_s(self) -> float:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000

    def all_joined(self) -> bool:
        return not self.pending and all(
            m.join_future is not None and not m.join_future.done() for m in self.members.values()
        )


def _result(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class GroupCoordinator:
    def __init__(
        self,
        store: GroupStore,
        call: Call,
        config: CoordinatorConfig,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.call = call  # runs a blocking store call off the event loop
        self.config = config
        self.clock: Clock = clock if clock is not None else LoopClock()  # all timing
        self.groups: dict[tuple[int, str], Group] = {}
        # Consumer-protocol groups (KIP-848), kept by data_plane.groups.consumer_group: one
        # group id names one group, of either type, so both tables are loaded together.
        self.consumer_groups: dict[tuple[int, str], Any] = {}
        self.restore_consumer: Callable[[GroupRecord], Any] | None = None
        # The consumer coordinator (data_plane.groups.consumer_group), which answers the
        # classic APIs for members of a consumer group (online upgrade); set by it.
        self.modern: Any = None
        self._loading: dict[tuple[int, str], asyncio.Lock] = {}

    # --- loading ------------------------------------------------------------------------

    async def load(self, tenant_id: int, group_id: str) -> Any:
        """The group of either type in memory, else as stored (None: no such group)."""
        key = (tenant_id, group_id)
        found = self.groups.get(key) or self.consumer_groups.get(key)
        if found is not None:
            return found
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            found = self.groups.get(key) or self.consumer_groups.get(key)
            if found is None:
                record = await self.call(self.store.load_group, tenant_id, group_id)
                if record is not None and record.group_type == GroupType.CONSUMER:
                    if self.restore_consumer is None:
                        raise GroupError(
                            E.COORDINATOR_NOT_AVAILABLE, "consumer groups are not served here"
                        )
                    found = self.restore_consumer(record)
                    self.consumer_groups[key] = found
                elif record is not None:
                    found = self._restore(record)
                    self.groups[key] = found
        self._loading.pop(key, None)
        return found

    async def group(self, tenant_id: int, group_id: str, *, create: bool) -> Group | None:
        """The classic group; a consumer-protocol group is none of its business (None), or,
        when ``create`` and it is empty, becomes a classic group."""
        found = await self.load(tenant_id, group_id)
        if isinstance(found, Group):
            return found
        if not create:
            return None
        key = (tenant_id, group_id)
        if found is not None:
            if found.members:
                raise GroupError(
                    E.INCONSISTENT_GROUP_PROTOCOL,
                    f"group {group_id} is a consumer-protocol group with members",
                )
            logger.info("group %s: empty consumer group becomes a classic group", group_id)
            del self.consumer_groups[key]
        group = Group(tenant_id, group_id, state_since_ms=self.clock.wall_ms())
        self.groups[key] = group
        return group

    async def _consumer_group(self, tenant_id: int, group_id: str) -> Any:
        """The group if it is a consumer group with members (whose classic members the
        consumer coordinator answers), else None."""
        found = await self.load(tenant_id, group_id)
        if found is None or isinstance(found, Group) or self.modern is None:
            return None
        return found if found.members else None

    def retire(self, group: Group) -> None:
        """Hand a group over to the consumer protocol (online upgrade): its timers stop,
        and members waiting on JoinGroup or SyncGroup are told to rejoin."""
        self._stop_timers(group, E.REBALANCE_IN_PROGRESS)
        self.groups.pop((group.tenant_id, group.group_id), None)

    def adopt(self, group: Group, reason: str, after: asyncio.Task[None] | None = None) -> None:
        """Take a group back from the consumer protocol (online downgrade): its members
        keep their sessions and rejoin in a rebalance. ``after``: the consumer group's
        store write still running, which this group's first write waits for (the record
        stored last must be this one)."""
        self.groups[(group.tenant_id, group.group_id)] = group
        group.writer = asyncio.get_running_loop().create_task(
            self.write_after(after, self._write(group))
        )
        for m in group.members.values():
            self._touch(group, m)
        self._prepare_rebalance(group, reason)

    def _restore(self, r: GroupRecord) -> Group:
        group = Group(
            r.tenant_id,
            r.group_id,
            generation=r.generation,
            protocol_type=r.protocol_type,
            protocol_name=r.protocol_name,
            leader=r.leader,
            state_since_ms=r.state_since_ms,
        )
        for m in r.members:
            member = Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                r.protocol_type or "",
                [(r.protocol_name or "", m.metadata)],
                assignment=m.assignment,
            )
            group.members[m.member_id] = member
            if m.instance_id:
                group.static[m.instance_id] = m.member_id
            self._touch(group, member)
        if not group.members:
            group.state = S.EMPTY
        elif r.state == S.STABLE:
            group.state = S.STABLE
        else:
            # Mid-rebalance when the record was written: members rejoin.
            group.state = S.STABLE
            self._prepare_rebalance(group, "coordinator restarted during a rebalance")
        logger.info(
            "loaded group %s/%s: %s, generation %s, %s members",
            r.tenant_id,
            r.group_id,
            group.state,
            group.generation,
            len(group.members),
        )
        return group

    # --- persistence --------------------------------------------------------------------

    def _changed(self, group: Group) -> None:
        group.version += 1
        if group.writer is None or group.writer.done():
            group.writer = asyncio.get_running_loop().create_task(self._write(group))

    @staticmethod
    async def write_after(previous: asyncio.Task[None] | None, write: Awaitable[None]) -> None:
        """Run ``write`` (a group's store writer) once ``previous`` (the writer of the
        group object it replaces, for the same group id) is done: when a group changes
        protocol, the record stored last is the new one."""
        if previous is not None and not previous.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(previous)
        await write

    async def _write(self, group: Group) -> None:
        await write_group(
            group, lambda record: self.call(self.store.save_group, record), self._sleep
        )

    async def _persisted(self, group: Group) -> bool:
        """Wait until the group as it is now is stored; False if the store keeps failing."""
        return await wait_persisted(group, lambda _: self._changed(group))

    # --- timers -------------------------------------------------------------------------

    def _set_state(self, group: Group, state: GroupState) -> None:
        group.set_state(state, self.clock.wall_ms())

    async def _sleep(self, delay_s: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.clock.call_later(delay_s, _result, future, None)
        try:
            await future
        finally:
            timer.cancel()

    def _touch(self, group: Group, member: Member) -> None:
        """Restart a member's session timer (any request from it counts as a heartbeat)."""
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = self.clock.call_later(
            member.session_timeout_ms / 1000, self._expire, group, member.member_id
        )

    def _expire(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        if member.awaiting:  # a member waiting on JoinGroup/SyncGroup is alive
            self._touch(group, member)
            return
        logger.info("group %s: member %s session expired", group.group_id, member_id)
        self._remove(group, member, "session timeout")

    def _arm_join_timer(self, group: Group, delay_s: float) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_timer = self.clock.call_later(max(delay_s, 0.0), self._join_timer_fired, group)

    def _join_timer_fired(self, group: Group) -> None:
        group.join_timer = None
        if group.state == S.PREPARING_REBALANCE:
            self._complete_join(group)

    # --- transitions --------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        for m in group.members.values():
            if group.state == S.COMPLETING_REBALANCE:
                m.assignment = b""  # assignments of the aborted generation are void
            _result(m.sync_future, E.REBALANCE_IN_PROGRESS)  # waiting members rejoin
            m.sync_future = None
        initial = group.state == S.EMPTY
        self._set_state(group, S.PREPARING_REBALANCE)
        logger.info(
            "group %s: preparing rebalance (generation %s): %s",
            group.group_id,
            group.generation,
            reason,
        )
        if initial and self.config.initial_rebalance_delay_ms > 0:
            group.initial_deadline = self.clock.now() + group.rebalance_timeout_s
            self._arm_join_timer(group, self.config.initial_rebalance_delay_ms / 1000)
        else:
            group.initial_deadline = None
            self._arm_join_timer(group, group.rebalance_timeout_s)
            if group.all_joined():
                self._complete_join(group)
        self._changed(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != S.PREPARING_REBALANCE:
            return
        if group.initial_deadline is not None:
            # The initial delay: each new member extends it, within the rebalance timeout.
            remaining = group.initial_deadline - self.clock.now()
            self._arm_join_timer(
                group, min(self.config.initial_rebalance_delay_ms / 1000, remaining)
            )
        elif group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_deadline = None
        for pending in group.pending.values():
            pending.cancel()
        group.pending.clear()
        for m in list(group.members.values()):
            if m.join_future is None or m.join_future.done():
                logger.info("group %s: member %s did not rejoin", group.group_id, m.member_id)
                self._drop(group, m)
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader = None
            self._set_state(group, S.EMPTY)
            self._changed(group)
            return
        group.protocol_name = self.choose_protocol(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        self._set_state(group, S.COMPLETING_REBALANCE)
        logger.info(
            "group %s: generation %s with %s members, protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
            group.leader,
        )
        everyone = self._everyone(group)
        for m in group.members.values():
            m.assignment = b""
            _result(m.join_future, self._join_response(group, m, everyone))
            m.join_future = None
            self._touch(group, m)
        self._changed(group)

    def _join_response(
        self, group: Group, member: Member, everyone: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        leader = member.member_id == group.leader
        return {
            "error_code": E.NONE,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader or "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": (everyone or []) if leader else [],
        }

    @staticmethod
    def choose_protocol(group: Group) -> str:
        """Each member votes for its most preferred protocol that every member supports."""
        members = list(group.members.values())
        common = set(members[0].protocol_names)
        for m in members[1:]:
            common &= set(m.protocol_names)
        votes: dict[str, int] = {}
        for m in members:
            choice = next(name for name in m.protocol_names if name in common)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties go to the first member's preference order, deterministically.
        order = {name: i for i, name in enumerate(members[0].protocol_names)}
        return max(votes, key=lambda name: (votes[name], -order[name]))

    def _drop(self, group: Group, member: Member) -> None:
        """Forget a member without starting a rebalance (the caller decides)."""
        if member.expiry is not None:
            member.expiry.cancel()
        _result(member.join_future, {"error_code": E.UNKNOWN_MEMBER_ID})
        _result(member.sync_future, E.REBALANCE_IN_PROGRESS)
        group.members.pop(member.member_id, None)
        if member.instance_id and group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]

    def _remove(self, group: Group, member: Member, reason: str) -> None:
        self._drop(group, member)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left ({reason})")
        elif group.state == S.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
            self._changed(group)

    def _protocols_compatible(self, group: Group, protocol_type: str, names: list[str]) -> bool:
        if not names or not protocol_type:
            return False
        if not group.members:
            return True
        if protocol_type != group.protocol_type:
            return False
        common = set(names)
        for m in group.members.values():
            common &= set(m.protocol_names)
        return bool(common)

    # --- JoinGroup ----------------------------------------------------------------------

    async def join(
        self,
        tenant_id: int,
        group_id: str,
        *,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        resolve: Callable[..., Any] | None = None,
    ) -> dict[str, Any]:
        """``resolve``: what a subscription names in the tenant (the consumer coordinator's
        ``Resolver``), for a member joining a consumer group with the classic protocol."""
        if not group_id:
            raise GroupError(E.INVALID_GROUP_ID, "group id must not be empty")
        c = self.config
        if not c.min_session_timeout_ms <= session_timeout_ms <= c.max_session_timeout_ms:
            raise GroupError(
                E.INVALID_SESSION_TIMEOUT,
                f"session timeout must be within [{c.min_session_timeout_ms}, "
                f"{c.max_session_timeout_ms}] ms",
            )
        if sum(len(m) for _, m in protocols) > c.max_member_metadata_bytes:
            raise GroupError(
                E.INVALID_REQUEST,
                f"member metadata over {c.max_member_metadata_bytes} bytes",
            )
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: Kafka uses the session timeout
            rebalance_timeout_ms = session_timeout_ms
        modern = await self._consumer_group(tenant_id, group_id)
        if modern is not None and resolve is not None:
            answer: dict[str, Any] = await self.modern.classic_join(
                modern,
                member_id=member_id,
                instance_id=instance_id,
                client_id=client_id,
                host=host,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                require_known_member_id=require_known_member_id,
                resolve=resolve,
            )
            return answer
        group = await self.group(tenant_id, group_id, create=True)
        assert group is not None
        if group.state == S.DEAD:
            raise GroupError(E.COORDINATOR_NOT_AVAILABLE, "group is being deleted")
        names = [name for name, _ in protocols]
        if not self._protocols_compatible(group, protocol_type, names):
            raise GroupError(
                E.INCONSISTENT_GROUP_PROTOCOL,
                "protocol type or protocols do not match the group's members",
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        details = dict(
            client_id=client_id,
            host=host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
        )
        if not member_id:
            self._join_unknown(group, instance_id, require_known_member_id, future, details)
        else:
            self._join_known(group, member_id, instance_id, future, details)
        return await future

    def _check_size(self, group: Group) -> None:
        if len(group.members) >= self.config.max_group_size:
            raise GroupError(E.GROUP_MAX_SIZE_REACHED, "the group is full")

    def _new_member(
        self, group: Group, member_id: str, instance_id: str | None, d: dict[str, Any]
    ) -> Member:
        member = Member(member_id, instance_id, **d)
        group.members[member_id] = member
        if instance_id:
            group.static[instance_id] = member_id
        if not group.protocol_type:
            group.protocol_type = d["protocol_type"]
        return member

    def _join_unknown(
        self,
        group: Group,
        instance_id: str | None,
        require_known: bool,
        future: asyncio.Future[dict[str, Any]],
        d: dict[str, Any],
    ) -> None:
        member_id = f"{d['client_id'] or 'member'}-{uuid.uuid4()}"
        if instance_id and instance_id in group.static:
            # A static member restarted: it takes over its old identity under a new id.
            old = group.members[group.static[instance_id]]
            _result(old.join_future, {"error_code": E.FENCED_INSTANCE_ID})
            _result(old.sync_future, E.FENCED_INSTANCE_ID)
            if old.expiry is not None:
                old.expiry.cancel()
            del group.members[old.member_id]
            if group.leader == old.member_id:
                group.leader = member_id
            unchanged = old.protocols == d["protocols"]
            member = self._new_member(group, member_id, instance_id, d)
            member.assignment = old.assignment
            self._touch(group, member)
            if group.state == S.STABLE and unchanged:
                # Nothing to rebalance: answer with the current generation; its SyncGroup
                # returns the assignment it had.
                _result(future, self._join_response(group, member, self._everyone(group)))
                self._changed(group)
                return
            member.join_future = future
            if group.state == S.PREPARING_REBALANCE:
                self._maybe_complete_join(group)
            else:
                self._prepare_rebalance(group, f"static member {instance_id} rejoined")
            return
        self._check_size(group)
        if require_known and not instance_id:
            # KIP-394: hand out the id first; the member rejoins with it.
            group.pending[member_id] = self.clock.call_later(
                d["session_timeout_ms"] / 1000, self._expire_pending, group, member_id
            )
            _result(
                future,
                {
                    "error_code": E.MEMBER_ID_REQUIRED,
                    "generation_id": -1,
                    "protocol_name": None,
                    "leader": "",
                    "member_id": member_id,
                    "members": [],
                },
            )
            return
        member = self._new_member(group, member_id, instance_id, d)
        member.join_future = future
        self._touch(group, member)
        self._rebalance_for_join(group, f"member {member_id} joined")

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending.pop(member_id, None) is not None:
            self._maybe_complete_join(group)

    def _rebalance_for_join(self, group: Group, reason: str) -> None:
        if group.state == S.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, reason)

    def _everyone(self, group: Group) -> list[dict[str, Any]]:
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "metadata": m.metadata(group.protocol_name),
            }
            for m in group.members.values()
        ]

    def _join_known(
        self,
        group: Group,
        member_id: str,
        instance_id: str | None,
        future: asyncio.Future[dict[str, Any]],
        d: dict[str, Any],
    ) -> None:
        if member_id in group.pending:
            group.pending.pop(member_id).cancel()
            self._check_size(group)
            member = self._new_member(group, member_id, instance_id, d)
            member.join_future = future
            self._touch(group, member)
            self._rebalance_for_join(group, f"member {member_id} joined")
            return
        self._check_static(group, member_id, instance_id)
        known = group.members.get(member_id)
        if known is None:
            raise GroupError(E.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        member = known
        changed = member.protocols != d["protocols"]
        member.client_id, member.host = d["client_id"], d["host"]
        member.session_timeout_ms = d["session_timeout_ms"]
        member.rebalance_timeout_ms = d["rebalance_timeout_ms"]
        member.protocols = d["protocols"]
        self._touch(group, member)
        if group.state == S.PREPARING_REBALANCE:
            _result(member.join_future, {"error_code": E.REBALANCE_IN_PROGRESS})
            member.join_future = future
            self._maybe_complete_join(group)
            return
        if (
            group.state in (S.COMPLETING_REBALANCE, S.STABLE)
            and not changed
            and member.member_id != group.leader
        ):
            # A retry of a join whose answer got lost: the same answer again.
            _result(future, self._join_response(group, member, None))
            return
        member.join_future = future
        self._prepare_rebalance(
            group, f"member {member_id} rejoined" + (" with new metadata" if changed else "")
        )

    def _check_static(self, group: Group, member_id: str, instance_id: str | None) -> None:
        if instance_id is None:
            return
        known = group.static.get(instance_id)
        if known is not None and known != member_id:
            raise GroupError(E.FENCED_INSTANCE_ID, f"instance {instance_id} is now another member")

    def _member(
        self, group: Group | None, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group, Member]:
        """The checks shared by SyncGroup, Heartbeat and OffsetCommit, in Kafka's order."""
        if group is None or group.state == S.DEAD:
            raise GroupError(E.UNKNOWN_MEMBER_ID, "unknown group")
        self._check_static(group, member_id, instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(E.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        if generation != group.generation:
            raise GroupError(
                E.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's {group.generation}",
            )
        return group, member

    # --- SyncGroup ----------------------------------------------------------------------

    async def sync(
        self,
        tenant_id: int,
        group_id: str,
        *,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> tuple[bytes, str | None, str | None]:
        modern = await self._consumer_group(tenant_id, group_id)
        if modern is not None:
            synced: tuple[bytes, str | None, str | None] = await self.modern.classic_sync(
                modern,
                member_id=member_id,
                instance_id=instance_id,
                generation=generation,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
            )
            return synced
        found = await self.group(tenant_id, group_id, create=False)
        group, member = self._member(found, member_id, instance_id, generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            raise GroupError(E.INCONSISTENT_GROUP_PROTOCOL, "protocol does not match the group")
        self._touch(group, member)
        if group.state == S.PREPARING_REBALANCE:
            raise GroupError(E.REBALANCE_IN_PROGRESS)
        if group.state == S.STABLE:
            return member.assignment, group.protocol_type, group.protocol_name
        if group.state != S.COMPLETING_REBALANCE:
            raise GroupError(E.UNKNOWN_MEMBER_ID)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        _result(member.sync_future, E.REBALANCE_IN_PROGRESS)
        member.sync_future = future
        if member_id == group.leader:
            given = dict(assignments)
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            await self._finish_sync(group, generation)
        outcome = await future
        if isinstance(outcome, ErrorCode):
            raise GroupError(outcome)
        return outcome, group.protocol_type, group.protocol_name

    async def _finish_sync(self, group: Group, generation: int) -> None:
        """Store the leader's assignments, then hand them out (Kafka's order)."""
        self._set_state(group, S.STABLE)
        self._changed(group)
        stored = await self._persisted(group)
        if group.generation != generation or group.state != S.STABLE:
            return  # a rebalance started meanwhile; waiters were answered by it
        if not stored:
            for m in group.members.values():
                m.assignment = b""
            self._set_state(group, S.COMPLETING_REBALANCE)
            for m in group.members.values():
                _result(m.sync_future, E.COORDINATOR_NOT_AVAILABLE)
            self._prepare_rebalance(group, "storing the assignment failed")
            return
        for m in group.members.values():
            _result(m.sync_future, m.assignment)
            m.sync_future = None

    # --- Heartbeat / LeaveGroup ------------------------------------------------------------

    async def heartbeat(
        self,
        tenant_id: int,
        group_id: str,
        *,
        member_id: str,
        instance_id: str | None,
        generation: int,
    ) -> None:
        modern = await self._consumer_group(tenant_id, group_id)
        if modern is not None:
            await self.modern.classic_heartbeat(
                modern, member_id=member_id, instance_id=instance_id, generation=generation
            )
            return
        found = await self.group(tenant_id, group_id, create=False)
        group, member = self._member(found, member_id, instance_id, generation)
        self._touch(group, member)
        if group.state == S.PREPARING_REBALANCE:
            raise GroupError(E.REBALANCE_IN_PROGRESS)

    async def leave(
        self, tenant_id: int, group_id: str, members: list[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        modern = await self._consumer_group(tenant_id, group_id)
        if modern is not None:
            codes: list[ErrorCode] = self.modern.classic_leave(modern, members)
            return codes
        group = await self.group(tenant_id, group_id, create=False)
        out = []
        for member_id, instance_id in members:
            if group is None or group.state == S.DEAD:
                out.append(E.UNKNOWN_MEMBER_ID)
                continue
            if instance_id is not None:
                known = group.static.get(instance_id)
                if known is None:
                    out.append(E.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and known != member_id:
                    out.append(E.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending:
                group.pending.pop(member_id).cancel()
                self._maybe_complete_join(group)
                out.append(E.NONE)
                continue
            member = group.members.get(member_id)
            if member is None:
                out.append(E.UNKNOWN_MEMBER_ID)
                continue
            logger.info("group %s: member %s left", group.group_id, member_id)
            self._remove(group, member, "left the group")
            out.append(E.NONE)
        return out

    # --- offsets --------------------------------------------------------------------------

    async def commit(
        self,
        tenant_id: int,
        group_id: str,
        *,
        member_id: str,
        instance_id: str | None,
        generation: int,
        offsets: list[OffsetRecord],
    ) -> None:
        """Validate the committer, then store every offset in one transaction."""
        if not group_id:
            raise GroupError(E.INVALID_GROUP_ID, "group id must not be empty")
        if generation < 0 and not member_id:
            # A commit from outside the group protocol (assign(), admin tools): only while
            # the group has no members, as Kafka allows.
            group = await self.group(tenant_id, group_id, create=True)
            assert group is not None
            if group.members or group.state not in (S.EMPTY, S.DEAD):
                raise GroupError(E.UNKNOWN_MEMBER_ID, "the group has active members")
        else:
            found = await self.group(tenant_id, group_id, create=False)
            group, member = self._member(found, member_id, instance_id, generation)
            if group.state == S.COMPLETING_REBALANCE:
                raise GroupError(E.REBALANCE_IN_PROGRESS)
            self._touch(group, member)
        if offsets:
            await self.call(self.store.commit_offsets, tenant_id, group_id, offsets)

    def check_fetch(self, group: Group | None, member_id: str, generation: int) -> None:
        """OffsetFetch v9+ naming a member of a classic group: it must be one, of this
        generation (what Kafka checks; a group unknown here has nothing to check)."""
        if group is None:
            return
        if member_id not in group.members:
            raise GroupError(E.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        if generation != group.generation:
            raise GroupError(
                E.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's {group.generation}",
            )

    async def fetch_offsets(self, tenant_id: int, group_id: str) -> list[OffsetRecord]:
        return list(await self.call(self.store.fetch_offsets, tenant_id, group_id))

    async def delete_offsets(
        self, tenant_id: int, group_id: str, partitions: list[tuple[str, int]]
    ) -> None:
        await self.call(self.store.delete_offsets, tenant_id, group_id, partitions)

    # --- describe / list / delete -----------------------------------------------------------

    async def describe(self, tenant_id: int, group_id: str) -> Group | None:
        return await self.group(tenant_id, group_id, create=False)

    async def list_groups(self, tenant_id: int) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type) of every group of the tenant."""
        stored = await self.call(self.store.list_groups, tenant_id)
        out = {
            r.group_id: (r.group_id, r.protocol_type or "", str(r.state), str(r.group_type))
            for r in stored
        }
        for (tid, gid), g in self.groups.items():
            if tid == tenant_id and g.state != S.DEAD:
                out[gid] = (gid, g.protocol_type or "", str(g.state), str(GroupType.CLASSIC))
        for (tid, gid), c in self.consumer_groups.items():
            if tid == tenant_id:
                out[gid] = (gid, "consumer", str(c.state), str(GroupType.CONSUMER))
        return sorted(out.values())

    async def begin_delete(self, tenant_id: int, group_id: str) -> Group | None:
        """Mark an empty group Dead before the store deletes it; refuse a non-empty one."""
        found = await self.load(tenant_id, group_id)
        if found is not None and not isinstance(found, Group):
            if found.members:
                raise GroupError(E.NON_EMPTY_GROUP, "the group has active members")
            self.consumer_groups.pop((tenant_id, group_id), None)
            return None
        group = found
        if group is None:
            return None
        if group.members or group.state not in (S.EMPTY, S.DEAD):
            raise GroupError(E.NON_EMPTY_GROUP, "the group has active members")
        self._set_state(group, S.DEAD)
        return group

    def finish_delete(self, group: Group, deleted: bool) -> None:
        if deleted:
            self.groups.pop((group.tenant_id, group.group_id), None)
        elif group.state == S.DEAD:
            self._set_state(group, S.EMPTY)

    def close(self) -> None:
        """Stop every timer (broker shutdown); members reconnect to whoever coordinates next."""
        for group in self.groups.values():
            self._stop_timers(group)

    @staticmethod
    def _stop_timers(group: Group, error: ErrorCode = E.NOT_COORDINATOR) -> None:
        """Stop the group's timers; members waiting on JoinGroup or SyncGroup get ``error``."""
        if group.join_timer is not None:
            group.join_timer.cancel()
        for handle in group.pending.values():
            handle.cancel()
        for m in group.members.values():
            if m.expiry is not None:
                m.expiry.cancel()
            _result(m.join_future, {"error_code": error})
            _result(m.sync_future, error)

    def forget_tenants(self, keep: Container[int]) -> int:
        """Drop the groups (of both types) of tenants not in ``keep``: a deleted tenant's
        groups leave the broker's memory with it. Returns how many were dropped."""
        dropped = 0
        for key, group in list(self.groups.items()):
            if key[0] not in keep:
                self._stop_timers(group)
                del self.groups[key]
                dropped += 1
        for key, consumer in list(self.consumer_groups.items()):
            if key[0] not in keep:
                for member in consumer.members.values():
                    for timer in (member.expiry, member.revocation_timer):
                        if timer is not None:
                            timer.cancel()
                del self.consumer_groups[key]
                dropped += 1
        return dropped

    async def flush(self) -> None:
        """Wait for pending group writes (graceful shutdown)."""
        for group in list(self.groups.values()):
            if group.writer is not None and not group.writer.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(group.writer), 5)
