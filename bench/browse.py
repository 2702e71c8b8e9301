"""Message browser benchmark: ``python -m bench.browse [--quick] [--compression C]``.

``make bench-browse`` runs it. It starts one broker (SASL only) on loopback on a throwaway
Postgres database (dropped at the end), produces 1,000,000 records of about 100 bytes
(JSON values, 8-byte keys) to a topic of 6 partitions with confluent-kafka
(``compression.type`` from ``--compression``, default none), and prints one JSON line per
workload: the console's scan (:func:`frontend.scan.scan`, the code behind the message
browser, here with its record and time limits lifted so it reads the whole topic), timed
over ``--runs`` runs after a warm-up (median and range), in records scanned per second:

* ``scan_rare_value_earliest`` / ``scan_rare_value_newest``: "value or header contains"
  a word in 1 record of 100,000 (10 matches), reading forwards / backwards: the whole
  topic is scanned;
* ``scan_rare_key_earliest``: "key contains" one record's key;
* ``scan_often_value_newest``: a word in 1 record of 100 with the page's largest limit
  (500 rows): the scan stops when it has them, so it reads about 50,000 records and
  decodes 500;
* ``scan_key_word_in_every_value``: "key contains" a word that every value holds and no
  key does: the worst case, every record's key is checked (no batch can be skipped).

Baselines in the same run, reading the same records: a confluent-kafka consumer
(librdkafka, every partition assigned, records counted) and Millrace's own client
decoding every record (``ClusterClient.read``, the full decode the browser used before)
with the same filter applied to each. The broker and the readers share the machine's
cores; nothing is pinned.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import emit, sasl_broker
from data_plane.client import ClusterClient
from data_plane.records.filter import RecordFilter
from frontend.scan import Query, scan

TOPIC = "bench-browse"
PARTITIONS = 6
RARE, OFTEN = 100_000, 100  # one record in this many holds the word


def value(i: int) -> bytes:
    """About 100 bytes of JSON; the rare and the frequent words in some."""
    tag = "needle" if i % RARE == RARE // 2 else "flagged" if i % OFTEN == 7 else "plain"
    return (
        b'{"id":%d,"user":"user-%04d","action":"click","page":"/p/%05d","tag":"%s","n":%d}'
        % (i, i % 10_000, i % 99_991, tag.encode(), i * 7)
    ).ljust(100, b" ")


def key(i: int) -> bytes:
    return b"k%07d" % i


def _confluent(bootstrap: str, creds: dict[str, str], **extra: Any) -> dict[str, Any]:
    endpoint = perf.Endpoint(bootstrap, creds["username"], creds["password"], "SCRAM-SHA-512")
    return {**endpoint.confluent(), **extra}


def produce(bootstrap: str, creds: dict[str, str], records: int, compression: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        _confluent(
            bootstrap, creds, acks="all", **{"linger.ms": 20, "compression.type": compression}
        )
    )
    for i in range(records):
        for _ in range(10_000):
            try:
                producer.produce(TOPIC, value=value(i), key=key(i), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records were not acknowledged")


def read_with_confluent(bootstrap: str, creds: dict[str, str], records: int) -> float:
    """Seconds for a confluent-kafka consumer to receive every record."""
    conf = _confluent(bootstrap, creds, **{"group.id": "bench-browse"})
    return perf.read_all(conf, TOPIC, PARTITIONS, records)


def read_with_full_decode(client: ClusterClient, flt: RecordFilter, records: int) -> float:
    """Seconds for our client to decode every record and test each against ``flt``."""
    started = time.perf_counter()
    got = 0
    for partition in range(PARTITIONS):
        offset = 0
        for _ in range(records):  # bounded: each read returns at least one record
            answer = client.read((TOPIC, partition), offset, max_records=100_000, max_bytes=1 << 20)
            if answer.error or not answer.records:
                break
            for record, _, _ in answer.records:
                flt.matches(record.key, record.value, record.headers)
            got += len(answer.records)
            offset = answer.records[-1][0].offset + 1
    elapsed = time.perf_counter() - started
    if got != records:
        raise RuntimeError(f"the full decode read {got} of {records} records")
    return elapsed


def timed(runs: int, fn: Callable[[], Any]) -> tuple[list[float], Any]:
    fn()  # warm-up
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return times, result


def summary(count: int, times: list[float]) -> dict[str, Any]:
    rates = sorted(count / t for t in times)
    return {
        "records_per_s": round(statistics.median(rates)),
        "range_records_per_s": [round(rates[0]), round(rates[-1])],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (CI smoke test)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="timed runs after a warm-up")
    parser.add_argument(
        "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"]
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    args = parser.parse_args(argv)
    records = 20_000 if args.quick else args.records
    runs = 1 if args.quick else args.runs
    work = Path(tempfile.mkdtemp(prefix="millrace-bench-browse-"))
    with sasl_broker(f"millrace_bench_browse_{os.getpid()}", work) as (_env, creds, port):
        try:
            bootstrap = f"127.0.0.1:{port}"
            from confluent_kafka.admin import (  # type: ignore[attr-defined]
                AdminClient,
                NewTopic,
            )

            perf.create_topics(
                AdminClient(_confluent(bootstrap, creds)), [NewTopic(TOPIC, PARTITIONS, 1)]
            )
            produce(bootstrap, creds, records, args.compression)
            confluent_times = [
                read_with_confluent(bootstrap, creds, records) for _ in range(max(1, runs // 2))
            ]
            baseline = summary(records, confluent_times)
            client = ClusterClient(
                [("127.0.0.1", port)],
                username=creds["username"],
                password=creds["password"],
                timeout=30,
            )
            with client:
                common = {
                    "records": records,
                    "partitions": PARTITIONS,
                    "value_bytes": len(value(0)),
                    "compression": args.compression,
                    "runs": runs,
                    "cpus": os.cpu_count(),
                }
                workloads = [
                    ("scan_rare_value_earliest", Query(position="earliest", text="needle")),
                    ("scan_rare_value_newest", Query(position="newest", text="needle")),
                    ("scan_rare_key_earliest", Query(position="earliest", key="k0000042")),
                    ("scan_often_value_newest", Query(position="newest", text="flagged")),
                    # The worst case for the byte search: the word is in every batch (in
                    # every value), so every record is checked, and no key holds it.
                    ("scan_key_word_in_every_value", Query(position="earliest", key="click")),
                ]
                for name, q in workloads:
                    q.scan = records
                    q.limit = 500 if "often" in name else 50
                    times, result = timed(
                        runs,
                        lambda q=q: scan(client, TOPIC, q, list(range(PARTITIONS)), seconds=600),
                    )
                    if "often" not in name and result.scanned != records:
                        raise RuntimeError(f"{name} scanned {result.scanned} of {records}")
                    mine = summary(result.scanned, times)
                    emit(
                        name,
                        **common,
                        scanned=result.scanned,
                        rows=len(result.rows),
                        **mine,
                        baseline_confluent_consumer_records_per_s=baseline["records_per_s"],
                        ratio_to_confluent=round(
                            mine["records_per_s"] / baseline["records_per_s"], 2
                        ),
                    )
                full_times = [
                    read_with_full_decode(client, RecordFilter(text=b"needle"), records)
                    for _ in range(max(1, runs // 2))
                ]
                emit(
                    "baselines",
                    **common,
                    confluent_consumer=baseline,
                    own_client_full_decode_and_filter=summary(records, full_times),
                )
        finally:
            if args.keep:
                print(f"logs in {work}", file=sys.stderr)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)  # the broker's log: about 110 MB
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
