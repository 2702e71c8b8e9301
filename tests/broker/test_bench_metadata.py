"""The metadata-at-scale benchmark runs end to end (quick mode; no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The tick is measured as grown and after ANALYZE.
PER_SIZE = [
    "metadata_latency",
    "topic_visible",
    "controller_tick",
    "controller_tick",
    "broker_rss_mb",
]


@pytest.mark.slow
def test_quick_metadata_benchmark_prints_every_workload():
    result = subprocess.run(
        [sys.executable, "-m", "bench.metadata", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["workload"] for r in rows] == [
        "seed",
        *PER_SIZE,
        "seed",
        *PER_SIZE,
        "broker_startup",
        "summary",
    ]
    small, large = rows[1], rows[7]
    # The measured tenant holds the same partitions at both sizes (the REST creations go
    # to another tenant), and the cluster grew from 3 x 10 to 12 x 10 partitions.
    assert small["tenant_partitions"] == large["tenant_partitions"] == 10
    assert rows[-1]["small_partitions"] == 30 and rows[-1]["large_partitions"] == 120
    assert rows[2]["creations"] == rows[8]["creations"] == 10
    ticks = [r for r in rows if r["workload"] == "controller_tick"]
    assert [r["analyzed"] for r in ticks] == [False, True, False, True]
    assert all(r["ticks"] == 5 and 0 < r["p50_ms"] <= r["max_ms"] for r in ticks)
