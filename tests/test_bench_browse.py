"""The message browser benchmark runs end to end (quick mode; no timing asserted): every
scan reads what it should and finds the rows planted for it."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from tests.broker.test_bench_replication import run_bench


def test_bench_browse_quick():
    if connection.vendor != "postgresql":
        pytest.skip("the benchmark needs Postgres (set DATABASE_URL), as in CI")
    out, _ = run_bench("--quick", module="bench.browse", timeout=300)
    rows = {row["workload"]: row for row in map(json.loads, out.splitlines()) if row}
    for name in ("scan_rare_value_earliest", "scan_rare_value_newest", "scan_rare_key_earliest"):
        assert rows[name]["scanned"] == 20_000 and rows[name]["records_per_s"] > 0
    assert rows["scan_rare_key_earliest"]["rows"] == 1
    assert rows["scan_often_value_newest"]["rows"] == 200  # 1 in 100, all found
    worst = rows["scan_key_word_in_every_value"]
    assert worst["scanned"] == 20_000 and worst["rows"] == 0
    assert rows["baselines"]["confluent_consumer"]["records_per_s"] > 0
