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
    out, err = run_bench("--quick", module="bench.connect")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["workload"] for r in rows] == ["cdc_source", "postgres_sink", "worker_kill"], err[
        -3000:
    ]
    cdc, sink, kill = rows
    for row in (cdc, sink):
        assert row["connector"]["median"] > 0 and row["baseline"]["median"] > 0
        assert row["changes"] == 5_000
    # The task moved to a surviving worker, and no inserted row is missing from the topic.
    assert kill["failover_s"] > 0 and kill["rows_inserted"] > 0
    assert kill["rows_lost"] == 0
