"""The transactions benchmark command runs end to end (quick mode; no timing asserted).

It needs Postgres on 127.0.0.1:5432 (or the server of DATABASE_URL), where it creates and
drops a database of its own.
"""

from __future__ import annotations

import json

import pytest

from tests.broker.test_bench_replication import run_bench

WORKLOADS = [
    "txn_produce_100b_acks_all_rf3",
    "txn_produce_100b_acks_all_rf3_4_producers",
    "consume_transform_produce",
    "read_committed_10pct_aborted",
]


@pytest.mark.slow
def test_quick_transactions_benchmark_prints_every_workload():
    out, err = run_bench("--quick", module="bench.transactions")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["workload"] for r in rows] == WORKLOADS, err[-3000:]
    produce, parallel, ctp, committed = rows
    for row in rows:
        assert (row["brokers"], row["replication_factor"], row["acks"]) == (3, 3, "all")
        assert row["ratio"] > 0
    for run in (produce, parallel):
        assert run["records_per_s"] > 0 and run["baseline_idempotent"]["records_per_s"] > 0
    assert parallel["producers"] == 4
    # Every input record went through the loop, in both modes, and reached the reader.
    assert ctp["latency"]["received"] == ctp["latency"]["sent"] > 0
    at_least_once = ctp["baseline_at_least_once"]
    assert at_least_once["latency"]["received"] == at_least_once["latency"]["sent"]
    assert 0 < ctp["latency"]["p50_ms"] <= ctp["latency"]["p99_ms"]
    # A tenth of the transactions were aborted; read_committed delivered the rest.
    assert committed["aborted_records"] == committed["records"] // 10
