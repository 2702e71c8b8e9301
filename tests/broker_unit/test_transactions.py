"""The transaction APIs through the broker's handlers, in process (one broker, the memory
store): a transaction from InitProducerId to its markers in the log, the refusals and what
they leave behind, transactional offsets, and the describe and list APIs."""

from __future__ import annotations

import asyncio
from typing import Any

from data_plane.acl import Operation, ResourceType
from data_plane.broker.handlers import DISPATCH
from data_plane.broker.handlers.context import RequestContext
from data_plane.log.transactions import ControlType, control_type
from data_plane.metadata.model import Principal
from data_plane.protocol.errors import ErrorCode as E
from data_plane.protocol.messages import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    fetch,
    find_coordinator,
    init_producer_id,
    list_transactions,
    offset_fetch,
    produce,
    txn_offset_commit,
    write_txn_markers,
)
from data_plane.records.batch import iter_batches, read_header
from tests.broker_unit.test_handlers import principal_of, world  # noqa: F401 (fixture)
from tests.log.test_transactions import txn

TXN = ResourceType.TRANSACTIONAL_ID
EVERYTHING = (
    (Operation.ALL, ResourceType.TOPIC),
    (Operation.ALL, ResourceType.GROUP),
    (Operation.ALL, TXN),
)


async def acall(services: Any, principal: Any, key: int, version: int, body: dict) -> Any:
    ctx = RequestContext(services, principal, "127.0.0.1", version, "unit-test")
    return await DISPATCH[key](ctx, body)


def _setup(env):
    store, node, services, acme, _ = env
    store.add_topic(acme, "payments", partitions=2)
    asyncio.run(node.refresh_metadata())
    app = principal_of(store, acme, *EVERYTHING)
    asyncio.run(node.refresh_metadata())
    return store, node, services, acme, app


async def _init(services, app, tid: str = "pay-tx") -> tuple[int, int]:
    answer = await acall(
        services,
        app,
        init_producer_id.KEY,
        4,
        {"transactional_id": tid, "transaction_timeout_ms": 60_000},
    )
    assert answer["error_code"] == E.NONE, answer
    return answer["producer_id"], answer["producer_epoch"]


async def _add(services, app, pid, epoch, topics, tid="pay-tx", version=3) -> dict:
    body = {
        "v3_and_below_transactional_id": tid,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
    }
    answer = await acall(services, app, add_partitions_to_txn.KEY, version, body)
    return {
        (t["name"], r["partition_index"]): r["partition_error_code"]
        for t in answer["results_by_topic_v3_and_below"]
        for r in t["results_by_partition"]
    }


async def _produce(
    services, app, partition: int, records: bytes, tid="pay-tx", version: int = 9
) -> dict:
    body = {
        "transactional_id": tid,
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": "payments", "partition_data": [{"index": partition, "records": records}]}
        ],
    }
    got = await acall(services, app, produce.KEY, version, body)
    return got["responses"][0]["partition_responses"][0]


async def _end(services, app, pid, epoch, commit: bool, tid="pay-tx", version=3) -> int:
    body = {
        "transactional_id": tid,
        "producer_id": pid,
        "producer_epoch": epoch,
        "committed": commit,
    }
    return (await acall(services, app, end_txn.KEY, version, body))["error_code"]


async def _read(services, app, isolation: int) -> list[tuple[int, bool, bool]]:
    """(base offset, transactional, control) of each batch a fetch returns."""
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": isolation,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "payments",
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    got = await acall(services, app, fetch.KEY, 12, body)
    entry = got["responses"][0]["partitions"][0]
    return entry


def _log(node, services, acme, index: int = 0):
    topic = node.snapshot.tenant_topics(acme)["payments"]
    partition, error = services.replicas.leader_partition(topic, index)
    assert error == E.NONE
    return partition.log


def _last_batch(log) -> tuple[bool, bytes]:
    """(control, raw) of the log's last batch."""
    raw = log.read(0, 1 << 20).read()
    pos = 0
    for header in iter_batches(raw):
        last, start = header, pos
        pos += header.size
    return last.is_control, raw[start:pos]


def test_a_transaction_ends_with_a_marker_in_each_partition_it_wrote(world):  # noqa: F811
    _store, node, services, acme, app = _setup(world)

    async def go():
        pid, epoch = await _init(services, app)
        assert await _add(services, app, pid, epoch, {"payments": [0, 1]}) == {
            ("payments", 0): E.NONE,
            ("payments", 1): E.NONE,
        }
        assert (await _produce(services, app, 0, txn(pid, 0, epoch=epoch)))["error_code"] == 0
        log = _log(node, services, acme)
        assert log.last_stable_offset == 0  # open: read_committed readers wait
        committed = (await _read(services, app, 1))["records"]
        assert not committed
        assert await _end(services, app, pid, epoch, commit=True) == E.NONE
        await services.transactions.wait_completed(acme, "pay-tx")
        # Both partitions got a commit marker; partition 1 had no records of it.
        for index in (0, 1):
            control, raw = _last_batch(_log(node, services, acme, index))
            assert control and control_type(raw) is ControlType.COMMIT
        assert log.last_stable_offset == log.high_watermark == 3
        entry = await _read(services, app, 1)
        assert entry["last_stable_offset"] == 3 and entry["aborted_transactions"] == []

        # An aborted one: read_committed readers are told to drop it.
        assert await _add(services, app, pid, epoch, {"payments": [0]}) == {("payments", 0): E.NONE}
        assert (await _produce(services, app, 0, txn(pid, 2, epoch=epoch)))["error_code"] == 0
        assert await _end(services, app, pid, epoch, commit=False) == E.NONE
        await services.transactions.wait_completed(acme, "pay-tx")
        entry = await _read(services, app, 1)
        assert entry["aborted_transactions"] == [{"producer_id": pid, "first_offset": 3}]

    asyncio.run(go())


def test_batches_outside_a_transaction_are_refused_and_nothing_is_stored(world):  # noqa: F811
    store, node, services, acme, app = _setup(world)

    async def go():
        pid, epoch = await _init(services, app)
        log = _log(node, services, acme)
        # Not added to the transaction (KIP-890 part 1): refused, nothing stored.
        refused = await _produce(services, app, 0, txn(pid, 0, epoch=epoch))
        assert refused["error_code"] == E.INVALID_TXN_STATE
        # Produce v11's clients are told TRANSACTION_ABORTABLE (KIP-890): abort and go on.
        refused = await _produce(services, app, 0, txn(pid, 0, epoch=epoch), version=11)
        assert refused["error_code"] == E.TRANSACTION_ABORTABLE
        assert "not in a transaction" in refused["error_message"]
        # Without the transactional id, or another tenant's producer naming it.
        refused = await _produce(services, app, 0, txn(pid, 0, epoch=epoch), tid=None)
        assert refused["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        no_txn_acl = principal_of(store, acme, (Operation.WRITE, ResourceType.TOPIC), name="writer")
        await node.refresh_metadata()
        refused = await _produce(services, no_txn_acl, 0, txn(pid, 0, epoch=epoch))
        assert refused["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert log.log_end_offset == 0
        # The next good request goes in.
        await _add(services, app, pid, epoch, {"payments": [0]})
        assert (await _produce(services, app, 0, txn(pid, 0, epoch=epoch)))["error_code"] == 0
        assert log.log_end_offset == 2
        # A fenced instance (older epoch) is refused even where a transaction is open.
        new_pid, new_epoch = pid, epoch + 1
        answer = await acall(
            services,
            app,
            init_producer_id.KEY,
            4,
            {"transactional_id": "pay-tx", "transaction_timeout_ms": 60_000},
        )
        assert answer["error_code"] == E.CONCURRENT_TRANSACTIONS  # aborting the open one
        await services.transactions.wait_completed(acme, "pay-tx")
        assert (await _init(services, app)) == (new_pid, new_epoch + 1)
        assert await _end(services, app, pid, epoch, commit=True) == E.PRODUCER_FENCED
        assert await _end(services, app, pid, epoch, True, version=1) == E.INVALID_PRODUCER_EPOCH

    asyncio.run(go())


def test_add_partitions_adds_none_when_one_is_refused(world):  # noqa: F811
    store, _node, services, acme, app = _setup(world)

    async def go():
        pid, epoch = await _init(services, app)
        got = await _add(services, app, pid, epoch, {"payments": [0, 7], "nope": [0]})
        assert got == {
            ("payments", 0): E.OPERATION_NOT_ATTEMPTED,
            ("payments", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        txn_state = store.load_transaction(acme, "pay-tx")
        assert txn_state.partitions == frozenset()
        # Wrong producer id / epoch; then the good request succeeds.
        assert await _add(services, app, pid + 1, epoch, {"payments": [0]}) == {
            ("payments", 0): E.INVALID_PRODUCER_ID_MAPPING
        }
        assert await _add(services, app, pid, epoch + 3, {"payments": [0]}) == {
            ("payments", 0): E.PRODUCER_FENCED
        }
        assert await _add(services, app, pid, epoch, {"payments": [0]}) == {("payments", 0): E.NONE}

    asyncio.run(go())


def test_transactional_offsets_show_only_after_the_commit(world):  # noqa: F811
    _store, _node, services, acme, app = _setup(world)

    async def offsets(stable: bool) -> dict:
        body = {
            "groups": [
                {"group_id": "billing", "topics": [{"name": "payments", "partition_indexes": [0]}]}
            ],
            "require_stable": stable,
        }
        got = await acall(services, app, offset_fetch.KEY, 8, body)
        [p] = got["groups"][0]["topics"][0]["partitions"]
        return {"offset": p["committed_offset"], "error": p["error_code"]}

    async def commit_offset(pid, epoch, offset, version=3, **member) -> int:
        body = {
            "transactional_id": "pay-tx",
            "group_id": "billing",
            "producer_id": pid,
            "producer_epoch": epoch,
            "generation_id": member.get("generation", -1),
            "member_id": member.get("member_id", ""),
            "group_instance_id": None,
            "topics": [
                {
                    "name": "payments",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": None,
                        }
                    ],
                }
            ],
        }
        got = await acall(services, app, txn_offset_commit.KEY, version, body)
        return got["topics"][0]["partitions"][0]["error_code"]

    async def go():
        pid, epoch = await _init(services, app)
        # Not added with AddOffsetsToTxn: refused.
        assert await commit_offset(pid, epoch, 5) == E.INVALID_TXN_STATE
        body = {
            "transactional_id": "pay-tx",
            "producer_id": pid,
            "producer_epoch": epoch,
            "group_id": "billing",
        }
        assert (await acall(services, app, add_offsets_to_txn.KEY, 3, body))["error_code"] == 0
        # KIP-447: a member or generation that is not the group's is refused (the group
        # exists, empty, at generation 0).
        await services.groups.commit(
            acme, "billing", member_id="", instance_id=None, generation=-1, offsets=[]
        )
        assert await commit_offset(pid, epoch, 5, member_id="ghost") == E.UNKNOWN_MEMBER_ID
        assert await commit_offset(pid, epoch, 5, generation=4) == E.ILLEGAL_GENERATION
        assert await commit_offset(pid, epoch, 5) == E.NONE
        assert await offsets(stable=False) == {"offset": -1, "error": E.NONE}
        assert await offsets(stable=True) == {"offset": -1, "error": E.UNSTABLE_OFFSET_COMMIT}
        assert await _end(services, app, pid, epoch, commit=True) == E.NONE
        await services.transactions.wait_completed(acme, "pay-tx")
        assert await offsets(stable=True) == {"offset": 5, "error": E.NONE}
        # Aborted: the group keeps 5.
        assert (await acall(services, app, add_offsets_to_txn.KEY, 3, body))["error_code"] == 0
        assert await commit_offset(pid, epoch, 9) == E.NONE
        assert await _end(services, app, pid, epoch, commit=False) == E.NONE
        await services.transactions.wait_completed(acme, "pay-tx")
        assert await offsets(stable=True) == {"offset": 5, "error": E.NONE}

    asyncio.run(go())


def test_describe_and_list_show_the_tenants_transactions_only(world):  # noqa: F811
    store, node, services, _acme, app = _setup(world)
    globex = world[4]

    async def go():
        pid, epoch = await _init(services, app)
        await _add(services, app, pid, epoch, {"payments": [1]})
        got = await acall(
            services,
            app,
            describe_transactions.KEY,
            0,
            {"transactional_ids": ["pay-tx", "unknown"]},
        )
        [one, unknown] = got["transaction_states"]
        assert (one["transaction_state"], one["producer_id"], one["producer_epoch"]) == (
            "Ongoing",
            pid,
            epoch,
        )
        assert one["topics"] == [{"topic": "payments", "partitions": [1]}]
        assert unknown["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
        listed = await acall(
            services,
            app,
            list_transactions.KEY,
            1,
            {
                "state_filters": ["Ongoing", "Bogus"],
                "producer_id_filters": [],
                "duration_filter": -1,
            },
        )
        assert [t["transactional_id"] for t in listed["transaction_states"]] == ["pay-tx"]
        assert listed["unknown_state_filters"] == ["Bogus"]
        other = principal_of(store, globex, *EVERYTHING)
        await node.refresh_metadata()
        theirs = await acall(
            services,
            other,
            list_transactions.KEY,
            0,
            {"state_filters": [], "producer_id_filters": []},
        )
        assert theirs["transaction_states"] == []
        described = await acall(
            services, other, describe_transactions.KEY, 0, {"transactional_ids": ["pay-tx"]}
        )
        assert described["transaction_states"][0]["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND

    asyncio.run(go())


def test_only_brokers_write_markers_and_find_coordinator_needs_describe(world):  # noqa: F811
    store, node, services, acme, app = _setup(world)
    topic = node.snapshot.tenant_topics(acme)["payments"]

    async def go():
        body = {
            "markers": [
                {
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": str(topic.topic_id), "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        }
        got = await acall(services, app, write_txn_markers.KEY, 1, body)
        [part] = got["markers"][0]["topics"][0]["partitions"]
        assert part["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
        assert _log(node, services, acme).log_end_offset == 0
        broker = Principal(0, "", "User:broker", "broker", internal=True, broker=True)
        body["markers"][0]["coordinator_epoch"] = 5
        got = await acall(services, broker, write_txn_markers.KEY, 1, body)
        assert got["markers"][0]["topics"][0]["partitions"][0]["error_code"] == E.NONE
        assert _log(node, services, acme).log_end_offset == 1
        # A deposed coordinator (an older coordinator epoch) is refused, nothing written.
        body["markers"][0]["coordinator_epoch"] = 4
        got = await acall(services, broker, write_txn_markers.KEY, 1, body)
        assert (
            got["markers"][0]["topics"][0]["partitions"][0]["error_code"]
            == E.TRANSACTION_COORDINATOR_FENCED
        )
        assert _log(node, services, acme).log_end_offset == 1

        reader = principal_of(store, acme, (Operation.READ, ResourceType.TOPIC), name="reader")
        await node.refresh_metadata()
        found = await acall(
            services, reader, find_coordinator.KEY, 3, {"key": "pay-tx", "key_type": 1}
        )
        assert found["error_code"] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        found = await acall(
            services, app, find_coordinator.KEY, 3, {"key": "pay-tx", "key_type": 1}
        )
        assert (found["error_code"], found["node_id"]) == (E.NONE, 1)

    asyncio.run(go())


def test_end_txn_v5_bumps_the_epoch_and_the_partition_fences_the_old_one(world):  # noqa: F811
    """Transactions V2's EndTxn (v5): the answer names the bumped epoch, the marker carries
    it, so the partition refuses a late batch at the old epoch and takes the next
    transaction's first batch at the new epoch from sequence 0."""
    _store, node, services, acme, app = _setup(world)

    async def go():
        pid, epoch = await _init(services, app)
        assert await _add(services, app, pid, epoch, {"payments": [0]}) == {("payments", 0): E.NONE}
        assert (await _produce(services, app, 0, txn(pid, 0, epoch=epoch)))["error_code"] == 0
        body = {
            "transactional_id": "pay-tx",
            "producer_id": pid,
            "producer_epoch": epoch,
            "committed": True,
        }
        answer = await acall(services, app, end_txn.KEY, 5, body)
        assert (answer["error_code"], answer["producer_id"], answer["producer_epoch"]) == (
            E.NONE,
            pid,
            epoch + 1,
        )
        await services.transactions.wait_completed(acme, "pay-tx")
        control, raw = _last_batch(_log(node, services, acme))
        assert control and read_header(raw).producer_epoch == epoch + 1
        # A late batch of the ended transaction: fenced by the marker's epoch.
        late = await _produce(services, app, 0, txn(pid, 2, epoch=epoch))
        assert late["error_code"] == E.INVALID_PRODUCER_EPOCH
        # The next transaction, at the new epoch, from sequence 0.
        assert await _add(services, app, pid, epoch + 1, {"payments": [0]}) == {
            ("payments", 0): E.NONE
        }
        nxt = await _produce(services, app, 0, txn(pid, 0, epoch=epoch + 1))
        assert nxt["error_code"] == E.NONE
        # Once the next transaction has begun, the old epoch is fenced.
        again = await acall(services, app, end_txn.KEY, 5, body)
        assert again["error_code"] == E.PRODUCER_FENCED

    asyncio.run(go())
