"""Per-request broker costs: ``python -m bench.codec [--quick]`` (``make bench-codec``).

One JSON line per workload, in microseconds per operation (best of ``--repeats`` timed
loops, each over ``--count`` operations), all in-process and single-threaded:

* ``encode_fetch_response``: a Fetch response for one topic of 90 partitions (a third
  with a records slice), what a consumer of 90 partitions gets ten times a second, at
  versions 4, 12 (flexible) and 16;
* ``decode_fetch_request``: the matching request, at versions 4, 12 and 13 (topic ids);
* ``encode_produce_response`` / ``decode_produce_request``: 20 partitions, version 9;
* ``first_append``: one 1-record batch appended to each of ``--partitions`` fresh
  partition logs (new segment and index files), beside ``second_append_us``, the same
  append again (the files exist): what a broker pays when many partitions get their first
  records at once, on the event loop.

The schemas are the broker's (``data_plane.protocol.messages``); nothing is sent over a
socket. Run it against another checkout with ``PYTHONPATH=<checkout>`` to compare.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_plane.log.config import LogConfig
from data_plane.log.partition import PartitionLog
from data_plane.log.segment import FileSlice
from data_plane.protocol.messages import APIS
from data_plane.records import Record, RecordBatch

FETCH, PRODUCE = 1, 0
PARTITIONS = 90


def _emit(name: str, **fields: Any) -> None:
    print(json.dumps({"workload": name, **fields}), flush=True)


def _best_us(fn: Callable[[], object], count: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(count):
            fn()
        best = min(best, (time.perf_counter() - start) / count)
    return round(best * 1e6, 1)


def _fetch_response() -> dict[str, Any]:
    partitions = [
        {
            "partition_index": i,
            "error_code": 0,
            "high_watermark": 1_000 + i,
            "last_stable_offset": 1_000 + i,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": FileSlice(Path("/dev/null"), 0, 170, 5, 6) if i % 3 == 0 else b"",
        }
        for i in range(PARTITIONS)
    ]
    topic = {"topic": "orders", "topic_id": uuid.uuid4(), "partitions": partitions}
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [topic]}


def _fetch_request(version: int) -> bytes:
    partitions = [
        {
            "partition": i,
            "current_leader_epoch": 0,
            "fetch_offset": 1_000 + i,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for i in range(PARTITIONS)
    ]
    body = {
        "replica_id": -1,
        "max_wait_ms": 100,
        "min_bytes": 1,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": "orders", "topic_id": uuid.uuid4(), "partitions": partitions}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return APIS[FETCH].request.encode(body, version)


def _produce(version: int) -> tuple[dict[str, Any], bytes]:
    records = RecordBatch(
        base_offset=0, records=(Record(offset=0, timestamp=1, key=None, value=b"v" * 100),)
    ).encode()
    request = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [
            {
                "name": "orders",
                "partition_data": [{"index": i, "records": records} for i in range(20)],
            }
        ],
    }
    response = {
        "responses": [
            {
                "name": "orders",
                "partition_responses": [
                    {
                        "index": i,
                        "error_code": 0,
                        "base_offset": 5,
                        "log_append_time_ms": -1,
                        "log_start_offset": 0,
                        "record_errors": [],
                        "error_message": None,
                    }
                    for i in range(20)
                ],
            }
        ],
        "throttle_time_ms": 0,
    }
    return response, APIS[PRODUCE].request.encode(request, version)


def _first_append(partitions: int, work: Path) -> tuple[float, float]:
    batch = RecordBatch(
        base_offset=0, records=(Record(offset=0, timestamp=1, key=None, value=b"v" * 100),)
    ).encode()
    logs = [PartitionLog.open(work / f"t-{i}", LogConfig()) for i in range(partitions)]
    try:
        timings = []
        for _ in range(2):
            start = time.perf_counter()
            for log in logs:
                log.append(batch, leader_epoch=0)
            timings.append((time.perf_counter() - start) / partitions * 1e6)
        return round(timings[0], 1), round(timings[1], 1)
    finally:
        for log in logs:
            log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--count", type=int, default=2_000, help="operations per timed loop")
    parser.add_argument("--repeats", type=int, default=5, help="timed loops (best is kept)")
    parser.add_argument("--partitions", type=int, default=300, help="for first_append")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    args = parser.parse_args(argv)
    count, repeats, partitions = args.count, args.repeats, args.partitions
    if args.quick:
        count, repeats, partitions = 20, 1, 10

    fetch = APIS[FETCH]
    response = _fetch_response()
    for version in (4, 12, 16):
        us = _best_us(lambda v=version: fetch.response.encode_chunks(response, v), count, repeats)
        _emit("encode_fetch_response", version=version, partitions=PARTITIONS, us=us)
    for version in (4, 12, 13):
        raw = _fetch_request(version)
        us = _best_us(lambda v=version, r=raw: fetch.request.decode(r, v), count, repeats)
        _emit("decode_fetch_request", version=version, partitions=PARTITIONS, us=us)
    produce = APIS[PRODUCE]
    produce_response, produce_request = _produce(9)
    us = _best_us(lambda: produce.response.encode_chunks(produce_response, 9), count, repeats)
    _emit("encode_produce_response", version=9, partitions=20, us=us)
    us = _best_us(lambda: produce.request.decode(produce_request, 9), count, repeats)
    _emit("decode_produce_request", version=9, partitions=20, us=us)

    work = Path(tempfile.mkdtemp(prefix="millrace-bench-codec-", dir=args.dir))
    try:
        first, second = _first_append(partitions, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _emit("first_append", partitions=partitions, us=first, second_append_us=second)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
