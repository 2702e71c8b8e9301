"""The console page benchmark runs end to end (quick mode; no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["overview", "topic_list", "topic_detail", "group_list", "group_detail"]


@pytest.mark.slow
def test_quick_console_benchmark_measures_every_page():
    result = subprocess.run(
        [sys.executable, "-m", "bench.console", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["workload"] for r in rows] == [f"console_{p}" for p in PAGES]
    for row in rows:
        assert row["requests"] == 3 and row["p50_ms"] > 0 and row["html_bytes"] > 1000
        assert row["p50_ms"] <= row["p95_ms"] <= row["max_ms"]
