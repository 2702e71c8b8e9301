"""The Spark benchmark runs end to end (quick mode; no timing asserted): every produced
record is counted by Spark and by the client alone."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from tests.broker.test_bench_replication import run_bench


def test_bench_spark_quick():
    if connection.vendor != "postgresql":
        pytest.skip("the benchmark needs Postgres (set DATABASE_URL), as in CI")
    out, _ = run_bench("--quick", module="bench.spark", timeout=400)
    rows = {row["workload"]: row for row in map(json.loads, out.splitlines()) if row}
    count = rows["spark_batch_count"]
    assert count["records"] == 20_000 and count["partitions"] == 6
    assert count["records_per_s"] > 0 and count["baseline_own_client_records_per_s"] > 0
