"""The KIP-848 coordinator in-process: epochs, incremental reconciliation, fencing, static
members, regular expressions, offsets and persistence, on a fake clock and an in-memory
store. Members are played by hand: each heartbeat is one call, with the partitions the
member says it owns, as a client would send them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from data_plane.groups.assignors import RangeAssignor, UniformAssignor
from data_plane.groups.clock import FakeClock
from data_plane.groups.consumer_group import (
    ConsumerConfig,
    ConsumerGroup,
    ConsumerGroupCoordinator,
    HeartbeatAnswer,
)
from data_plane.groups.consumer_protocol import decode_assignment, encode_assignment
from data_plane.groups.coordinator import (
    CoordinatorConfig,
    Group,
    GroupCoordinator,
    GroupError,
    Member,
)
from data_plane.groups.model import GroupState, GroupType, OffsetRecord
from data_plane.protocol.errors import ErrorCode
from tests.groups.test_coordinator_clock import MemoryGroupStore, call

E = ErrorCode
S = GroupState
TENANT = 3
GROUP = "payments"
ORDERS = "00000000-0000-0000-0000-00000000000a"
REFUNDS = "00000000-0000-0000-0000-00000000000b"
HEARTBEAT_MS = 500
SESSION_MS = 4_000


class World:
    def __init__(self, topics: dict[str, tuple[str, int]] | None = None) -> None:
        self.store = MemoryGroupStore()
        self.clock = FakeClock()
        self.topics = topics if topics is not None else {"orders": (ORDERS, 6)}
        self.make()

    def make(self) -> None:
        """A coordinator over the store (again: as one that takes over after a failover)."""
        self.classic = GroupCoordinator(self.store, call, CoordinatorConfig(), clock=self.clock)
        self.coord = ConsumerGroupCoordinator(
            self.classic,
            ConsumerConfig(heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS),
        )

    def resolve(self, names: tuple[str, ...], regex: re.Pattern[str] | None) -> dict:
        out = {n: self.topics[n] for n in names if n in self.topics}
        if regex is not None:
            out.update({n: t for n, t in self.topics.items() if regex.fullmatch(n)})
        return out

    async def beat(
        self,
        member_id: str,
        epoch: int,
        owned: dict[str, set[int]] | None = None,
        *,
        topics: list[str] | None = None,
        regex: str | None = None,
        instance_id: str | None = None,
        assignor: str | None = None,
        rebalance_timeout_ms: int = -1,
    ) -> HeartbeatAnswer:
        if epoch == 0:
            owned = owned or {}
            if rebalance_timeout_ms == -1:
                rebalance_timeout_ms = 10_000
            if topics is None and regex is None:
                topics = ["orders"]
        return await self.coord.heartbeat(
            TENANT,
            GROUP,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=None,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            owned=None if owned is None else {t: frozenset(p) for t, p in owned.items() if p},
            client_id="app",
            host="/127.0.0.1",
            resolve=self.resolve,
            client_member_id=True,
        )

    async def group(self) -> ConsumerGroup:
        found = await self.classic.load(TENANT, GROUP)
        assert isinstance(found, ConsumerGroup)
        return found


def run(scenario: Callable[[World], Coroutine[Any, Any, None]], world: World | None = None) -> None:
    asyncio.run(scenario(world or World()))


def parts(answer: HeartbeatAnswer) -> dict[str, set[int]]:
    assert answer.assignment is not None, "no assignment in the answer"
    return {t: set(p) for t, p in answer.assignment.items()}


def count(owned: dict[str, set[int]]) -> int:
    return sum(len(p) for p in owned.values())


# --- joining and reconciling ---------------------------------------------------------------


def test_first_member_gets_everything_at_epoch_one():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        assert (a.member_epoch, a.heartbeat_interval_ms) == (1, HEARTBEAT_MS)
        assert parts(a) == {ORDERS: set(range(6))}
        g = await w.group()
        assert (g.group_epoch, g.assignment_epoch, g.state) == (1, 1, S.STABLE)

    run(scenario)


def test_a_joining_member_waits_for_revocation_and_the_others_keep_the_rest():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        a_owned = parts(a)
        b = await w.beat("b", 0)
        # b is at the new epoch but gets nothing yet: all six are a's until it revokes.
        assert b.member_epoch == 2 and parts(b) == {}
        g = await w.group()
        assert g.state == S.RECONCILING
        # a's next heartbeat: keep three, give up three; its epoch stays until it has.
        a = await w.beat("a", 1, a_owned)
        kept = parts(a)
        assert a.member_epoch == 1 and count(kept) == 3 and kept[ORDERS] < a_owned[ORDERS]
        # Still reporting all six: nothing moves (and a is told again what to keep).
        again = await w.beat("a", 1, a_owned)
        assert again.member_epoch == 1 and parts(again) == kept
        b = await w.beat("b", 2, {})
        assert parts(b) == {}  # unreleased yet
        # a reports only what it kept: revocation done, a moves to epoch 2.
        a = await w.beat("a", 1, kept)
        assert a.member_epoch == 2
        b = await w.beat("b", 2, {})
        assert parts(b) == {ORDERS: a_owned[ORDERS] - kept[ORDERS]}
        assert (await w.group()).state == S.STABLE

    run(scenario)


def test_a_member_whose_answer_was_lost_learns_its_assignment_from_a_resent_request():
    """librdkafka resends a timed-out heartbeat as it was (not a full request): the answer
    to it still carries the assignment the lost answer had, for a member asked to revoke
    and for one whose epoch moved on."""

    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        everything = parts(a)
        await w.beat("b", 0)
        kept = parts(await w.beat("a", 1))  # this answer is lost...
        resent = await w.beat("a", 1)  # ...and the same request is sent again
        assert resent.member_epoch == 1 and parts(resent) == kept
        assert count(kept) == 3 and kept[ORDERS] < everything[ORDERS]
        bumped = await w.beat("a", 1, kept)  # the ack: epoch 2; this answer lost too
        assert bumped.member_epoch == 2
        resent = await w.beat("a", 1, kept)  # the ack again (it carries what a owns)
        assert resent.member_epoch == 2 and parts(resent) == kept
        steady = await w.beat("a", 2)  # caught up: nothing new, nothing sent
        assert steady.member_epoch == 2 and steady.assignment is None

    run(scenario)


def test_a_member_that_did_not_report_its_partitions_is_asked_to_revoke():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        await w.beat("b", 0)
        # A lean heartbeat (no owned partitions): the coordinator cannot assume anything.
        lean = await w.beat("a", 1, None)
        assert lean.member_epoch == 1 and count(parts(lean)) == 3
        g = await w.group()
        assert g.members["a"].revoking == {
            ORDERS: frozenset(parts(a)[ORDERS] - parts(lean)[ORDERS])
        }

    run(scenario)


def test_leaving_frees_partitions_for_the_others():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        await w.beat("b", 0)
        a = await w.beat("a", 1, parts(a))
        a = await w.beat("a", 1, parts(a))
        b = await w.beat("b", 2, {})
        left = await w.beat("b", -1)
        assert left.member_epoch == -1
        g = await w.group()
        assert g.group_epoch == 3 and "b" not in g.members
        a = await w.beat("a", 2, parts(a) if a.assignment else None)
        assert a.member_epoch == 3 and parts(a) == {ORDERS: set(range(6))}
        del b

    run(scenario)


def test_session_timeout_fences_a_silent_member():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        await w.beat("b", 0)
        w.clock.advance(SESSION_MS / 1000 - 0.5)
        await w.beat("a", 1, parts(a))  # a keeps heartbeating, b does not
        w.clock.advance(1.0)
        g = await w.group()
        assert set(g.members) == {"a"}
        with pytest.raises(GroupError) as err:
            await w.beat("b", 2, {})
        assert err.value.code == E.UNKNOWN_MEMBER_ID

    run(scenario)


def test_a_member_that_never_revokes_is_fenced_after_its_rebalance_timeout():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0, rebalance_timeout_ms=2_000)
        everything = parts(a)
        await w.beat("b", 0)
        await w.beat("a", 1, everything)  # asked to revoke three
        for _ in range(3):  # heartbeats keep its session alive, but it never revokes
            w.clock.advance(0.5)
            await w.beat("a", 1, everything)
        w.clock.advance(0.6)  # past the 2 s rebalance timeout
        assert "a" not in (await w.group()).members
        with pytest.raises(GroupError) as err:
            await w.beat("a", 1, everything)
        assert err.value.code == E.UNKNOWN_MEMBER_ID
        b = await w.beat("b", 2, {})
        assert b.member_epoch == 3 and parts(b) == {ORDERS: set(range(6))}

    run(scenario)


# --- epochs ----------------------------------------------------------------------------------


def test_epochs_ahead_or_behind_are_fenced_but_a_lost_answer_is_forgiven():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        with pytest.raises(GroupError) as ahead:
            await w.beat("a", 5, parts(a))
        assert ahead.value.code == E.FENCED_MEMBER_EPOCH
        # b joins; a revokes and moves to epoch 2; suppose a never saw that answer.
        await w.beat("b", 0)
        kept = parts(await w.beat("a", 1, parts(a)))
        assert (await w.beat("a", 1, kept)).member_epoch == 2
        # It heartbeats with epoch 1 and a subset of what it holds: accepted.
        assert (await w.beat("a", 1, kept)).member_epoch == 2
        # Epoch 1 but owning more than it holds now: fenced.
        with pytest.raises(GroupError) as behind:
            await w.beat("a", 1, {ORDERS: set(range(6))})
        assert behind.value.code == E.FENCED_MEMBER_EPOCH

    run(scenario)


def test_a_fenced_member_rejoins_with_epoch_zero_and_gets_its_target_back():
    async def scenario(w: World) -> None:
        await w.beat("a", 0)
        rejoined = await w.beat("a", 0)
        assert rejoined.member_epoch == 1 and parts(rejoined) == {ORDERS: set(range(6))}

    run(scenario)


def test_invalid_heartbeats_are_refused_and_leave_the_group_usable():
    async def scenario(w: World) -> None:
        cases = [
            (dict(member_id="", epoch=0), E.INVALID_REQUEST),
            (dict(member_id="x", epoch=-3), E.INVALID_REQUEST),
            (dict(member_id="x", epoch=0, assignor="sticky"), E.UNSUPPORTED_ASSIGNOR),
            (
                dict(member_id="x", epoch=0, topics=[], regex="orders("),
                E.INVALID_REGULAR_EXPRESSION,
            ),
            (dict(member_id="x", epoch=0, topics=[]), E.INVALID_REQUEST),
            (dict(member_id="x", epoch=0, owned={ORDERS: {1}}), E.INVALID_REQUEST),
            (dict(member_id="x", epoch=3), E.GROUP_ID_NOT_FOUND),
        ]
        for kwargs, code in cases:
            with pytest.raises(GroupError) as err:
                await w.beat(kwargs.pop("member_id"), kwargs.pop("epoch"), **kwargs)
            assert err.value.code == code, kwargs
        ok = await w.beat("a", 0)
        assert ok.member_epoch == 1

    run(scenario)


# --- subscriptions and metadata ---------------------------------------------------------


def test_a_regex_picks_up_a_topic_created_later():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0, topics=None, regex="(orders|refunds)")
        assert parts(a) == {ORDERS: set(range(6))}
        w.topics["refunds"] = (REFUNDS, 2)
        w.topics["unrelated"] = ("00000000-0000-0000-0000-0000000000ff", 3)
        a = await w.beat("a", 1, parts(a))
        assert a.member_epoch == 2
        assert parts(a) == {ORDERS: set(range(6)), REFUNDS: {0, 1}}

    run(scenario)


def test_added_partitions_bump_the_group_epoch():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        w.topics["orders"] = (ORDERS, 8)
        a = await w.beat("a", 1, parts(a))
        assert (a.member_epoch, parts(a)) == (2, {ORDERS: set(range(8))})

    run(scenario)


def test_a_recreated_topic_is_a_different_topic():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        w.topics["orders"] = (REFUNDS, 3)  # deleted and created again: a new id
        a = await w.beat("a", 1, parts(a))
        # The old id's partitions go first; the new topic's come once they are given up.
        assert a.member_epoch == 1 and parts(a) == {}
        a = await w.beat("a", 1, {})
        assert a.member_epoch == 2 and parts(a) == {REFUNDS: {0, 1, 2}}

    run(scenario)


# --- static members ---------------------------------------------------------------------------


def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance():
    async def scenario(w: World) -> None:
        a = await w.beat("a1", 0, instance_id="host-a")
        b = await w.beat("b", 0)
        a = await w.beat("a1", 1, parts(a), instance_id="host-a")
        kept = parts(a)
        a = await w.beat("a1", 1, kept, instance_id="host-a")
        await w.beat("b", 2, {})
        epoch = (await w.group()).group_epoch
        # A rolling restart: leave with -2, come back under a new member id.
        assert (await w.beat("a1", -2, instance_id="host-a")).member_epoch == -2
        w.clock.advance(SESSION_MS / 1000 / 2)  # within the session timeout
        back = await w.beat("a2", 0, instance_id="host-a")
        assert parts(back) == kept and back.member_epoch == epoch
        g = await w.group()
        assert "a1" not in g.members and g.static["host-a"] == "a2"
        assert g.group_epoch == epoch  # nobody else noticed
        del b

    run(scenario)


def test_an_instance_id_in_use_cannot_join_twice():
    async def scenario(w: World) -> None:
        await w.beat("a1", 0, instance_id="host-a")
        with pytest.raises(GroupError) as err:
            await w.beat("a2", 0, instance_id="host-a")
        assert err.value.code == E.UNRELEASED_INSTANCE_ID
        with pytest.raises(GroupError) as fenced:
            await w.beat("a2", 1, {}, instance_id="host-a")
        assert fenced.value.code == E.FENCED_INSTANCE_ID

    run(scenario)


# --- persistence -------------------------------------------------------------------------------


def test_a_coordinator_that_takes_over_knows_every_epoch_it_handed_out():
    async def scenario(w: World) -> None:
        a = await w.beat("a", 0)
        await w.beat("b", 0)
        kept = parts(await w.beat("a", 1, parts(a)))
        record = w.store.groups[(TENANT, GROUP)]
        assert record.group_type == GroupType.CONSUMER
        w.make()  # the broker died; another loads the group
        g = await w.group()
        assert g.members["a"].member_epoch == 1 and g.members["a"].state == "unrevoked_partitions"
        assert (await w.beat("a", 1, kept)).member_epoch == 2
        assert count(parts(await w.beat("b", 2, {}))) == 3

    run(scenario)


# --- offsets and the classic protocol -----------------------------------------------------------


def test_commits_are_checked_against_the_member_epoch():
    async def scenario(w: World) -> None:
        await w.beat("a", 0)
        g = await w.group()
        offsets = [OffsetRecord("orders", 0, 10, -1, None)]
        await w.coord.commit(g, member_id="a", member_epoch=1, api_version=9, offsets=offsets)
        assert w.store.fetch_offsets(TENANT, GROUP)[0].offset == 10
        for member, epoch, version, code in [
            ("a", 0, 9, E.STALE_MEMBER_EPOCH),
            ("a", 1, 8, E.UNSUPPORTED_VERSION),
            ("zz", 1, 9, E.UNKNOWN_MEMBER_ID),
            ("", -1, 9, E.UNKNOWN_MEMBER_ID),  # outside the group while it has members
        ]:
            with pytest.raises(GroupError) as err:
                await w.coord.commit(
                    g, member_id=member, member_epoch=epoch, api_version=version, offsets=offsets
                )
            assert err.value.code == code
        w.coord.check_fetch(g, "a", 1)
        with pytest.raises(GroupError) as stale:
            w.coord.check_fetch(g, "a", 7)
        assert stale.value.code == E.STALE_MEMBER_EPOCH

    run(scenario)


def test_a_group_id_is_either_classic_or_consumer():
    async def scenario(w: World) -> None:
        await w.beat("a", 0)
        with pytest.raises(GroupError) as err:
            await w.classic.join(
                TENANT,
                GROUP,
                member_id="",
                instance_id=None,
                client_id="old",
                host="h",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                protocol_type="consumer",
                protocols=[("range", b"")],
                require_known_member_id=False,
            )
        assert err.value.code == E.INCONSISTENT_GROUP_PROTOCOL
        listed = await w.classic.list_groups(TENANT)
        assert listed == [(GROUP, "consumer", "Stable", "consumer")]

    run(scenario)


# --- assignors --------------------------------------------------------------------------------


def test_uniform_is_balanced_and_sticky():
    u = UniformAssignor()
    subs = {m: frozenset({ORDERS}) for m in ("a", "b", "c")}
    first = u.assign(subs, {ORDERS: 900}, {})
    assert sorted(len(x[ORDERS]) for x in first.values()) == [300, 300, 300]
    subs["d"] = frozenset({ORDERS})
    second = u.assign(subs, {ORDERS: 900}, first)
    sizes = sorted(len(x.get(ORDERS, ())) for x in second.values())
    assert sizes == [225, 225, 225, 225]
    moved = sum(len(first[m][ORDERS] - second[m][ORDERS]) for m in first)
    assert moved == 225  # only what the newcomer needs moves
    every = sorted(p for x in second.values() for p in x[ORDERS])
    assert every == list(range(900))


def test_uniform_respects_different_subscriptions():
    u = UniformAssignor()
    subs = {"a": frozenset({ORDERS}), "b": frozenset({ORDERS, REFUNDS})}
    out = u.assign(subs, {ORDERS: 4, REFUNDS: 4}, {})
    assert REFUNDS not in out["a"] and out["b"][REFUNDS] == frozenset(range(4))
    assert len(out["a"][ORDERS]) == 4


def test_range_co_partitions():
    r = RangeAssignor()
    subs = {m: frozenset({ORDERS, REFUNDS}) for m in ("a", "b")}
    out = r.assign(subs, {ORDERS: 5, REFUNDS: 5}, {})
    assert out["a"] == {ORDERS: frozenset({0, 1, 2}), REFUNDS: frozenset({0, 1, 2})}
    assert out["b"] == {ORDERS: frozenset({3, 4}), REFUNDS: frozenset({3, 4})}


# --- online upgrade and downgrade ----------------------------------------------------------


def subscription_v1(topics: list[str], owned: dict[str, list[int]]) -> bytes:
    """A cooperative client's subscription: v1 carries the partitions it owns."""
    import struct

    def s(x: str) -> bytes:
        return struct.pack(">h", len(x)) + x.encode()

    out = struct.pack(">hi", 1, len(topics)) + b"".join(s(t) for t in topics)
    out += struct.pack(">i", -1)  # no user data
    out += struct.pack(">i", len(owned))
    for t, ps in owned.items():
        out += s(t) + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out


def classic_group(w: World, generation: int = 3) -> Group:
    """A Stable classic group of two cooperative members, 0-2 and 3-5 of orders."""
    group = Group(
        TENANT,
        GROUP,
        state=S.STABLE,
        generation=generation,
        protocol_type="consumer",
        protocol_name="cooperative-sticky",
        leader="m1",
    )
    for name, parts in (("m1", [0, 1, 2]), ("m2", [3, 4, 5])):
        group.members[name] = Member(
            name,
            None,
            "old-app",
            "/10.0.0.9",
            6_000,
            10_000,
            "consumer",
            [("cooperative-sticky", subscription_v1(["orders"], {"orders": parts}))],
            assignment=encode_assignment({"orders": parts}, 1),
        )
    w.classic.groups[(TENANT, GROUP)] = group
    return group


async def classic_join(w: World, member_id: str, owned: list[int]) -> dict[str, Any]:
    return await w.classic.join(
        TENANT,
        GROUP,
        member_id=member_id,
        instance_id=None,
        client_id="old-app",
        host="/10.0.0.9",
        session_timeout_ms=6_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("cooperative-sticky", subscription_v1(["orders"], {"orders": owned}))],
        require_known_member_id=True,
        resolve=w.resolve,
    )


async def classic_sync(w: World, member_id: str, generation: int) -> list[int]:
    raw, _, name = await w.classic.sync(
        TENANT,
        GROUP,
        member_id=member_id,
        instance_id=None,
        generation=generation,
        protocol_type="consumer",
        protocol_name="cooperative-sticky",
        assignments=[],
    )
    assert name == "cooperative-sticky"
    return sorted(p for _, ps in decode_assignment(raw).partitions for p in ps)


def test_a_consumer_member_upgrades_a_classic_group_online_and_back():
    async def scenario(w: World) -> None:
        classic_group(w)
        # A consumer-protocol member joins the running classic group: it is upgraded, the
        # classic members keep their partitions (epoch = their generation).
        c = await w.beat("c", 0)
        g = await w.group()
        assert g.group_epoch == 4 and c.member_epoch == 4 and parts(c) == {}
        assert g.members["m1"].assigned == {ORDERS: frozenset({0, 1, 2})}
        # Their heartbeats say: rejoin.
        for m in ("m1", "m2"):
            with pytest.raises(GroupError) as err:
                await w.classic.heartbeat(
                    TENANT, GROUP, member_id=m, instance_id=None, generation=3
                )
            assert err.value.code == E.REBALANCE_IN_PROGRESS
        # m1 rejoins owning 0-2: it gives up what moves first (cooperative), still at 3.
        joined = await classic_join(w, "m1", [0, 1, 2])
        assert (joined["error_code"], joined["generation_id"], joined["leader"]) == (E.NONE, 3, "")
        kept = await classic_sync(w, "m1", 3)
        assert len(kept) == 2 and set(kept) < {0, 1, 2}
        # It rejoins without the revoked one: epoch 4, done.
        again = await classic_join(w, "m1", kept)
        assert again["generation_id"] == 4 and await classic_sync(w, "m1", 4) == kept
        joined = await classic_join(w, "m2", [3, 4, 5])
        kept2 = await classic_sync(w, "m2", joined["generation_id"])
        assert (await classic_join(w, "m2", kept2))["generation_id"] == 4
        c = await w.beat("c", 4, {})
        assert count(parts(c)) == 2
        got = set(kept) | set(kept2) | parts(c)[ORDERS]
        assert got == set(range(6))
        assert (await w.group()).state == S.STABLE
        # Commits: a classic member's with its generation, at any OffsetCommit version.
        offsets = [OffsetRecord("orders", 0, 5, -1, None)]
        await w.coord.commit(
            await w.group(), member_id="m1", member_epoch=4, api_version=8, offsets=offsets
        )
        with pytest.raises(GroupError) as stale:
            await w.coord.commit(
                await w.group(), member_id="m1", member_epoch=3, api_version=8, offsets=offsets
            )
        assert stale.value.code == E.ILLEGAL_GENERATION
        # The consumer-protocol member leaves: only classic members remain, so the group
        # is a classic group again, at the group epoch, rebalancing with what they hold.
        await w.beat("c", -1)
        back = await w.classic.load(TENANT, GROUP)
        assert isinstance(back, Group)
        assert back.state == S.PREPARING_REBALANCE and back.generation == 5
        assert set(back.members) == {"m1", "m2"}
        for _ in range(10):
            await asyncio.sleep(0)  # the store writes run
        stored = w.store.groups[(TENANT, GROUP)]
        assert stored.group_type == GroupType.CLASSIC

    run(scenario)


def test_a_classic_member_leaving_a_consumer_group_frees_its_partitions():
    async def scenario(w: World) -> None:
        classic_group(w)
        c = await w.beat("c", 0)
        assert await w.classic.leave(TENANT, GROUP, [("m1", None), ("nobody", None)]) == [
            E.NONE,
            E.UNKNOWN_MEMBER_ID,
        ]
        c = await w.beat("c", 4, {})
        g = await w.group()
        assert set(g.members) == {"m2", "c"} and c.member_epoch == g.group_epoch
        assert parts(c)  # some of m1's freed partitions, at once

    run(scenario)


def test_a_group_of_another_protocol_type_is_not_upgraded():
    async def scenario(w: World) -> None:
        classic_group(w).protocol_type = "connect"
        with pytest.raises(GroupError) as err:
            await w.beat("c", 0)
        assert err.value.code == E.GROUP_ID_NOT_FOUND
        assert isinstance(await w.classic.load(TENANT, GROUP), Group)

    run(scenario)


class Forbidden(Exception):
    pass


def test_a_refused_subscription_leaves_nothing_behind():
    async def scenario(w: World) -> None:
        allowed = w.resolve

        def resolve(names: tuple[str, ...], regex: re.Pattern[str] | None) -> dict:
            if "secret" in names:
                raise Forbidden("secret")
            return allowed(names, regex)

        w.resolve = resolve  # type: ignore[method-assign]
        with pytest.raises(Forbidden):
            await w.beat("a", 0, topics=["secret"])
        assert await w.classic.load(TENANT, GROUP) is None
        assert await w.classic.list_groups(TENANT) == []
        a = await w.beat("a", 0)
        with pytest.raises(Forbidden):
            await w.beat("a", 1, parts(a), topics=["orders", "secret"])
        g = await w.group()
        assert g.members["a"].subscribed_topic_names == ("orders",) and g.group_epoch == 1
        # An upgrade refused the same way leaves the classic group running.
        w.classic.consumer_groups.clear()
        classic_group(w)
        with pytest.raises(Forbidden):
            await w.beat("c", 0, topics=["secret"])
        assert isinstance(await w.classic.load(TENANT, GROUP), Group)

    run(scenario)


def test_a_deleted_tenants_groups_leave_the_coordinators_memory():
    """Brokers call ``forget_tenants`` with the tenants still in the metadata."""

    async def scenario(w: World) -> None:
        await w.beat("a", 0)  # a consumer-protocol group of TENANT, with a member
        classic = await w.classic.group(TENANT + 1, "other", create=True)
        assert classic is not None
        assert w.classic.forget_tenants({TENANT, TENANT + 1}) == 0
        assert w.classic.forget_tenants({TENANT + 1}) == 1
        assert (TENANT, GROUP) not in w.classic.consumer_groups
        assert (TENANT + 1, "other") in w.classic.groups
        assert w.classic.forget_tenants(set()) == 1 and not w.classic.groups

    run(scenario)
