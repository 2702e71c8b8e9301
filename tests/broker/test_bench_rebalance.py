"""The rebalance benchmark command runs end to end (quick classic mode; no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 60
MEMBERS = 4


@pytest.mark.slow
def test_quick_rebalance_benchmark_prints_each_event():
    result = subprocess.run(
        [sys.executable, "-m", "bench.rebalance", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    # Classic only by default in quick mode: no consumer-protocol rows, so no ratios line.
    assert [r["workload"] for r in rows] == [
        "rebalance_join",
        "rebalance_leave",
        "rebalance_kill9",
    ]
    join, leave, kill9 = rows
    assert (join["members_before"], join["members_after"]) == (MEMBERS, MEMBERS + 1)
    assert (leave["members_before"], leave["members_after"]) == (MEMBERS + 1, MEMBERS)
    assert (kill9["members_before"], kill9["members_after"]) == (MEMBERS, MEMBERS - 1)
    for row in rows:
        assert row["protocol"] == "classic"
        assert row["strategy"] == "cooperative-sticky"
        assert row["session_timeout_ms"] == 6000
        assert row["heartbeat_interval_ms"] == 500
        assert row["partitions"] == PARTITIONS
        assert row["member_errors"] == []
        # Balanced shares covering every partition once.
        shares = row["shares_after"]
        assert len(shares) == row["members_after"]
        assert sum(shares) == PARTITIONS
        assert max(shares) - min(shares) <= 1
        assert 0 < row["assigned_s"] <= row["done_s"]
        assert 0 < row["fetching_s"] <= row["done_s"]
        assert row["done_s"] == max(row["assigned_s"], row["fetching_s"])
        assert row["moved_partitions"] > 0
        assert row["kept_partitions"] > 0
        assert row["moved_partitions"] + row["kept_partitions"] == PARTITIONS
        assert row["kept_max_gap_s"] > 0
        assert row["quiet_max_gap_s"] > 0
        assert 0 < row["quiet_window_s"] <= row["done_s"]
        produced = row["produced"]
        assert produced["errors"] == 0
        assert 0 < produced["delivered"] <= produced["sent"]
    assert join["initial_join_s"] > 0
    # The member that left or was killed had a share, and only its partitions moved.
    assert leave["moved_partitions"] >= PARTITIONS // (MEMBERS + 1)
    assert kill9["moved_partitions"] >= PARTITIONS // MEMBERS
