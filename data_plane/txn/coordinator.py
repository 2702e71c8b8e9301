"""The transaction coordinator's state machine (KIP-98, Step 13), sans wire protocol.

Each request on a transactional id is answered from its :class:`TxnMetadata` and, when it
changes it, only after the new value is durable in the :class:`TxnStore` (Kafka writes its
``__transaction_state`` log before answering). Requests on one id are serialised by a lock
per id; different ids run concurrently.

* **InitProducerId** hands out a producer id at epoch 0 for a new id, else bumps the epoch
  (a new producer id once the epoch would pass :data:`MAX_PRODUCER_EPOCH`), which fences
  the previous instance: its requests now fail with PRODUCER_FENCED. A transaction still
  in progress is aborted first, at the bumped epoch, and the caller is told
  CONCURRENT_TRANSACTIONS until the abort is complete (it retries). KIP-360: a producer
  that names its current id and epoch may bump them itself; one naming any other is
  fenced.
* **AddPartitionsToTxn / AddOffsetsToTxn** check the producer id (INVALID_PRODUCER_ID_
  MAPPING) and epoch (PRODUCER_FENCED), refuse while markers are being written
  (CONCURRENT_TRANSACTIONS), and move the id to Ongoing with the partitions or group
  added (nothing is written when all were in already).
* **EndTxn** moves an Ongoing transaction to PrepareCommit or PrepareAbort, answers, and
  then has the :class:`MarkerWriter` write the markers to every partition (and the
  groups' pending offsets decided) before CompleteCommit / CompleteAbort is written. A
  retried EndTxn is answered as the first one was; a conflicting one is INVALID_TXN_STATE.
* **Timeouts**: :meth:`abort_expired` fences and aborts transactions in progress for
  longer than their ``transaction.timeout.ms``.
* **Failover**: a coordinator that reads an id from the store takes it over with a
  bumped coordinator epoch, written before anything else, and finishes writing the
  markers of a transaction found in PrepareCommit or PrepareAbort (:meth:`load`). Its
  markers carry that epoch; a partition refuses markers from an older one, so a deposed
  coordinator still writing a finished transaction's markers cannot end the producer's
  next transaction there (:class:`MarkersFenced`: it gives up).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from data_plane.protocol.errors import ErrorCode as E
from data_plane.txn.model import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TxnMetadata,
    TxnPartition,
    TxnState,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms


class TxnStore(Protocol):
    """Durable transaction state (the control plane's, or in memory for tests)."""

    def load_transaction(self, tenant_id: int, transactional_id: str) -> TxnMetadata | None: ...

    def save_transaction(self, txn: TxnMetadata) -> bool:
        """Store ``txn`` if what is stored is its previous version (``txn.version - 1``;
        nothing stored counts as -1); False, storing nothing, otherwise."""
        ...

    def allocate_producer_ids(self, count: int) -> int: ...

    def list_transactions(self, tenant_id: int) -> list[TxnMetadata]: ...

    def stage_txn_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        group_id: str,
        offsets: list[Any],
        check: Callable[[TxnMetadata | None], int],
    ) -> int: ...

    def settle_txn_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        group_id: str,
        commit: bool,
        check: Callable[[TxnMetadata | None], bool],
    ) -> bool: ...

    def pending_txn_partitions(self, tenant_id: int, group_id: str) -> set[tuple[str, int]]: ...


class MarkerWriter(Protocol):
    async def write_markers(self, txn: TxnMetadata, commit: bool) -> None:
        """Write the commit or abort marker to each of ``txn``'s partitions (at its
        producer id and epoch) and settle its groups' transactional offsets; return once
        every partition has it (a deleted partition counts as done). Retries inside."""
        ...


Call = Callable[..., Awaitable[Any]]


class MarkersFenced(Exception):
    """A partition refused a marker as written by a deposed coordinator (an older
    coordinator epoch) or at an older producer epoch: another coordinator has decided."""


class NotCoordinator(Exception):
    """The id's stored state moved on without this coordinator (another broker took it
    over): the request is answered NOT_COORDINATOR and the client looks again."""


class TransactionCoordinator:
    def __init__(
        self,
        store: TxnStore,
        call: Call,
        markers: MarkerWriter,
        clock: Callable[[], int],
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
        end_wait_s: float = 0.0,
    ) -> None:
        self.store = store
        self._call = call  # runs a blocking store call off the event loop
        self.markers = markers
        self.clock = clock
        self.max_timeout_ms = max_timeout_ms
        # How long EndTxn waits for the markers before answering (0: not at all).
        self.end_wait_s = end_wait_s
        self._txns: dict[tuple[int, str], TxnMetadata] = {}
        self._locks: dict[tuple[int, str], asyncio.Lock] = {}
        self._completing: dict[tuple[int, str], asyncio.Task[None]] = {}

    # --- state ------------------------------------------------------------------------------

    def _lock(self, key: tuple[int, str]) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _get(self, key: tuple[int, str]) -> TxnMetadata | None:
        txn = self._txns.get(key)
        if txn is None:
            txn = await self._call(self.store.load_transaction, *key)
            if txn is not None:
                # A takeover: this coordinator's epoch for the id is durable before it
                # writes anything else (markers included).
                self._txns[key] = txn
                bumped = dataclasses.replace(txn, coordinator_epoch=txn.coordinator_epoch + 1)
                txn = await self._save(bumped)
                self._resume(txn)
        return txn

    async def _save(self, txn: TxnMetadata) -> TxnMetadata:
        key = (txn.tenant_id, txn.transactional_id)
        held = self._txns.get(key)
        txn = dataclasses.replace(txn, version=held.version + 1 if held is not None else 0)
        if not await self._call(self.store.save_transaction, txn):
            self._txns.pop(key, None)  # read afresh if this broker coordinates it again
            raise NotCoordinator(f"{txn.transactional_id} was changed by another coordinator")
        self._txns[key] = txn
        return txn

    def forget(self, owned: Callable[[int, str], bool]) -> None:
        """Drop what this coordinator holds of ids it no longer coordinates (a later
        request reads the store again); markers being written finish or lose the race."""
        for key in [k for k in self._txns if not owned(*k)]:
            del self._txns[key]

    async def load(self, tenant_id: int, transactional_id: str) -> TxnMetadata | None:
        """This coordinator takes the id over: read its state, finish a decided
        transaction whose markers were not all written."""
        async with self._lock((tenant_id, transactional_id)):
            return await self._get((tenant_id, transactional_id))

    def transactions(self) -> list[TxnMetadata]:
        """What this coordinator holds (DescribeTransactions / ListTransactions)."""
        return list(self._txns.values())

    # --- InitProducerId --------------------------------------------------------------------

    async def init_producer_id(
        self,
        tenant_id: int,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch)."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return E.INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        key = (tenant_id, transactional_id)
        async with self._lock(key):
            txn = await self._get(key)
            now = self.clock()
            if txn is None or txn.state is TxnState.DEAD:
                first = await self._call(self.store.allocate_producer_ids, 1)
                txn = TxnMetadata(
                    tenant_id,
                    transactional_id,
                    producer_id=first,
                    producer_epoch=0,
                    last_producer_epoch=NO_PRODUCER_EPOCH,
                    timeout_ms=timeout_ms,
                    state=TxnState.EMPTY,
                    updated_ms=now,
                )
                await self._save(txn)
                return E.NONE, txn.producer_id, txn.producer_epoch
            if txn.state.deciding:
                return E.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if expected_producer_id != NO_PRODUCER_ID and not _is_current(
                txn, expected_producer_id, expected_epoch
            ):
                return E.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if txn.state is TxnState.ONGOING:
                # The previous instance's transaction is aborted at a bumped epoch, which
                # fences it; the caller retries once the abort is complete.
                await self._prepare(txn, commit=False, now=now, bump=True)
                return E.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            producer_id, epoch = txn.producer_id, txn.producer_epoch + 1
            if epoch > MAX_PRODUCER_EPOCH:
                producer_id, epoch = await self._call(self.store.allocate_producer_ids, 1), 0
            txn = await self._save(
                txn.to(
                    TxnState.EMPTY,
                    now,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    last_producer_epoch=txn.producer_epoch,
                    timeout_ms=timeout_ms,
                    partitions=frozenset(),
                    groups=frozenset(),
                    start_ms=-1,
                )
            )
            return E.NONE, txn.producer_id, txn.producer_epoch

    # --- adding to a transaction -----------------------------------------------------------

    async def add_partitions(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TxnPartition],
    ) -> int:
        wanted = frozenset(partitions)
        return await self._add(tenant_id, transactional_id, producer_id, epoch, wanted, None)

    async def add_offsets(
        self, tenant_id: int, transactional_id: str, producer_id: int, epoch: int, group: str
    ) -> int:
        return await self._add(tenant_id, transactional_id, producer_id, epoch, frozenset(), group)

    async def _add(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: frozenset[TxnPartition],
        group: str | None,
    ) -> int:
        key = (tenant_id, transactional_id)
        async with self._lock(key):
            txn = await self._get(key)
            error = _check_producer(txn, producer_id, epoch)
            if error != E.NONE:
                return error
            assert txn is not None
            if txn.state.deciding:
                return E.CONCURRENT_TRANSACTIONS
            groups = frozenset({group}) if group is not None else frozenset()
            starting = txn.state is not TxnState.ONGOING
            if not starting and partitions <= txn.partitions and groups <= txn.groups:
                return E.NONE  # all in already: nothing to write
            now = self.clock()
            if not starting:  # adding to the transaction in progress
                partitions, groups = txn.partitions | partitions, txn.groups | groups
            await self._save(
                txn.to(
                    TxnState.ONGOING,
                    now,
                    partitions=partitions,
                    groups=groups,
                    start_ms=now if starting else txn.start_ms,
                )
            )
            return E.NONE

    async def stage_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group: str,
        offsets: list[Any],
    ) -> int:
        """TxnOffsetCommit, at the group's coordinator (which may be another broker than
        the id's): the offsets (the group coordinator's ``OffsetRecord``s, opaque here:
        groups and transactions are siblings) are staged only while the id's transaction
        is in progress with this producer and epoch and holds the group, checked against
        the stored state under the store's lock (it cannot be decided meanwhile)."""

        def check(txn: TxnMetadata | None) -> int:
            error = _check_producer(txn, producer_id, epoch)
            if error != E.NONE:
                return error
            assert txn is not None
            if txn.state is not TxnState.ONGOING or group not in txn.groups:
                return E.INVALID_TXN_STATE
            return E.NONE

        return int(
            await self._call(
                self.store.stage_txn_offsets,
                tenant_id,
                transactional_id,
                producer_id,
                group,
                offsets,
                check,
            )
        )

    async def pending_partitions(self, tenant_id: int, group: str) -> set[tuple[str, int]]:
        """The group's partitions with offsets of transactions not yet decided."""
        found: set[tuple[str, int]] = await self._call(
            self.store.pending_txn_partitions, tenant_id, group
        )
        return found

    async def verify(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partition: TxnPartition,
    ) -> int:
        """KIP-890 part 1, at a partition's leader before a producer's first transactional
        batch there: is the partition in the id's transaction in progress, at this
        producer and epoch? Read from the store (the coordinator may be another broker),
        where AddPartitionsToTxn made it durable before answering. The answers are what
        Kafka's coordinator gives a leader's verification: an unknown id or another
        producer id INVALID_PRODUCER_ID_MAPPING, another epoch INVALID_PRODUCER_EPOCH (the
        leader's word for PRODUCER_FENCED), a transaction being decided
        CONCURRENT_TRANSACTIONS, and a partition not in a transaction in progress
        TRANSACTION_ABORTABLE, so a batch cannot open a transaction its coordinator does
        not know (which would hold the partition's last stable offset back for ever)."""
        txn = await self._call(self.store.load_transaction, tenant_id, transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if epoch != txn.producer_epoch:
            return E.INVALID_PRODUCER_EPOCH
        if txn.state.preparing:
            return E.CONCURRENT_TRANSACTIONS
        if txn.state is not TxnState.ONGOING or partition not in txn.partitions:
            return E.TRANSACTION_ABORTABLE
        return E.NONE

    async def list_stored(self, tenant_id: int) -> list[TxnMetadata]:
        """Every id of the tenant as stored (ListTransactions)."""
        found: list[TxnMetadata] = await self._call(self.store.list_transactions, tenant_id)
        return found

    # --- ending a transaction --------------------------------------------------------------

    async def end_txn(
        self, tenant_id: int, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> int:
        key = (tenant_id, transactional_id)
        async with self._lock(key):
            txn = await self._get(key)
            error = _check_producer(txn, producer_id, epoch)
            if error != E.NONE:
                return error
            assert txn is not None
            state = txn.state
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if state is done:
                return E.NONE  # a retry of the EndTxn that ended it
            if state is preparing:
                return E.CONCURRENT_TRANSACTIONS  # a retry while its markers are written
            if state is not TxnState.ONGOING:
                return E.INVALID_TXN_STATE
            await self._prepare(txn, commit=commit, now=self.clock(), bump=False)
            completing = self._completing.get(key)
        if completing is not None and self.end_wait_s > 0:
            # The decision is durable: the answer may go now. Waiting (a little) for the
            # markers first spares the client its next AddPartitionsToTxn being told
            # CONCURRENT_TRANSACTIONS and retried after a back-off (librdkafka's 20 ms).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(completing), self.end_wait_s)
        return E.NONE

    async def end_txn_v2(
        self, tenant_id: int, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> tuple[int, int, int]:
        """EndTxn v5, transactions V2 (KIP-890 part 2): (error, producer id, epoch).

        Every decision bumps the epoch, durably with PrepareCommit/PrepareAbort, and the
        markers carry the bumped epoch, so a partition takes no late batch of the ended
        transaction (its epoch is older) and the next transaction starts at sequence 0.
        The answer names the producer id and epoch of the next transaction: the bumped
        epoch, or a new producer id at epoch 0 once the epoch would pass
        ``MAX_PRODUCER_EPOCH``. A retry at the epoch before the bump is answered as the
        first request was (NONE with the same id and epoch once complete,
        CONCURRENT_TRANSACTIONS while its markers are written); an abort at the current
        epoch with no transaction in progress bumps the epoch too (nothing to mark).
        """
        key = (tenant_id, transactional_id)
        none = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        async with self._lock(key):
            txn = await self._get(key)
            if txn is None or txn.state is TxnState.DEAD:
                return (E.INVALID_PRODUCER_ID_MAPPING, *none)
            state = txn.state
            retry_after_bump = txn.producer_id == producer_id and epoch == txn.producer_epoch - 1
            retry_after_new_id = (
                txn.previous_producer_id == producer_id
                and epoch == MAX_PRODUCER_EPOCH
                and txn.producer_epoch == 0
            )
            if txn.producer_id != producer_id and not retry_after_new_id:
                return (E.INVALID_PRODUCER_ID_MAPPING, *none)
            if state is TxnState.PREPARE_EPOCH_FENCE:
                return (E.CONCURRENT_TRANSACTIONS, *none)
            current = epoch == txn.producer_epoch
            if state in (TxnState.ONGOING, TxnState.EMPTY):
                valid = current
            elif state.preparing:
                valid = retry_after_bump
            else:  # CompleteCommit / CompleteAbort
                valid = retry_after_bump or retry_after_new_id or current
            if not valid:
                return (E.PRODUCER_FENCED, *none)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if state.preparing:
                return (
                    E.CONCURRENT_TRANSACTIONS if state is preparing else E.INVALID_TXN_STATE,
                    *none,
                )
            if state.complete and not current:  # a retry of the EndTxn that ended it
                if state is done:
                    return E.NONE, txn.producer_id, txn.producer_epoch
                return (E.INVALID_TXN_STATE, *none)
            if state is not TxnState.ONGOING and commit:
                return (E.INVALID_TXN_STATE, *none)  # nothing to commit
            now = self.clock()
            if txn.producer_epoch >= MAX_PRODUCER_EPOCH:
                # The markers go at the last epoch; the next transaction gets a new id.
                fresh = await self._call(self.store.allocate_producer_ids, 1)
                changes: dict[str, Any] = {
                    "producer_epoch": MAX_PRODUCER_EPOCH + 1,
                    "next_producer_id": fresh,
                }
            else:
                changes = {"producer_epoch": txn.producer_epoch + 1}
            if state is not TxnState.ONGOING:
                changes.update(partitions=frozenset(), groups=frozenset(), start_ms=now)
            decided = await self._save(
                txn.to(preparing, now, last_producer_epoch=txn.producer_epoch, **changes)
            )
            self._resume(decided)
            completing = self._completing.get(key)
            answer = (
                (E.NONE, decided.next_producer_id, 0)
                if decided.next_producer_id >= 0
                else (E.NONE, decided.producer_id, decided.producer_epoch)
            )
        if completing is not None and self.end_wait_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(completing), self.end_wait_s)
        return answer

    async def _prepare(self, txn: TxnMetadata, *, commit: bool, now: int, bump: bool) -> None:
        """Write PrepareCommit/PrepareAbort (at a bumped epoch when fencing), then complete
        in the background (:meth:`_complete`)."""
        changes: dict[str, Any] = {}
        if bump:
            changes = {
                "producer_epoch": txn.producer_epoch + 1,
                "last_producer_epoch": txn.producer_epoch,
            }
            txn = txn.to(TxnState.PREPARE_EPOCH_FENCE, now, **changes)
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        txn = await self._save(txn.to(state, now))
        self._resume(txn)

    def _resume(self, txn: TxnMetadata) -> None:
        """Write the markers of a decided transaction and then complete it (once)."""
        if not txn.state.preparing:
            return
        key = (txn.tenant_id, txn.transactional_id)
        running = self._completing.get(key)
        if running is not None and not running.done():
            return
        task = asyncio.get_running_loop().create_task(self._complete(txn))
        self._completing[key] = task

    async def _complete(self, txn: TxnMetadata) -> None:
        commit = txn.state is TxnState.PREPARE_COMMIT
        key = (txn.tenant_id, txn.transactional_id)
        delay = 0.1
        while True:  # the decision stands: its markers are written, however long it takes
            try:
                await self.markers.write_markers(txn, commit)
                # The groups' offsets of the transaction become theirs, or are dropped,
                # only while the stored id still holds this decision: once another
                # coordinator has completed it, what is staged under the producer id
                # belongs to the producer's next transaction.
                for group in sorted(txn.groups):
                    if not await self._call(
                        self.store.settle_txn_offsets,
                        txn.tenant_id,
                        txn.transactional_id,
                        txn.producer_id,
                        group,
                        commit,
                        lambda stored: stored is not None and _decision(stored) == _decision(txn),
                    ):
                        logger.info("%r: completed by another coordinator meanwhile", key[1])
                        await self._drop(txn)
                        return
                break
            except MarkersFenced as exc:
                logger.info("%r: %s; its markers are another coordinator's", key[1], exc)
                await self._drop(txn)
                return
            except Exception:
                logger.warning(
                    "writing the markers of %r failed; retrying in %.1f s",
                    txn.transactional_id,
                    delay,
                    exc_info=True,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        async with self._lock(key):
            current = self._txns.get(key)
            if current is None or _decision(current) != _decision(txn):
                return  # changed meanwhile (another coordinator took over)
            # ``current`` may be a later version of the same decision (this coordinator
            # gave the id up and took it over again while the markers were written).
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            moved: dict[str, Any] = {}
            if current.next_producer_id >= 0:  # transactions V2: the epoch ran out
                moved = {
                    "producer_id": current.next_producer_id,
                    "producer_epoch": 0,
                    "previous_producer_id": current.producer_id,
                    "next_producer_id": NO_PRODUCER_ID,
                }
            try:
                await self._save(
                    current.to(
                        done,
                        self.clock(),
                        partitions=frozenset(),
                        groups=frozenset(),
                        start_ms=-1,
                        **moved,
                    )
                )
            except NotCoordinator:
                logger.info("%r: completed by another coordinator", txn.transactional_id)

    async def _drop(self, txn: TxnMetadata) -> None:
        """Forget ``txn`` (another coordinator finished it): read afresh if asked again."""
        key = (txn.tenant_id, txn.transactional_id)
        async with self._lock(key):
            if self._txns.get(key) == txn:
                del self._txns[key]

    async def wait_completed(self, tenant_id: int, transactional_id: str) -> None:
        """Until the markers of the id's decided transaction are written (tests, shutdown)."""
        task = self._completing.get((tenant_id, transactional_id))
        if task is not None:
            await task

    # --- timeouts ---------------------------------------------------------------------------

    async def abort_expired(self) -> list[str]:
        """Fence and abort every transaction in progress longer than its timeout; the ids."""
        now = self.clock()
        aborted = []
        for key, txn in list(self._txns.items()):
            if not txn.expired(now):
                continue
            async with self._lock(key):
                txn = self._txns[key]
                if txn.expired(now):
                    logger.info(
                        "aborting transaction of %r (tenant %s): open for %d ms, timeout %d ms",
                        txn.transactional_id,
                        txn.tenant_id,
                        now - txn.start_ms,
                        txn.timeout_ms,
                    )
                    try:
                        await self._prepare(txn, commit=False, now=now, bump=True)
                    except NotCoordinator:
                        continue  # another broker coordinates it now, and will abort it
                    aborted.append(txn.transactional_id)
        return aborted


def _is_current(txn: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """KIP-360: the producer names its current id and epoch (or the epoch before the last
    bump: its own InitProducerId retried after the answer was lost)."""
    if producer_id != txn.producer_id:
        return False
    return epoch in (txn.producer_epoch, txn.last_producer_epoch)


def _decision(txn: TxnMetadata) -> tuple[int, int, TxnState, frozenset[TxnPartition]]:
    """What a decided transaction's markers depend on."""
    return txn.producer_id, txn.producer_epoch, txn.state, txn.partitions


def _check_producer(txn: TxnMetadata | None, producer_id: int, epoch: int) -> int:
    if txn is None or txn.state is TxnState.DEAD or txn.producer_id != producer_id:
        return E.INVALID_PRODUCER_ID_MAPPING
    if epoch != txn.producer_epoch:
        return E.PRODUCER_FENCED
    return E.NONE
