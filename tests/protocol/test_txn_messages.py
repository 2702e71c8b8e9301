"""The transaction APIs' message definitions (Step 13), checked at every version against
kafka-python's classes (generated from Kafka 4's JSON definitions) and kio's, before the
broker serves them (then they join ``APIS`` and test_core.py's check of every API)."""

from __future__ import annotations

import pytest

from data_plane.protocol.messages import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    list_transactions,
    txn_offset_commit,
    write_txn_markers,
)
from tests.protocol.oracle import cross_check

MODULES = [
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    write_txn_markers,
    txn_offset_commit,
    describe_transactions,
    list_transactions,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.REQUEST.name)
@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_every_version_agrees_with_kafkas_definitions(module, nulls):
    low, high = module.VALID
    for version in range(low, high + 1):
        cross_check(module.REQUEST, version, nulls=nulls)
        cross_check(module.RESPONSE, version, nulls=nulls)
