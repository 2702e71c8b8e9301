"""The data API benchmark runs end to end (quick mode; no timing asserted).

It is also the suite's end-to-end check through a real daphne server and a real WebSocket
client (websockets): REST produce over HTTP, a stream delivering every record, the latency
stream receiving every record, and a non-acknowledging client stopping at its window. It
needs Postgres and Redis (the servers of DATABASE_URL / REDIS_URL, as in CI).
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from tests.broker.test_bench_replication import run_bench


def test_bench_streams_quick():
    if connection.vendor != "postgresql":
        pytest.skip("the benchmark needs Postgres (set DATABASE_URL), as in CI")
    out, _ = run_bench("--quick", module="bench.streams", timeout=400)
    rows = {row["workload"]: row for row in map(json.loads, out.splitlines()) if row}
    produce = rows["rest_produce_json_batch500"]
    assert produce["records"] == 10_000 and produce["failed"] == 0
    assert rows["ws_stream_delivery"]["records"] == 22_000
    latency = rows["ws_produce_to_receipt_latency"]
    assert latency["received"] == latency["sent"] == 3_000
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert rows["ws_non_acking_client_memory"]["received"] == 1_000
