"""The leader's incremental cooperative assignment: balance, revocation before
reassignment, the delay for a departed worker, deletions and duplicates."""

from __future__ import annotations

from data_plane.connect.assignor import CONNECTOR, IncrementalAssignor, Member, wanted_items


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _tasks(items: frozenset) -> set:
    return {i for i in items if i[1] != CONNECTOR}


def _connectors(items: frozenset) -> set:
    return {i for i in items if i[1] == CONNECTOR}


def test_a_fresh_group_splits_connectors_and_tasks_evenly() -> None:
    assignor = IncrementalAssignor(5000, Clock())
    wanted = wanted_items({"sink": 4, "src": 1})
    result = assignor.assign(
        [Member("a", "wa", frozenset()), Member("b", "wb", frozenset())], wanted
    )
    a, b = result["a"].assigned, result["b"].assigned
    assert a | b == wanted and not a & b
    assert sorted([len(_tasks(a)), len(_tasks(b))]) == [2, 3]
    assert len(_connectors(a)) == len(_connectors(b)) == 1
    assert all(not r.revoked and r.delay_ms == 0 for r in result.values())


def test_a_newcomer_gets_work_only_after_it_was_given_up() -> None:
    assignor = IncrementalAssignor(5000, Clock())
    wanted = wanted_items({"sink": 4})
    first = assignor.assign([Member("a", "wa", frozenset())], wanted)["a"].assigned
    assert first == wanted
    # b joins: a must give up two tasks first; nothing runs twice in between.
    round1 = assignor.assign([Member("a", "wa", first), Member("b", "wb", frozenset())], wanted)
    assert len(round1["a"].revoked) == 2 and round1["b"].assigned == frozenset()
    assert round1["a"].assigned == first - round1["a"].revoked
    # a joins again with what it kept; b gets what a gave up.
    kept = round1["a"].assigned
    round2 = assignor.assign([Member("a", "wa", kept), Member("b", "wb", frozenset())], wanted)
    assert round2["a"].assigned == kept and not round2["a"].revoked
    assert round2["b"].assigned == round1["a"].revoked


def test_a_departed_workers_work_waits_for_the_delay_then_moves() -> None:
    clock = Clock()
    assignor = IncrementalAssignor(3000, clock)
    wanted = wanted_items({"sink": 4})
    start = assignor.assign(
        [Member("a", "wa", frozenset()), Member("b", "wb", frozenset())], wanted
    )
    a_owns = start["a"].assigned
    b_owns = start["b"].assigned
    # b is gone: its work is lost, and waits (a is told to come back in 3 s).
    clock.now += 0.5
    waiting = assignor.assign([Member("a2", "wa", a_owns)], wanted)
    assert waiting["a2"].assigned == a_owns and waiting["a2"].delay_ms == 3000
    clock.now += 1.0
    still = assignor.assign([Member("a2", "wa", a_owns)], wanted)
    assert still["a2"].assigned == a_owns and still["a2"].delay_ms == 2000
    clock.now += 2.5  # the delay is over: a takes everything
    moved = assignor.assign([Member("a2", "wa", a_owns)], wanted)
    assert moved["a2"].assigned == wanted and moved["a2"].delay_ms == 0
    assert b_owns <= moved["a2"].assigned


def test_a_new_worker_takes_lost_work_at_once() -> None:
    clock = Clock()
    assignor = IncrementalAssignor(60_000, clock)
    wanted = wanted_items({"sink": 4})
    start = assignor.assign(
        [Member("a", "wa", frozenset()), Member("b", "wb", frozenset())], wanted
    )
    a_owns = start["a"].assigned
    replaced = assignor.assign([Member("a", "wa", a_owns), Member("c", "wc", frozenset())], wanted)
    assert replaced["c"].assigned == start["b"].assigned
    assert replaced["a"].assigned == a_owns and replaced["c"].delay_ms == 0


def test_deleted_and_duplicated_work_is_revoked() -> None:
    assignor = IncrementalAssignor(5000, Clock())
    wanted = wanted_items({"sink": 2})
    gone = frozenset({("old", CONNECTOR), ("old", 0)})
    both = frozenset({("sink", 0)})
    result = assignor.assign([Member("a", "wa", gone | both), Member("b", "wb", both)], wanted)
    assert result["a"].revoked == gone
    assert ("sink", 0) in result["b"].revoked and ("sink", 0) in result["a"].assigned
    everything = result["a"].assigned | result["b"].assigned
    assert everything == wanted
