"""The group coordinator's timing, driven by a fake clock: in-process, no broker, no database.

Each test runs the coordinator on an asyncio loop with a :class:`FakeClock` (time moves
only through ``advance``), an in-memory :class:`GroupStore` and a ``call`` that runs the
store function directly. Clients are played by hand: a JoinGroup or SyncGroup is a task
that stays parked until a transition answers it, a heartbeat is one call. Nothing sleeps
in real time; ``settle()`` only lets ready tasks run.

The semantics follow Kafka's classic GroupCoordinator (KIP-345 static members, KIP-394
member ids handed out before joining).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from data_plane.groups.clock import FakeClock
from data_plane.groups.coordinator import (
    CoordinatorConfig,
    Group,
    GroupCoordinator,
    GroupError,
    GroupStore,
)
from data_plane.groups.model import GroupRecord, GroupState, MemberRecord, OffsetRecord
from data_plane.protocol.errors import ErrorCode

E = ErrorCode
S = GroupState
TENANT = 7
GROUP = "orders"
START = 500.0  # the fake monotonic clock starts here, so nothing assumes 0
WALL0 = 1_700_000_000_000  # and the wall clock here (ms)
V1 = (("range", b"v1"), ("roundrobin", b"v1"))
V2 = (("range", b"v2"), ("roundrobin", b"v2"))


class MemoryGroupStore:
    """The coordinator's GroupStore port in dicts; every saved record is kept in order."""

    def __init__(self) -> None:
        self.groups: dict[tuple[int, str], GroupRecord] = {}
        self.offsets: dict[tuple[int, str], dict[tuple[str, int], OffsetRecord]] = {}
        self.saved: list[GroupRecord] = []
        self.fail_saves = 0  # the next N save_group calls raise

    def load_group(self, tenant_id: int, group_id: str) -> GroupRecord | None:
        return self.groups.get((tenant_id, group_id))

    def save_group(self, record: GroupRecord) -> None:
        if self.fail_saves:
            self.fail_saves -= 1
            raise OSError("store unavailable")
        self.groups[(record.tenant_id, record.group_id)] = record
        self.saved.append(record)

    def commit_offsets(self, tenant_id: int, group_id: str, offsets: list[OffsetRecord]) -> None:
        stored = self.offsets.setdefault((tenant_id, group_id), {})
        for o in offsets:
            stored[(o.topic, o.partition)] = o

    def fetch_offsets(self, tenant_id: int, group_id: str) -> list[OffsetRecord]:
        return list(self.offsets.get((tenant_id, group_id), {}).values())

    def delete_offsets(
        self, tenant_id: int, group_id: str, partitions: list[tuple[str, int]]
    ) -> None:
        stored = self.offsets.get((tenant_id, group_id), {})
        for tp in partitions:
            stored.pop(tp, None)

    def list_groups(self, tenant_id: int) -> list[GroupRecord]:
        return [r for (t, _), r in self.groups.items() if t == tenant_id]


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


async def settle() -> None:
    """Let every ready task run (parked requests wake, store writes finish); no real time."""
    for _ in range(20):
        await asyncio.sleep(0)


_requests: list[asyncio.Task[Any]] = []  # every request task of the running scenario


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        try:
            await scenario()
        finally:
            # Passed or failed: collect what each request ended with and cancel those still
            # parked, so nothing is logged after the test as "exception was never
            # retrieved" (logging from garbage collection also upsets pytest's reporting).
            for task in _requests:
                task.cancel()
            await asyncio.gather(*_requests, return_exceptions=True)
            _requests.clear()

    asyncio.run(main())


def request(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(coro)
    _requests.append(task)
    return task


def outcome(task: asyncio.Task[Any]) -> Any:
    """A finished request's answer: its result, or the error code it was refused with."""
    assert task.done(), "the request is still parked"
    error = task.exception()
    if isinstance(error, GroupError):
        return error.code
    if error is not None:
        raise error
    return task.result()


@dataclass
class Joined:
    member_id: str
    generation: int
    leader: str
    members: list[str]  # what the leader was told; [] for followers


class Harness:
    def __init__(self, *, initial_delay_ms: int = 3_000, store: MemoryGroupStore | None = None):
        self.clock = FakeClock(start=START, wall_start_ms=WALL0)
        self.store = store or MemoryGroupStore()
        port: GroupStore = self.store
        self.coordinator = GroupCoordinator(
            port, call, CoordinatorConfig(initial_rebalance_delay_ms=initial_delay_ms), self.clock
        )

    @property
    def t(self) -> float:
        """Seconds since the test began."""
        return self.clock.now() - START

    @property
    def group(self) -> Group:
        return self.coordinator.groups[(TENANT, GROUP)]

    def since(self) -> int:
        """When the group entered its state, in ms since the test began."""
        return self.group.state_since_ms - WALL0

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await settle()

    async def join(
        self,
        member_id: str = "",
        *,
        instance_id: str | None = None,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        protocols: Sequence[tuple[str, bytes]] = V1,
        require_known: bool = False,
    ) -> asyncio.Task[dict[str, Any]]:
        task = request(
            self.coordinator.join(
                TENANT,
                GROUP,
                member_id=member_id,
                instance_id=instance_id,
                client_id="client",
                host="/127.0.0.1",
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                protocol_type="consumer",
                protocols=list(protocols),
                require_known_member_id=require_known,
            )
        )
        await settle()
        return task

    async def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance_id: str | None = None,
    ) -> asyncio.Task[tuple[bytes, str | None, str | None]]:
        task = request(
            self.coordinator.sync(
                TENANT,
                GROUP,
                member_id=member_id,
                instance_id=instance_id,
                generation=generation,
                protocol_type="consumer",
                protocol_name=None,
                assignments=list((assignments or {}).items()),
            )
        )
        await settle()
        return task

    async def heartbeat(
        self, member_id: str, generation: int, instance_id: str | None = None
    ) -> ErrorCode:
        try:
            await self.coordinator.heartbeat(
                TENANT, GROUP, member_id=member_id, instance_id=instance_id, generation=generation
            )
        except GroupError as e:
            return e.code
        return E.NONE

    async def form(self, n: int, **join: Any) -> list[Joined]:
        """n members join together (one initial delay) and sync: a Stable group."""
        tasks = [await self.join(**join) for _ in range(n)]
        await self.advance(self.coordinator.config.initial_rebalance_delay_ms / 1000)
        joined = [joined_as(outcome(task)) for task in tasks]
        assert self.group.state == S.COMPLETING_REBALANCE
        await self.sync_all(joined)
        return joined

    async def sync_all(self, joined: list[Joined]) -> None:
        leader = next(j for j in joined if j.member_id == j.leader)
        plan = {m: m.encode() for m in leader.members}
        syncs = [
            await self.sync(j.member_id, j.generation, plan if j is leader else None)
            for j in joined
        ]
        for j, task in zip(joined, syncs, strict=True):
            assert outcome(task)[0] == j.member_id.encode()
        assert self.group.state == S.STABLE


def joined_as(response: Any) -> Joined:
    assert isinstance(response, dict) and response["error_code"] == E.NONE, response
    return Joined(
        response["member_id"],
        response["generation_id"],
        response["leader"],
        [m["member_id"] for m in response["members"]],
    )


async def heartbeat_every_second(h: Harness, seconds: int, *alive: Joined) -> list[ErrorCode]:
    """Advance ``seconds`` one second at a time, heartbeating ``alive`` after each step."""
    answers = []
    for _ in range(seconds):
        await h.advance(1)
        answers += [await h.heartbeat(j.member_id, j.generation) for j in alive]
    return answers


# --- session timeouts ---------------------------------------------------------------------


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout():
    async def scenario() -> None:
        h = Harness()
        a, b = await h.form(2, session_ms=10_000)
        assert h.t == 3  # both last heard from at their SyncGroup

        # b goes silent; a keeps heartbeating. Nothing happens for 9 s...
        assert set(await heartbeat_every_second(h, 9, a)) == {E.NONE}
        assert h.group.state == S.STABLE and set(h.group.members) == {a.member_id, b.member_id}
        await h.advance(0.999)
        assert b.member_id in h.group.members

        # ...and at 10 s after its last request b is gone and the group rebalances.
        await h.advance(0.001)
        assert b.member_id not in h.group.members
        assert h.group.state == S.PREPARING_REBALANCE and h.since() == 13_000
        assert await h.heartbeat(a.member_id, 1) == E.REBALANCE_IN_PROGRESS

        # a rejoins; as the only member left it completes the rebalance at once.
        a2 = joined_as(outcome(await h.join(a.member_id)))
        assert (a2.generation, a2.leader, a2.members) == (2, a.member_id, [a.member_id])
        assert await h.heartbeat(b.member_id, 1) == E.UNKNOWN_MEMBER_ID

    run(scenario)


def test_a_member_waiting_in_sync_group_is_kept_alive_without_heartbeats():
    async def scenario() -> None:
        h = Harness()
        tasks = [await h.join(session_ms=10_000) for _ in range(2)]
        await h.advance(3)
        leader, follower = sorted(
            (joined_as(outcome(t)) for t in tasks), key=lambda j: j.member_id != j.leader
        )
        waiting = await h.sync(follower.member_id, 1)
        # The leader takes 15 s to assign (heartbeating meanwhile); the follower only waits.
        assert set(await heartbeat_every_second(h, 15, leader)) == {E.NONE}
        assert not waiting.done() and follower.member_id in h.group.members
        plan = {leader.member_id: b"p0", follower.member_id: b"p1"}
        assert outcome(await h.sync(leader.member_id, 1, plan))[0] == b"p0"
        assert outcome(waiting)[0] == b"p1"

    run(scenario)


def test_a_leader_that_never_syncs_expires_and_the_waiting_followers_rejoin():
    async def scenario() -> None:
        h = Harness()
        tasks = [await h.join(session_ms=10_000) for _ in range(2)]
        await h.advance(3)
        leader, follower = sorted(
            (joined_as(outcome(t)) for t in tasks), key=lambda j: j.member_id != j.leader
        )
        await h.advance(1)
        waiting = await h.sync(follower.member_id, 1)
        await h.advance(8.999)
        assert not waiting.done() and h.group.state == S.COMPLETING_REBALANCE

        await h.advance(0.001)  # 10 s since the leader's JoinGroup was answered
        assert leader.member_id not in h.group.members
        assert outcome(waiting) == E.REBALANCE_IN_PROGRESS
        assert h.group.state == S.PREPARING_REBALANCE

        again = joined_as(outcome(await h.join(follower.member_id)))
        assert (again.generation, again.leader) == (2, follower.member_id)

    run(scenario)


# --- the join timer -------------------------------------------------------------------


def test_the_initial_rebalance_delay_holds_even_a_complete_group():
    async def scenario() -> None:
        h = Harness(initial_delay_ms=3_000)
        first = await h.join()
        assert h.group.state == S.PREPARING_REBALANCE
        await h.advance(2.999)
        assert not first.done()
        await h.advance(0.001)
        assert joined_as(outcome(first)).generation == 1
        assert h.group.state == S.COMPLETING_REBALANCE and h.since() == 3_000

    run(scenario)


def test_the_initial_rebalance_delay_waits_for_late_joiners_within_the_rebalance_timeout():
    async def scenario() -> None:
        h = Harness(initial_delay_ms=3_000)
        # A joiner every 2 s (the last two closer): each one extends the delay, but never
        # past the first member's rebalance timeout of 10 s.
        tasks = []
        for at in (0, 2, 4, 6, 8, 9.5):
            await h.advance(at - h.t)
            assert not any(t.done() for t in tasks), f"answered before {at} s"
            tasks.append(await h.join(session_ms=10_000, rebalance_ms=10_000))
        await h.advance(10 - h.t - 0.001)
        assert not any(t.done() for t in tasks)

        await h.advance(0.001)
        joined = [joined_as(outcome(t)) for t in tasks]
        assert {j.generation for j in joined} == {1}
        leader = next(j for j in joined if j.member_id == j.leader)
        assert sorted(leader.members) == sorted(j.member_id for j in joined)
        assert h.group.state == S.COMPLETING_REBALANCE and h.since() == 10_000

    run(scenario)


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped():
    async def scenario() -> None:
        h = Harness()
        a, b = await h.form(2, session_ms=10_000, rebalance_ms=5_000)
        # a rejoins with new metadata: a rebalance; b heartbeats (so its session never
        # expires) but does not rejoin.
        rejoin = await h.join(a.member_id, session_ms=10_000, rebalance_ms=5_000, protocols=V2)
        assert h.group.state == S.PREPARING_REBALANCE
        answers = await heartbeat_every_second(h, 4, b)
        assert answers == [E.REBALANCE_IN_PROGRESS] * 4
        await h.advance(0.999)
        assert not rejoin.done() and b.member_id in h.group.members

        await h.advance(0.001)  # the rebalance timeout
        a2 = joined_as(outcome(rejoin))
        assert (a2.generation, a2.members) == (2, [a.member_id])
        assert list(h.group.members) == [a.member_id]
        assert await h.heartbeat(b.member_id, 1) == E.UNKNOWN_MEMBER_ID

    run(scenario)


# --- static membership (KIP-345) -------------------------------------------------------


def test_a_static_member_restarting_within_its_session_timeout_keeps_its_place():
    async def scenario() -> None:
        h = Harness()
        tasks = [await h.join(session_ms=10_000), await h.join(instance_id="s-1")]
        await h.advance(3)
        a2, s1 = (joined_as(outcome(t)) for t in tasks)  # a2 dynamic, s1 static
        await h.sync_all([a2, s1])
        generation, since, saves = h.group.generation, h.since(), len(h.store.saved)

        # s's process dies without LeaveGroup and restarts 8 s later: it joins with its
        # instance id and no member id. No rebalance: the same generation, its assignment.
        assert set(await heartbeat_every_second(h, 8, a2)) == {E.NONE}
        back = joined_as(outcome(await h.join(instance_id="s-1")))
        assert back.generation == generation and h.group.state == S.STABLE
        assert h.since() == since and back.leader == a2.member_id
        assert outcome(await h.sync(back.member_id, generation, instance_id="s-1"))[0] == (
            s1.member_id.encode()
        )
        # Kafka hands the restarted instance a new member id and fences the old one.
        assert back.member_id != s1.member_id
        assert h.group.static == {"s-1": back.member_id}
        assert await h.heartbeat(s1.member_id, generation, "s-1") == E.FENCED_INSTANCE_ID

        # A static member that rejoins with its member id (a lost JoinGroup response)
        # keeps that id, again without a rebalance.
        same = joined_as(outcome(await h.join(back.member_id, instance_id="s-1")))
        assert (same.member_id, same.generation) == (back.member_id, generation)

        # Its old session deadline passes: nothing happens to the new incarnation.
        for _ in range(12):
            await h.advance(1)
            assert await h.heartbeat(a2.member_id, generation) == E.NONE
            assert await h.heartbeat(back.member_id, generation, "s-1") == E.NONE
        assert h.group.state == S.STABLE and h.since() == since
        assert all(r.state == S.STABLE for r in h.store.saved[saves:])

    run(scenario)


def test_a_static_member_that_stays_away_past_its_session_timeout_is_removed():
    async def scenario() -> None:
        h = Harness()
        tasks = [await h.join(instance_id="a-1"), await h.join(instance_id="s-1")]
        await h.advance(3)
        a, s = (joined_as(outcome(t)) for t in tasks)
        await h.sync_all([a, s])
        assert set(await heartbeat_every_second(h, 9, a)) == {E.NONE}
        assert h.group.static.keys() == {"a-1", "s-1"}
        await h.advance(1)
        assert h.group.static == {"a-1": a.member_id}
        assert h.group.state == S.PREPARING_REBALANCE

    run(scenario)


# --- KIP-394: member ids handed out before joining ------------------------------------


def test_a_pending_member_id_expires_after_the_session_timeout():
    async def scenario() -> None:
        h = Harness()
        [a] = await h.form(1, session_ms=10_000, rebalance_ms=30_000)
        # A new consumer is handed a member id; the group does not rebalance for it yet.
        first = outcome(await h.join(session_ms=6_000, require_known=True))
        assert first["error_code"] == E.MEMBER_ID_REQUIRED
        pending = first["member_id"]
        assert h.group.state == S.STABLE and pending not in h.group.members

        # a starts a rebalance; it cannot complete while the pending id may still join.
        rejoin = await h.join(a.member_id, protocols=V2)
        await h.advance(5.999)
        assert not rejoin.done() and h.group.state == S.PREPARING_REBALANCE

        # The pending id expires with its session timeout (not the 30 s rebalance timeout).
        await h.advance(0.001)
        a2 = joined_as(outcome(rejoin))
        assert (a2.generation, a2.members) == (2, [a.member_id])
        assert outcome(await h.join(pending, session_ms=6_000)) == E.UNKNOWN_MEMBER_ID

    run(scenario)


def test_a_pending_member_id_used_within_the_session_timeout_joins():
    async def scenario() -> None:
        h = Harness()
        [a] = await h.form(1, session_ms=10_000)
        pending = outcome(await h.join(session_ms=6_000, require_known=True))["member_id"]
        await h.advance(5.999)
        newcomer = await h.join(pending, session_ms=6_000)
        assert h.group.state == S.PREPARING_REBALANCE
        assert await h.heartbeat(a.member_id, 1) == E.REBALANCE_IN_PROGRESS
        rejoin = await h.join(a.member_id)
        joined = [joined_as(outcome(t)) for t in (rejoin, newcomer)]
        assert [j.member_id for j in joined] == [a.member_id, pending]
        assert {j.generation for j in joined} == {2}
        await h.advance(1)  # past the pending deadline: the member stays
        assert set(h.group.members) == {a.member_id, pending}

    run(scenario)


# --- heartbeats in each state ---------------------------------------------------------


def test_heartbeats_answer_as_kafka_does_in_each_state():
    async def scenario() -> None:
        h = Harness()
        tasks = [await h.join(session_ms=10_000) for _ in range(2)]
        await h.advance(3)
        a, b = (joined_as(outcome(t)) for t in tasks)

        # CompletingRebalance: the new generation's members heartbeat normally...
        assert h.group.state == S.COMPLETING_REBALANCE
        assert await h.heartbeat(a.member_id, 1) == E.NONE
        assert await h.heartbeat(b.member_id, 0) == E.ILLEGAL_GENERATION
        assert await h.heartbeat("ghost", 1) == E.UNKNOWN_MEMBER_ID
        # ...and their heartbeats keep them alive past the session timeout.
        assert set(await heartbeat_every_second(h, 15, a, b)) == {E.NONE}
        assert h.group.state == S.COMPLETING_REBALANCE and h.since() == 3_000
        await h.sync_all([a, b])

        # Stable.
        assert await h.heartbeat(b.member_id, 1) == E.NONE
        assert await h.heartbeat(b.member_id, 2) == E.ILLEGAL_GENERATION
        assert await h.heartbeat("ghost", 1) == E.UNKNOWN_MEMBER_ID

        # PreparingRebalance: members of the current generation are told to rejoin.
        rejoin = await h.join(b.member_id, protocols=V2)
        assert await h.heartbeat(a.member_id, 1) == E.REBALANCE_IN_PROGRESS
        assert await h.heartbeat(a.member_id, 0) == E.ILLEGAL_GENERATION
        assert await h.heartbeat("ghost", 1) == E.UNKNOWN_MEMBER_ID

        # a leaves: b, the only member left and already rejoined, completes the rebalance.
        assert await h.coordinator.leave(TENANT, GROUP, [(a.member_id, None)]) == [E.NONE]
        await settle()
        assert joined_as(outcome(rejoin)).generation == 2
        assert await h.heartbeat(a.member_id, 2) == E.UNKNOWN_MEMBER_ID

        # Empty: everyone left.
        assert await h.coordinator.leave(TENANT, GROUP, [(b.member_id, None)]) == [E.NONE]
        assert h.group.state == S.EMPTY
        assert await h.heartbeat(b.member_id, 2) == E.UNKNOWN_MEMBER_ID

    run(scenario)


# --- state_since_ms and the stored record ---------------------------------------------


def test_state_since_follows_the_clock_through_every_transition():
    async def scenario() -> None:
        h = Harness(initial_delay_ms=3_000)
        task = await h.join(session_ms=10_000)
        assert (h.group.state, h.since()) == (S.PREPARING_REBALANCE, 0)
        await h.advance(3)
        a = joined_as(outcome(task))
        assert (h.group.state, h.since()) == (S.COMPLETING_REBALANCE, 3_000)
        await h.advance(1.5)
        await h.sync_all([a])
        assert (h.group.state, h.since()) == (S.STABLE, 4_500)
        await h.advance(3.5)
        assert await h.heartbeat(a.member_id, 1) == E.NONE  # no transition, no new since
        assert (h.group.state, h.since()) == (S.STABLE, 4_500)

        await h.advance(10)  # 10 s after that heartbeat the member expires: Empty
        assert (h.group.state, h.since(), h.group.generation) == (S.EMPTY, 18_000, 2)
        stored = [(r.state, r.state_since_ms - WALL0) for r in h.store.saved]
        assert list(dict.fromkeys(stored)) == [
            (S.PREPARING_REBALANCE, 0),
            (S.COMPLETING_REBALANCE, 3_000),
            (S.STABLE, 4_500),
            (S.EMPTY, 18_000),
        ]

    run(scenario)


def test_a_group_loaded_from_the_store_expires_members_that_never_come_back():
    async def scenario() -> None:
        store = MemoryGroupStore()
        record = GroupRecord(
            tenant_id=TENANT,
            group_id=GROUP,
            state=S.STABLE,
            generation=4,
            protocol_type="consumer",
            protocol_name="range",
            leader="m-1",
            members=(MemberRecord("m-1", None, "client", "/10.0.0.1", 10_000, 30_000, b"", b"p0"),),
            state_since_ms=WALL0 - 60_000,
        )
        store.groups[(TENANT, GROUP)] = record
        h = Harness(store=store)  # a coordinator taking the group over
        assert (await h.coordinator.describe(TENANT, GROUP)) is h.group
        assert (h.group.state, h.since()) == (S.STABLE, -60_000)
        await h.advance(9.999)
        assert "m-1" in h.group.members
        await h.advance(0.001)
        assert (h.group.state, h.group.generation, h.since()) == (S.EMPTY, 5, 10_000)
        assert store.groups[(TENANT, GROUP)].state == S.EMPTY

    run(scenario)


def test_a_failed_group_write_is_retried_on_the_clock_before_the_leader_is_answered():
    async def scenario() -> None:
        h = Harness()
        task = await h.join()
        await h.advance(3)
        a = joined_as(outcome(task))
        h.store.fail_saves = 2
        sync = await h.sync(a.member_id, 1, {a.member_id: b"p0"})
        assert not sync.done()  # the first write failed; the retry waits 0.5 s
        await h.advance(0.5)
        assert not sync.done()  # the second failed too; the next waits 1 s
        await h.advance(0.999)
        assert not sync.done()
        await h.advance(0.001)
        assert outcome(sync)[0] == b"p0"
        assert h.store.groups[(TENANT, GROUP)].state == S.STABLE

    run(scenario)
