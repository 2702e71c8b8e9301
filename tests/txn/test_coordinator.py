"""The transaction coordinator's state machine (data_plane.txn), in process: a store that
keeps every saved value (to check what was durable when), and a marker writer that
records what it was asked and can be held back."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from data_plane.protocol.errors import ErrorCode as E
from data_plane.txn.coordinator import MarkersFenced, NotCoordinator, TransactionCoordinator
from data_plane.txn.model import (
    MAX_PRODUCER_EPOCH,
    IllegalTransition,
    TxnMetadata,
    TxnPartition,
    TxnState,
)

TENANT = 1
P0, P1 = TxnPartition("topic-a", 0), TxnPartition("topic-b", 3)


class Store:
    def __init__(self) -> None:
        self.saved: list[TxnMetadata] = []
        self.rows: dict[tuple[int, str], TxnMetadata] = {}
        self.next_id = 1000
        self.staged: dict[tuple[int, str, int], list[Any]] = {}
        self.settled: list[tuple[str, int, bool, list[Any]]] = []

    def load_transaction(self, tenant_id: int, transactional_id: str) -> TxnMetadata | None:
        return self.rows.get((tenant_id, transactional_id))

    def save_transaction(self, txn: TxnMetadata) -> bool:
        stored = self.rows.get((txn.tenant_id, txn.transactional_id))
        if (stored.version if stored is not None else -1) != txn.version - 1:
            return False
        self.saved.append(txn)
        self.rows[(txn.tenant_id, txn.transactional_id)] = txn
        return True

    def allocate_producer_ids(self, count: int) -> int:
        first, self.next_id = self.next_id, self.next_id + count
        return first

    def list_transactions(self, tenant_id: int) -> list[TxnMetadata]:
        return [t for (tid, _), t in sorted(self.rows.items()) if tid == tenant_id]

    def stage_txn_offsets(self, tenant_id, transactional_id, producer_id, group, offsets, check):
        error = check(self.rows.get((tenant_id, transactional_id)))
        if not error:
            self.staged.setdefault((tenant_id, group, producer_id), []).extend(offsets)
        return error

    def settle_txn_offsets(self, tenant_id, transactional_id, producer_id, group, commit, check):
        if not check(self.rows.get((tenant_id, transactional_id))):
            return False
        offsets = self.staged.pop((tenant_id, group, producer_id), [])
        self.settled.append((group, producer_id, commit, offsets))
        return True

    def pending_txn_partitions(self, tenant_id, group):
        return {
            o
            for (tid, g, _), staged in self.staged.items()
            if (tid, g) == (tenant_id, group)
            for o in staged
        }


class Markers:
    def __init__(self, store: Any) -> None:
        self.store = store  # any TxnStore: what it holds is checked before each write
        self.written: list[tuple[str, int, int, bool, frozenset[TxnPartition]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.returned = asyncio.Event()  # cleared: written, but the call has not returned
        self.returned.set()
        self.fail = 0
        self.fenced = False
        self.coordinator_epochs: list[int] = []

    async def write_markers(self, txn: TxnMetadata, commit: bool) -> None:
        await self.gate.wait()
        if self.fenced:  # the partitions have a newer coordinator's markers
            raise MarkersFenced("coordinator epoch older than the partition's")
        # The decision was durable before any marker is written (later versions of the
        # same decision may be stored meanwhile: a takeover bumps the coordinator epoch).
        stored = self.store.load_transaction(txn.tenant_id, txn.transactional_id)
        assert stored is not None
        decision = ("producer_id", "producer_epoch", "state", "partitions")
        assert [getattr(stored, f) for f in decision] == [getattr(txn, f) for f in decision]
        if self.fail:
            self.fail -= 1
            raise OSError("a leader is away")
        self.coordinator_epochs.append(txn.coordinator_epoch)
        self.written.append(
            (txn.transactional_id, txn.producer_id, txn.producer_epoch, commit, txn.partitions)
        )
        await self.returned.wait()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


async def _in_thread(fn: Any, *args: Any) -> Any:
    return fn(*args)


def make(store: Store | None = None) -> tuple[TransactionCoordinator, Store, Markers, Clock]:
    store = store or Store()
    markers = Markers(store)
    clock = Clock()
    return TransactionCoordinator(store, _in_thread, markers, clock), store, markers, clock


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_new_id_gets_a_producer_id_and_each_init_bumps_the_epoch():
    async def go():
        c, store, _, _ = make()
        assert await c.init_producer_id(TENANT, "orders-tx", 60_000) == (E.NONE, 1000, 0)
        assert await c.init_producer_id(TENANT, "orders-tx", 60_000) == (E.NONE, 1000, 1)
        assert await c.init_producer_id(2, "orders-tx", 60_000) == (
            E.NONE,
            1001,
            0,
        )  # tenants apart
        assert [s.producer_epoch for s in store.saved] == [0, 1, 0]
        txn = store.rows[(TENANT, "orders-tx")]
        assert (txn.state, txn.last_producer_epoch) == (TxnState.EMPTY, 0)

    run(go())


def test_timeouts_above_the_maximum_are_refused():
    async def go():
        c, store, _, _ = make()
        assert (await c.init_producer_id(TENANT, "t", 900_001))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id(TENANT, "t", 0))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert store.saved == []

    run(go())


def test_a_commit_writes_prepare_then_markers_then_complete():
    async def go():
        c, store, markers, _ = make()
        _, pid, epoch = await c.init_producer_id(TENANT, "t", 60_000)
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P0]) == E.NONE
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P0, P1]) == E.NONE
        assert await c.add_offsets(TENANT, "t", pid, epoch, "billing") == E.NONE
        saves = len(store.saved)
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P1]) == E.NONE  # in already
        assert len(store.saved) == saves  # nothing written for it
        markers.gate.clear()
        assert await c.end_txn(TENANT, "t", pid, epoch, commit=True) == E.NONE
        assert store.rows[(TENANT, "t")].state is TxnState.PREPARE_COMMIT
        # While the markers are written: the client waits, a retry is told to wait too.
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P0]) == E.CONCURRENT_TRANSACTIONS
        assert await c.end_txn(TENANT, "t", pid, epoch, True) == E.CONCURRENT_TRANSACTIONS
        assert await c.end_txn(TENANT, "t", pid, epoch, False) == E.INVALID_TXN_STATE
        markers.gate.set()
        await c.wait_completed(TENANT, "t")
        assert markers.written == [("t", pid, epoch, True, frozenset({P0, P1}))]
        assert [s[:3] for s in store.settled] == [("billing", pid, True)]  # after the markers
        done = store.rows[(TENANT, "t")]
        assert (done.state, done.partitions, done.groups) == (
            TxnState.COMPLETE_COMMIT,
            frozenset(),
            frozenset(),
        )
        assert await c.end_txn(TENANT, "t", pid, epoch, True) == E.NONE  # a late retry
        assert await c.end_txn(TENANT, "t", pid, epoch, False) == E.INVALID_TXN_STATE
        # The next transaction starts afresh.
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P1]) == E.NONE
        assert store.rows[(TENANT, "t")].partitions == frozenset({P1})

    run(go())


def test_a_zombie_is_fenced_by_a_new_instance_and_its_transaction_aborted():
    async def go():
        c, store, markers, _ = make()
        _, pid, old = await c.init_producer_id(TENANT, "t", 60_000)
        assert await c.add_partitions(TENANT, "t", pid, old, [P0]) == E.NONE
        markers.gate.clear()
        # A new instance: the open transaction is aborted at a bumped epoch first.
        assert (await c.init_producer_id(TENANT, "t", 60_000))[0] == E.CONCURRENT_TRANSACTIONS
        assert store.rows[(TENANT, "t")].state is TxnState.PREPARE_ABORT
        markers.gate.set()
        await c.wait_completed(TENANT, "t")
        assert markers.written == [("t", pid, old + 1, False, frozenset({P0}))]
        assert await c.init_producer_id(TENANT, "t", 60_000) == (E.NONE, pid, old + 2)
        # The zombie (old epoch) can neither add nor commit.
        assert await c.add_partitions(TENANT, "t", pid, old, [P1]) == E.PRODUCER_FENCED
        assert await c.end_txn(TENANT, "t", pid, old, True) == E.PRODUCER_FENCED
        assert await c.end_txn(TENANT, "t", pid + 7, old + 2, True) == (
            E.INVALID_PRODUCER_ID_MAPPING
        )
        assert await c.end_txn(TENANT, "unknown", pid, old, True) == E.INVALID_PRODUCER_ID_MAPPING

    run(go())


def test_kip360_a_producer_may_bump_its_own_epoch_and_no_one_elses():
    async def go():
        c, _, _, _ = make()
        _, pid, epoch = await c.init_producer_id(TENANT, "t", 60_000)
        assert await c.init_producer_id(TENANT, "t", 60_000, pid, epoch) == (E.NONE, pid, 1)
        # Its retry (the answer was lost) names the epoch before the bump: allowed.
        assert await c.init_producer_id(TENANT, "t", 60_000, pid, epoch) == (E.NONE, pid, 2)
        assert (await c.init_producer_id(TENANT, "t", 60_000, pid, 0))[0] == E.PRODUCER_FENCED
        assert (await c.init_producer_id(TENANT, "t", 60_000, pid + 1, 2))[0] == E.PRODUCER_FENCED

    run(go())


def test_an_exhausted_epoch_moves_to_a_new_producer_id():
    async def go():
        store = Store()
        store.rows[(TENANT, "t")] = TxnMetadata(
            TENANT, "t", 55, MAX_PRODUCER_EPOCH, MAX_PRODUCER_EPOCH - 1, 60_000, TxnState.EMPTY
        )
        c, _, _, _ = make(store)
        assert await c.init_producer_id(TENANT, "t", 60_000) == (E.NONE, 1000, 0)

    run(go())


def test_an_expired_transaction_is_fenced_and_aborted():
    async def go():
        c, store, markers, clock = make()
        _, pid, epoch = await c.init_producer_id(TENANT, "t", 10_000)
        _, other, other_epoch = await c.init_producer_id(TENANT, "u", 60_000)
        await c.add_partitions(TENANT, "t", pid, epoch, [P0])
        await c.add_partitions(TENANT, "u", other, other_epoch, [P1])
        clock.now += 10_000
        assert await c.abort_expired() == []  # not past its timeout yet
        clock.now += 1
        assert await c.abort_expired() == ["t"]
        await c.wait_completed(TENANT, "t")
        assert markers.written == [("t", pid, epoch + 1, False, frozenset({P0}))]
        assert store.rows[(TENANT, "t")].state is TxnState.COMPLETE_ABORT
        assert await c.end_txn(TENANT, "t", pid, epoch, True) == E.PRODUCER_FENCED
        assert store.rows[(TENANT, "u")].state is TxnState.ONGOING

    run(go())


def test_a_new_coordinator_finishes_a_decided_transaction_and_markers_are_retried():
    async def go():
        store = Store()
        decided = TxnMetadata(
            TENANT, "t", 9, 3, 2, 60_000, TxnState.PREPARE_COMMIT, frozenset({P0, P1})
        )
        store.rows[(TENANT, "t")] = decided
        c, _, markers, _ = make(store)
        markers.fail = 2  # the first two attempts meet a leader that moved
        loaded = await c.load(TENANT, "t")
        # Taken over: its coordinator epoch is bumped, durably, before its markers.
        assert loaded == dataclasses.replace(decided, version=1, coordinator_epoch=1)
        await c.wait_completed(TENANT, "t")
        assert markers.written == [("t", 9, 3, True, frozenset({P0, P1}))]
        assert markers.coordinator_epochs == [1]
        assert store.rows[(TENANT, "t")].state is TxnState.COMPLETE_COMMIT

    run(go())


def test_a_deposed_coordinator_gives_up_markers_its_successor_wrote():
    """Two coordinators of one id (the placement moved while one was paused): the second
    takes over with a higher coordinator epoch and finishes the transaction; the first,
    fenced at the partitions, stops instead of retrying, and forgets the id."""

    async def go():
        store = Store()
        first, _, first_markers, _ = make(store)
        _, pid, epoch = await first.init_producer_id(TENANT, "t", 60_000)
        await first.add_partitions(TENANT, "t", pid, epoch, [P0])
        first_markers.gate.clear()  # paused while writing its markers
        # Decided (PrepareCommit is durable: the answer goes at once), markers pending.
        assert await first.end_txn(TENANT, "t", pid, epoch, True) == E.NONE
        second, _, second_markers, _ = make(store)
        taken = await second.load(TENANT, "t")
        assert taken is not None and taken.coordinator_epoch == 1
        await second.wait_completed(TENANT, "t")
        assert second_markers.coordinator_epochs == [1]
        assert store.rows[(TENANT, "t")].state is TxnState.COMPLETE_COMMIT
        first_markers.fenced = True  # the partitions now refuse epoch 0
        first_markers.gate.set()
        await asyncio.wait_for(first.wait_completed(TENANT, "t"), 10)
        assert first_markers.coordinator_epochs == []
        assert first.transactions() == []  # forgotten: it reads the store if asked again
        assert store.rows[(TENANT, "t")].state is TxnState.COMPLETE_COMMIT

    run(go())


def test_a_deposed_coordinator_does_not_settle_offsets_of_the_next_transaction():
    """A deposed coordinator whose markers still went through (before its successor's)
    settles its transaction's group offsets only while the stored id holds that
    decision: once the successor has completed it and the producer's next transaction
    has staged offsets under the same producer id (transactions V1: same epoch), those
    are the next transaction's, to be settled by its own decision (found by the
    exactly-once chaos test: an aborted transaction's offsets became the group's)."""

    async def go():
        store = Store()
        first, _, first_markers, _ = make(store)
        _, pid, epoch = await first.init_producer_id(TENANT, "t", 60_000)
        await first.add_partitions(TENANT, "t", pid, epoch, [P0])
        await first.add_offsets(TENANT, "t", pid, epoch, "g")
        assert await first.stage_offsets(TENANT, "t", pid, epoch, "g", ["first"]) == E.NONE
        first_markers.returned.clear()  # its markers are written, then it is held back
        assert await first.end_txn(TENANT, "t", pid, epoch, True) == E.NONE
        while not first_markers.written:
            await asyncio.sleep(0.01)
        second, _, _, _ = make(store)
        await second.load(TENANT, "t")
        await second.wait_completed(TENANT, "t")
        assert store.settled == [("g", pid, True, ["first"])]
        # The producer's next transaction, at the successor, stages its offsets...
        await second.add_partitions(TENANT, "t", pid, epoch, [P0])
        await second.add_offsets(TENANT, "t", pid, epoch, "g")
        assert await second.stage_offsets(TENANT, "t", pid, epoch, "g", ["next"]) == E.NONE
        # ...when the deposed coordinator goes on to settle.
        first_markers.returned.set()
        await asyncio.wait_for(first.wait_completed(TENANT, "t"), 10)
        assert store.settled == [("g", pid, True, ["first"])]  # nothing more
        assert await second.pending_partitions(TENANT, "g") == {"next"}
        assert first.transactions() == []  # forgotten: it reads the store if asked again
        # The next transaction's own decision settles them.
        assert await second.end_txn(TENANT, "t", pid, epoch, False) == E.NONE
        await second.wait_completed(TENANT, "t")
        assert store.settled[-1] == ("g", pid, False, ["next"])

    run(go())


def test_a_coordinator_that_takes_an_id_back_while_writing_markers_completes_it():
    async def go():
        c, store, markers, _ = make()
        _, pid, epoch = await c.init_producer_id(TENANT, "t", 60_000)
        await c.add_partitions(TENANT, "t", pid, epoch, [P0])
        markers.gate.clear()
        assert await c.end_txn(TENANT, "t", pid, epoch, True) == E.NONE
        c.forget(lambda tenant, name: False)  # placed elsewhere for a moment...
        again = await c.load(TENANT, "t")  # ...and back: taken over anew
        assert again is not None and again.coordinator_epoch == 1
        markers.gate.set()
        await asyncio.wait_for(c.wait_completed(TENANT, "t"), 10)
        assert store.rows[(TENANT, "t")].state is TxnState.COMPLETE_COMMIT

    run(go())


def test_transactions_v2_bump_the_epoch_with_every_decision():
    """EndTxn v5 (KIP-890 part 2), as Kafka's coordinator answers it: the decision bumps
    the epoch (the markers carry the new one), the answer names the next transaction's
    id and epoch, retries at the old epoch are answered as the first request was."""

    async def go():
        c, store, markers, _ = make()
        _, pid, epoch = await c.init_producer_id(TENANT, "t", 60_000)
        await c.add_partitions(TENANT, "t", pid, epoch, [P0, P1])
        markers.gate.clear()
        assert await c.end_txn_v2(TENANT, "t", pid, epoch, True) == (E.NONE, pid, epoch + 1)
        stored = store.rows[(TENANT, "t")]
        assert (stored.state, stored.producer_epoch) == (TxnState.PREPARE_COMMIT, epoch + 1)
        # A retry while the markers are written; the opposite decision; a zombie.
        assert (await c.end_txn_v2(TENANT, "t", pid, epoch, True))[0] == E.CONCURRENT_TRANSACTIONS
        assert (await c.end_txn_v2(TENANT, "t", pid, epoch, False))[0] == E.INVALID_TXN_STATE
        assert (await c.end_txn_v2(TENANT, "t", pid, epoch - 1, True))[0] == E.PRODUCER_FENCED
        markers.gate.set()
        await c.wait_completed(TENANT, "t")
        assert markers.written[-1] == ("t", pid, epoch + 1, True, frozenset({P0, P1}))
        assert store.rows[(TENANT, "t")].state is TxnState.COMPLETE_COMMIT
        # The retry of the commit, once complete: answered as the first one was.
        assert await c.end_txn_v2(TENANT, "t", pid, epoch, True) == (E.NONE, pid, epoch + 1)
        assert (await c.end_txn_v2(TENANT, "t", pid, epoch, False))[0] == E.INVALID_TXN_STATE
        # Nothing to commit at the current epoch; an abort with nothing open bumps it.
        new = epoch + 1
        assert (await c.end_txn_v2(TENANT, "t", pid, new, True))[0] == E.INVALID_TXN_STATE
        assert await c.end_txn_v2(TENANT, "t", pid, new, False) == (E.NONE, pid, new + 1)
        await c.wait_completed(TENANT, "t")
        assert markers.written[-1] == ("t", pid, new + 1, False, frozenset())
        # The next transaction runs at the epoch the answer named.
        assert await c.add_partitions(TENANT, "t", pid, new + 1, [P0]) == E.NONE
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P0]) == E.PRODUCER_FENCED
        assert await c.end_txn_v2(TENANT, "u", pid, 0, True) == (
            E.INVALID_PRODUCER_ID_MAPPING,
            -1,
            -1,
        )

    run(go())


def test_transactions_v2_move_to_a_new_producer_id_when_the_epoch_runs_out():
    async def go():
        store = Store()
        last = TxnMetadata(
            TENANT,
            "t",
            77,
            MAX_PRODUCER_EPOCH,
            MAX_PRODUCER_EPOCH - 1,
            60_000,
            TxnState.ONGOING,
            frozenset({P0}),
            start_ms=1,
        )
        store.rows[(TENANT, "t")] = last
        c, _, markers, _ = make(store)
        error, fresh, epoch = await c.end_txn_v2(TENANT, "t", 77, MAX_PRODUCER_EPOCH, True)
        assert error == E.NONE and fresh != 77 and epoch == 0
        await c.wait_completed(TENANT, "t")
        # The markers at the old id and the last epoch; then the id moves.
        assert markers.written == [("t", 77, MAX_PRODUCER_EPOCH + 1, True, frozenset({P0}))]
        done = store.rows[(TENANT, "t")]
        assert (done.producer_id, done.producer_epoch, done.previous_producer_id) == (
            fresh,
            0,
            77,
        )
        assert done.next_producer_id == -1
        # A retry from before the move is answered with the new id.
        assert await c.end_txn_v2(TENANT, "t", 77, MAX_PRODUCER_EPOCH, True) == (E.NONE, fresh, 0)
        assert await c.add_partitions(TENANT, "t", fresh, 0, [P0]) == E.NONE

    run(go())


def test_the_state_table_refuses_what_kafka_refuses():
    txn = TxnMetadata(TENANT, "t", 1, 0, -1, 60_000, TxnState.EMPTY)
    with pytest.raises(IllegalTransition):
        txn.to(TxnState.PREPARE_COMMIT, 0)  # nothing to commit
    ongoing = txn.to(TxnState.ONGOING, 1)
    with pytest.raises(IllegalTransition):
        ongoing.to(TxnState.COMPLETE_ABORT, 2)  # markers first
    assert (
        dataclasses.replace(ongoing, state=TxnState.PREPARE_ABORT)
        .to(TxnState.COMPLETE_ABORT, 3)
        .state
        is TxnState.COMPLETE_ABORT
    )


def test_the_broker_stores_serve_the_coordinator():
    """The in-memory MetadataStore (and so the contract-tested Django one) is a TxnStore:
    a transaction goes through it and another coordinator reads the outcome."""
    from data_plane.broker.memory_store import MemoryStore

    async def go():
        store = MemoryStore()
        tenant = store.add_tenant("acme")
        markers = Markers(store)
        c = TransactionCoordinator(store, _in_thread, markers, Clock())
        _, pid, epoch = await c.init_producer_id(tenant, "t", 60_000)
        await c.add_partitions(tenant, "t", pid, epoch, [P0])
        assert await c.end_txn(tenant, "t", pid, epoch, commit=False) == E.NONE
        await c.wait_completed(tenant, "t")
        again = TransactionCoordinator(store, _in_thread, markers, Clock())
        loaded = await again.load(tenant, "t")
        assert loaded is not None and loaded.state is TxnState.COMPLETE_ABORT
        assert markers.written == [("t", pid, epoch, False, frozenset({P0}))]

    run(go())


def test_offsets_are_staged_only_inside_the_transaction_that_holds_the_group():
    async def go():
        c, store, markers, _ = make()
        _, pid, epoch = await c.init_producer_id(TENANT, "t", 60_000)
        # Before AddOffsetsToTxn: not in a transaction with the group.
        assert await c.stage_offsets(TENANT, "t", pid, epoch, "g", ["o1"]) == E.INVALID_TXN_STATE
        assert await c.add_offsets(TENANT, "t", pid, epoch, "g") == E.NONE
        assert await c.stage_offsets(TENANT, "t", pid, epoch, "other", ["o"]) == (
            E.INVALID_TXN_STATE
        )
        assert await c.stage_offsets(TENANT, "t", pid, epoch - 1, "g", ["o"]) == E.PRODUCER_FENCED
        assert await c.stage_offsets(TENANT, "t", pid + 1, epoch, "g", ["o"]) == (
            E.INVALID_PRODUCER_ID_MAPPING
        )
        assert await c.stage_offsets(TENANT, "t", pid, epoch, "g", ["o2"]) == E.NONE
        assert await c.pending_partitions(TENANT, "g") == {"o2"}
        markers.gate.clear()
        assert await c.end_txn(TENANT, "t", pid, epoch, commit=False) == E.NONE
        # Being decided: too late to add offsets to it.
        assert await c.stage_offsets(TENANT, "t", pid, epoch, "g", ["o3"]) == E.INVALID_TXN_STATE
        markers.gate.set()
        await c.wait_completed(TENANT, "t")
        assert store.settled == [("g", pid, False, ["o2"])]

    run(go())


def test_a_leader_verifies_a_partition_against_the_stored_transaction():
    async def go():
        c, _, _, _ = make()
        _, pid, epoch = await c.init_producer_id(TENANT, "t", 60_000)
        # Kafka's answers to a leader's verification (KIP-890 part 1).
        assert await c.verify(TENANT, "t", pid, epoch, P0) == E.TRANSACTION_ABORTABLE  # no txn
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P0]) == E.NONE
        assert await c.verify(TENANT, "t", pid, epoch, P0) == E.NONE
        assert await c.verify(TENANT, "t", pid, epoch, P1) == E.TRANSACTION_ABORTABLE  # not added
        assert await c.verify(TENANT, "t", pid + 1, epoch, P0) == E.INVALID_PRODUCER_ID_MAPPING
        assert await c.verify(TENANT, "nobody", pid, epoch, P0) == E.INVALID_PRODUCER_ID_MAPPING
        assert await c.verify(TENANT, "t", pid, epoch + 1, P0) == E.INVALID_PRODUCER_EPOCH
        c.markers.gate.clear()  # decided, its markers not written yet
        assert await c.end_txn(TENANT, "t", pid, epoch, True) == E.NONE
        assert await c.verify(TENANT, "t", pid, epoch, P0) == E.CONCURRENT_TRANSACTIONS
        c.markers.gate.set()
        await c.wait_completed(TENANT, "t")
        assert await c.add_partitions(TENANT, "t", pid, epoch, [P0]) == E.NONE
        assert await c.init_producer_id(TENANT, "t", 60_000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
        # The fenced instance's epoch is older now.
        assert await c.verify(TENANT, "t", pid, epoch, P0) == E.INVALID_PRODUCER_EPOCH

    run(go())


def test_a_coordinator_that_lost_the_id_to_another_is_told_so():
    """Two brokers both think they coordinate an id (the placement moved): the store
    keeps only writes on top of the version they replace, so the stale one fails and
    reads the id afresh on its next request."""

    async def go():
        old, store, _, _ = make()
        _, pid, epoch = await old.init_producer_id(TENANT, "t", 60_000)
        new, _, _, _ = make(store)
        assert await new.init_producer_id(TENANT, "t", 60_000) == (E.NONE, pid, epoch + 1)
        with pytest.raises(NotCoordinator):
            await old.add_partitions(TENANT, "t", pid, epoch, [P0])
        assert store.rows[(TENANT, "t")].producer_epoch == epoch + 1
        # Read afresh: the old instance's epoch is fenced now, by either coordinator.
        assert await old.add_partitions(TENANT, "t", pid, epoch, [P0]) == E.PRODUCER_FENCED
        old.forget(lambda tenant_id, transactional_id: False)
        assert old.transactions() == []

    run(go())
