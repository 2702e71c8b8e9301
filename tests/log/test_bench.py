"""The benchmark command runs and prints one JSON line per workload (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_prints_every_workload(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bench.log", "--quick", "--dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["workload"] for r in rows] == [
        "append_1k",
        "append_100b",
        "read_sequential",
        "lookup_offset",
        "lookup_timestamp",
        "reopen_clean",
        "reopen_crash",
    ]
    assert all(r.get("ratio_to_raw", 1) > 0 for r in rows)
    crash = rows[-1]
    assert crash["scanned_bytes"] < crash["bytes"]  # recovery looked at the tail only
    assert list(tmp_path.iterdir()) == []  # the work directory is cleaned up
