"""The consumer-group benchmark command runs end to end (quick mode; no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = [
    "rebalance_add_fourth_member",
    "rebalance_add_fourth_member_cooperative_sticky",
    "rebalance_after_kill9",
    "offset_commit_latency",
]


def covers_all(assignments, members, each):
    assert len(assignments) == members
    assert all(len(a) == each for a in assignments)
    assert sorted(p for a in assignments for p in a) == list(range(12))


@pytest.mark.slow
def test_quick_groups_benchmark_prints_every_workload():
    result = subprocess.run(
        [sys.executable, "-m", "bench.groups", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["workload"] for r in rows] == WORKLOADS
    by_name = {r["workload"]: r for r in rows}
    for name in WORKLOADS[:3]:
        row = by_name[name]
        assert row["metadata_store"] in {"postgres", "sqlite"}
        assert row["group_initial_rebalance_delay_ms"] >= 0
        assert row["session_timeout_ms"] == 6000
        assert row["repeats"] == 1
        assert row["timeouts"] == 0
        assert row["seconds_median"] > 0
    for name in WORKLOADS[:2]:  # the fourth member joined: four shares of three
        covers_all(by_name[name]["assignments_after"], members=4, each=3)
    # SIGKILL one of four: the three survivors share all twelve.
    covers_all(by_name["rebalance_after_kill9"]["assignments_after"], members=3, each=4)
    commits = by_name["offset_commit_latency"]
    assert commits["commits"] > 0
    assert commits["errors"] == 0
    assert commits["last_commit_read_back"] is True
    assert commits["p50_ms"] <= commits["p99_ms"] <= commits["max_ms"]
    assert commits["store_baseline"]["commits"] > 0
