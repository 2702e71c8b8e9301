"""The broker benchmark command runs end to end (quick mode; no timing asserted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import GOPATH

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_broker_benchmark_prints_every_workload():
    result = subprocess.run(
        [sys.executable, "-m", "bench.broker", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    sarama = (
        ["consume_backlog_100b_sarama_format_v1", "consume_backlog_100b_sarama_batches"]
        if shutil.which("go") and (GOPATH / "src/github.com/Shopify/sarama").is_dir()
        else []
    )
    assert [r["workload"] for r in rows] == [
        "produce_100b_acks1_1p",
        "produce_1024b_acks1_1p",
        "consume_backlog_100b",
        "consume_backlog_100b_format_v1",
        "consume_backlog_100b_raw_v12",
        *sarama,
        "redis_streams_100b",
        "idle_partitions",
        "stalled_consumers",
        "produce_100b_metering",
    ]
    backlog = rows[2]
    assert backlog["records"] == 400_000  # every produced record came back
    # Each reader got its half of the backlog (a raw reader's last fetch may give more).
    assert rows[3]["records"] >= 200_000 and rows[4]["records"] >= 200_000
    for row in rows[5 : 5 + len(sarama)]:
        assert row["records"] == 200_000
    assert rows[-3]["broker_rss_mb"] > 0
    assert rows[-2]["rss_stalled_mb"] > 0
    metering = rows[-1]
    assert metering["metering_on_records_per_s"] > 0 and metering["ratio"] > 0
