"""The replication benchmark command runs end to end (quick mode; no timing asserted).

It needs Postgres on 127.0.0.1:5432 (or the server of DATABASE_URL), where it creates and
drops a database of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAILOVER_VARIANTS = 5  # confluent-kafka, kafka-python (3 configurations), aiokafka
WORKLOADS = [
    "produce_100b_acks_all_rf3",
    "e2e_latency_1kib_acks_all_rf3",
    *["leader_kill9_failover"] * FAILOVER_VARIANTS,
]
BROKERS = {1, 2, 3}


def run_bench(*args, timeout=600, module="bench.replication"):
    """(stdout, stderr) of the bench. It runs in a session of its own so that on a timeout
    its brokers and controller are interrupted with it (SIGINT: each cleans up)."""
    with subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as bench:
        try:
            out, err = bench.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(bench.pid, signal.SIGINT)
            try:
                bench.communicate(timeout=60)
            finally:
                with contextlib.suppress(ProcessLookupError):  # whatever is left of it
                    os.killpg(bench.pid, signal.SIGKILL)
            raise
    assert bench.returncode == 0, err[-3000:]
    return out, err


def ordered(row):
    assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]


def check_failover(row, lease=None, err=""):
    if lease is not None:
        assert row["lease_seconds"] == lease
    assert row["kills"] == 2
    # On a stall the bench told stderr what the cluster looked like.
    assert row["failure"] is None, (row, err[-8000:])
    assert row["timeouts"] == 0, (row, err[-8000:])
    assert 0 < row["seconds_median"] <= row["seconds_max"]
    for run in row["runs"]:
        assert run["killed"] in BROKERS
        assert run["resumed_s"] > 0
        assert run["rejoined_isr_s"] >= 0
    assert row["acked"] > 0
    assert row["produce_errors"] == 0
    assert row["undelivered"] == 0
    # Every acknowledged record was read back after the kills.
    assert row["lost"] == 0
    assert row["lost_of_acked"] == f"0/{row['acked']}"
    assert row["consumed"] >= row["acked"]


@pytest.mark.slow
def test_quick_replication_benchmark_prints_every_workload():
    out, err = run_bench("--quick")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["workload"] for r in rows] == WORKLOADS, err[-3000:]
    by_name = {r["workload"]: r for r in rows}
    for row in rows:
        assert row["brokers"] == 3
        assert row["metadata_store"] == "postgres"
        assert (row["replication_factor"], row["min_insync_replicas"]) == (3, 2)
        assert row["acks"] == "all"

    produce = by_name["produce_100b_acks_all_rf3"]
    assert produce["records"] == 40_000
    baseline = produce["baseline_acks1_rf1"]
    for side in (produce, baseline):
        assert side["records_per_s"] > 0
        assert side["errors"] == 0
        assert side["undelivered"] == 0
        assert set(side["leaders"]) <= BROKERS
    assert produce["ratio"] == pytest.approx(
        produce["records_per_s"] / baseline["records_per_s"], abs=0.001
    )

    latency = by_name["e2e_latency_1kib_acks_all_rf3"]
    assert latency["linger_ms"] == 1
    assert latency["sent"] == 10_000
    assert latency["errors"] == 0
    assert latency["acked"] == latency["received"] == latency["sent"]
    ordered(latency)
    ordered(latency["from_produce_call"])
    ordered(latency["produce_ack"])
    assert len(latency["p50_ms_each_second"]) >= 2
    batched = latency["with_linger_5ms"]
    assert batched["linger_ms"] == 5
    assert batched["errors"] == 0
    assert batched["acked"] == batched["received"] == latency["sent"]
    ordered(batched)

    failovers = [r for r in rows if r["workload"] == "leader_kill9_failover"]
    assert {r["client"] for r in failovers} == {"confluent-kafka", "kafka-python", "aiokafka"}
    for row in failovers:
        check_failover(row, lease=3, err=err)  # the default lease, every client library
