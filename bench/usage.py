"""Usage aggregation benchmark: ``python -m bench.usage [--quick]`` (``make bench-usage``).

A fresh Postgres database with 1,000 tenants x 100 topics and one hour of usage reports
from 3 brokers, as the brokers write them: per topic a producer's row, a consumer's row
and a storage row from each broker, and per tenant each principal's request rows (about
0.9 million raw rows). Then the hourly aggregation (``control_plane.usage.services.
aggregate``) runs twice: over everything, and again (idempotent: the same rows and
sums). Prints one JSON line; the target is 30 s for the
first run (docs/performance.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.common import bench_env, emit, manage, metadata_database, run_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 tenants x 10 topics")
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--brokers", type=int, default=3)
    args = parser.parse_args(argv)
    tenants, topics = (10, 10) if args.quick else (args.tenants, args.topics)
    with metadata_database("postgres", "millrace_bench_usage") as url:
        assert url is not None
        env = bench_env(Path(tempfile.mkdtemp(prefix="millrace-usage-bench-")))
        env["DATABASE_URL"] = url
        manage(env, "migrate", "-v0")
        found = run_step(
            env,
            "bench.usage_setup",
            "--tenants",
            str(tenants),
            "--topics",
            str(topics),
            "--brokers",
            str(args.brokers),
        )
    emit("usage_hourly_aggregation", **found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
