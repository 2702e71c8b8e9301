"""``python -m bench.codec --quick`` runs and prints one JSON line per workload (no timing
asserted), and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_codec_benchmark_prints_every_workload(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bench.codec", "--quick", "--dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["workload"], r.get("version")) for r in rows] == [
        ("encode_fetch_response", 4),
        ("encode_fetch_response", 12),
        ("encode_fetch_response", 16),
        ("decode_fetch_request", 4),
        ("decode_fetch_request", 12),
        ("decode_fetch_request", 13),
        ("encode_produce_response", 9),
        ("decode_produce_request", 9),
        ("first_append", None),
    ]
    assert all(r["us"] > 0 for r in rows)
    assert rows[-1]["second_append_us"] > 0
    assert list(tmp_path.iterdir()) == []  # the work directory is cleaned up
