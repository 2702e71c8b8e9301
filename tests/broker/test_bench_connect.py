"""The Connect benchmark command runs end to end (quick mode; no timing asserted).

It needs Postgres on 127.0.0.1:5432 with ``wal_level=logical`` (``.ci/run`` sets it),
where it creates and drops databases and replication slots of its own.
"""

from __future__ import annotations

import json

import pytest

from tests.broker.test_bench_replication import run_bench
from tests.broker.test_connect_cdc import _logical


@pytest.mark.slow
@pytest.mark.skipif(not _logical(), reason="needs Postgres with wal_level=logical")
def test_quick_connect_benchmark_prints_every_workload():
    # The kill -9 workload is left to the full run: tests/broker/test_connect_cdc.py kills
    # workers of a running pipeline already, and the suite has a time budget.
    out, err = run_bench("--quick", "--only", "cdc", "--only", "sink", module="bench.connect")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["workload"] for r in rows] == ["cdc_source", "postgres_sink"], err[-3000:]
    for row in rows:
        assert row["connector"]["median"] > 0 and row["baseline"]["median"] > 0
        assert row["changes"] == 5_000
