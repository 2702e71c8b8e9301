"""Transactions benchmark: ``python -m bench.transactions [--quick]``.

``make bench-transactions`` runs it. Three brokers on loopback and the controller, as in
``bench.replication`` (its ``Cluster``; a throwaway Postgres database). Clients are
confluent-kafka, signed in as a service account that may do anything. Prints one JSON line
per workload, each against a baseline measured in the same run on the same cluster (runs
alternate; medians and ranges):

* ``txn_produce_100b_acks_all_rf3``: 100-byte records to a 3-partition topic (replication
  factor 3, ``min.insync.replicas`` 2) by a transactional producer, in transactions of
  1,000 records (begin, produce, commit); the baseline is an idempotent producer (acks=all)
  writing the same records without transactions. Target: at least 50% of the baseline.
* ``txn_produce_100b_acks_all_rf3_4_producers``: the same with four producers of each
  kind at once, each in its own process (and its own transactional id): what a cluster
  does for several applications, where one producer's round trips no longer bound it.
* ``consume_transform_produce``: a loop reads a 3-partition topic in a group and writes
  each record (upper-cased) to another, committing every 1,000 records or 100 ms (Kafka
  Streams' commit interval at exactly once), whichever comes first: exactly once (the
  output and the input offsets in one transaction, reading at read_committed) against at
  least once (idempotent acks=all produce, flush, then a synchronous offset commit).
  Reported: records/s over a backlog (from the group's assignment), and end-to-end
  latency (from the input record's intended send time, its timestamp, to a
  read_committed reader of the output receiving it) while the input is produced at 2,000
  records/s.
* ``read_committed_10pct_aborted``: a backlog written in transactions of 1,000 records of
  which every tenth is aborted, read from offset 0 to its end by a read_committed consumer
  against a read_uncommitted one. Reported: the backlog's offsets per second (both read
  the same log to its end; the committed reader delivers 90% of the records). Target: at
  least 80% of read_uncommitted.

Every wait is bounded by ``--timeout``; every process is stopped on the way out.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import bench_env, emit, free_port, metadata_database, prepare_store, run_step
from bench.replication import BROKER_IDS, Cluster, cluster, delete_topic, in_sync, wait_until

RECORD_BYTES = 100
TXN_RECORDS = 1_000  # records per transaction
COMMIT_INTERVAL_S = 0.1  # the loop commits at least this often (Kafka Streams' EOS default)
PRODUCE_RECORDS = 300_000
CTP_RECORDS = 100_000
CTP_RATE = 2_000  # input records/s in the latency run
CTP_SECONDS = 15.0
BACKLOG_RECORDS = 1_000_000
PARTITIONS = 3
PARALLEL_PRODUCERS = 4  # txn_produce_..._producers: producers of each kind at once
CHILD_LIFETIME_S = 600  # a child process never outlives this, whatever the parent does


def create_topic(admin: Any, timeout: float, prefix: str) -> str:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
    perf.create_topics(admin, [NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})])
    wait_until(lambda: _all_in_sync(admin, name), timeout, f"{name} to be in sync")
    return name


def _all_in_sync(admin: Any, name: str) -> bool:
    from confluent_kafka import KafkaException

    try:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
    except KafkaException:
        return False
    if topic is None or topic.error is not None or len(topic.partitions) != PARTITIONS:
        return False
    return all(
        p.leader >= 0 and len(p.isrs) == len(p.replicas) == 3 for p in topic.partitions.values()
    ) and in_sync(admin, name, 3)


def _producer(conf: dict[str, Any], transactional: bool) -> Any:
    from confluent_kafka import Producer

    extra: dict[str, Any] = {
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 2**20,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2**21,
        "enable.idempotence": True,
    }
    if transactional:
        extra["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(conf | extra)
    if transactional:
        producer.init_transactions(60)
    return producer


def _send(producer: Any, topic: str, payload: bytes, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.005)


def produce_records(
    conf: dict[str, Any], topic: str, records: int, transactional: bool, abort_every: int = 0
) -> dict[str, Any]:
    """Write ``records`` 100-byte records; transactional: in transactions of 1,000 (every
    ``abort_every``-th aborted). Records/s from the first produce() to the last commit
    (or flush)."""
    producer = _producer(conf, transactional)
    payload = os.urandom(RECORD_BYTES)
    errors = 0

    def delivered(err: Any, msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    start = time.perf_counter()
    if transactional:
        n = 0
        for sent in range(0, records, TXN_RECORDS):
            producer.begin_transaction()
            _send(producer, topic, payload, min(TXN_RECORDS, records - sent), sent)
            n += 1
            if abort_every and n % abort_every == 0:
                # Into the logs first: an abort drops what the client has not sent yet.
                producer.flush(60)
                producer.abort_transaction(60)
            else:
                producer.commit_transaction(60)
    else:
        _send(producer, topic, payload, records)
        producer.flush(300)
    seconds = time.perf_counter() - start
    return {"records_per_s": round(records / seconds), "seconds": round(seconds, 3)}


def txn_produce(nodes: Cluster, admin: Any, records: int, repeats: int, timeout: float) -> dict:
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for _ in range(repeats):
        for transactional in (False, True):
            topic = create_topic(admin, timeout, "txn" if transactional else "idem")
            os.sync()
            cpu = nodes.cpu_seconds()
            result = produce_records(nodes.conf, topic, records, transactional)
            result["broker_cpu_s"] = round(nodes.cpu_seconds() - cpu, 2)
            runs[transactional].append(result)
            delete_topic(admin, topic)
    txn, idem = _summary(runs[True]), _summary(runs[False])
    return txn | {
        "baseline_idempotent": idem,
        "ratio": round(txn["records_per_s"] / idem["records_per_s"], 3),
    }


def _producer_child(conf: dict[str, Any], topic: str, records: int, transactional: bool, go, out):
    """Child process of :func:`produce_parallel`: produce once ``go`` is set; send back
    (wall-clock start, end)."""
    go.wait(CHILD_LIFETIME_S)
    start = time.time()
    produce_records(conf, topic, records, transactional)
    out.send((start, time.time()))


def produce_parallel(
    conf: dict[str, Any], topic: str, records: int, transactional: bool, producers: int
) -> dict[str, Any]:
    """``records`` written by ``producers`` producers at once, each in its own process (a
    client's Python loop is as fast as one core allows), each with its own transactional
    id when transactional. Records/s from the first producer's start to the last's end."""
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    pipes, children = [], []
    share = records // producers
    for _ in range(producers):
        receiving, sending = context.Pipe(duplex=False)
        child = context.Process(
            target=_producer_child, args=(conf, topic, share, transactional, go, sending)
        )
        child.start()
        pipes.append(receiving)
        children.append(child)
    try:
        time.sleep(2.0)  # every child imported its client before the clock starts
        go.set()
        spans = []
        for receiving in pipes:
            if not receiving.poll(CHILD_LIFETIME_S):
                raise TimeoutError("a producer process did not finish")
            spans.append(receiving.recv())
    finally:
        for child in children:
            child.join(5)
            if child.is_alive():
                child.kill()
    seconds = max(end for _, end in spans) - min(start for start, _ in spans)
    return {"records_per_s": round(share * producers / seconds), "seconds": round(seconds, 3)}


def txn_produce_parallel(
    nodes: Cluster, admin: Any, records: int, repeats: int, producers: int, timeout: float
) -> dict:
    """:func:`txn_produce` with ``producers`` producers of each kind at once."""
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for _ in range(repeats):
        for transactional in (False, True):
            topic = create_topic(admin, timeout, "ptxn" if transactional else "pidem")
            os.sync()
            cpu = nodes.cpu_seconds()
            result = produce_parallel(nodes.conf, topic, records, transactional, producers)
            result["broker_cpu_s"] = round(nodes.cpu_seconds() - cpu, 2)
            runs[transactional].append(result)
            delete_topic(admin, topic)
    txn, idem = _summary(runs[True]), _summary(runs[False])
    return txn | {
        "baseline_idempotent": idem,
        "ratio": round(txn["records_per_s"] / idem["records_per_s"], 3),
    }


def _summary(results: list[dict[str, Any]], key: str = "records_per_s") -> dict[str, Any]:
    rates = [r[key] for r in results]
    out: dict[str, Any] = {
        key: round(statistics.median(rates)),
        f"{key}_range": [min(rates), max(rates)],
    }
    if "broker_cpu_s" in results[0]:
        out["broker_cpu_s"] = statistics.median(r["broker_cpu_s"] for r in results)
    return out


# --- consume-transform-produce ----------------------------------------------------------------


class Loop:
    """The consume-transform-produce loop, exactly once or at least once, on a thread."""

    def __init__(self, conf: dict[str, Any], source: str, sink: str, exactly_once: bool) -> None:
        from confluent_kafka import Consumer

        self.exactly_once = exactly_once
        self.sink = sink
        self.consumer = Consumer(
            conf
            | {
                "group.id": f"bench-ctp-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        self.consumer.subscribe([source])
        self.producer = _producer(conf, exactly_once)
        self.done = 0
        self.stop = threading.Event()
        # Set by the loop's own thread once its group gave it partitions (a consumer's
        # assignment() asked from another thread waits on the thread consuming).
        self.ready = threading.Event()
        self.started = 0.0

    def run(self, records: int, deadline: float) -> None:
        pending = 0
        if self.exactly_once:
            self.producer.begin_transaction()
        last_commit = time.monotonic()
        while self.done < records and time.monotonic() < deadline and not self.stop.is_set():
            batch = self.consumer.consume(500, 0.02)
            if not self.ready.is_set() and self.consumer.assignment():
                self.started = time.perf_counter()
                self.ready.set()
            for msg in batch:
                if msg.error() is not None:
                    continue
                # The input's timestamp travels in the key: the latency reader uses it.
                ts = str(msg.timestamp()[1]).encode()
                _produce_one(self.producer, self.sink, ts, msg.value().upper(), msg.partition())
                pending += 1
            # Kafka Streams' rule at exactly once: commit every commit.interval.ms (100 ms);
            # here also every 1,000 records.
            now = time.monotonic()
            if pending >= TXN_RECORDS or (pending and now - last_commit >= COMMIT_INTERVAL_S):
                self._commit()
                self.done += pending
                pending = 0
                last_commit = now
        if pending:
            self._commit()
            self.done += pending
        elif self.exactly_once:
            self.producer.abort_transaction(60)

    def _commit(self) -> None:
        if self.exactly_once:
            positions = self.consumer.position(self.consumer.assignment())
            self.producer.send_offsets_to_transaction(
                positions, self.consumer.consumer_group_metadata(), 60
            )
            self.producer.commit_transaction(60)
            self.producer.begin_transaction()
        else:
            self.producer.flush(60)
            self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


def _produce_one(producer: Any, topic: str, key: bytes, value: bytes, partition: int) -> None:
    while True:
        try:
            producer.produce(topic, value, key=key, partition=partition)
            return
        except BufferError:
            producer.poll(0.005)


def ctp_throughput(nodes: Cluster, admin: Any, records: int, exactly_once: bool, timeout: float):
    source = create_topic(admin, timeout, "ctp-in")
    sink = create_topic(admin, timeout, "ctp-out")
    produce_records(nodes.conf, source, records, transactional=False)
    loop = Loop(nodes.conf, source, sink, exactly_once)
    loop.run(records, time.monotonic() + max(timeout, 600))
    seconds = time.perf_counter() - loop.started  # from the group's assignment
    loop.close()
    delete_topic(admin, source)
    delete_topic(admin, sink)
    return {"records_per_s": round(loop.done / seconds), "records": loop.done}


def _paced_input(conf: dict[str, Any], topic: str, total: int, go: Any) -> None:
    """Child process: ``total`` records at CTP_RATE/s once ``go`` is set, each stamped
    with its intended send time (wall clock), so that a stall is not hidden."""
    from confluent_kafka import Producer

    go.wait(CHILD_LIFETIME_S)
    # linger 5 ms, as the loop's producer: at 1 ms the input alone is hundreds of
    # produce requests a second per broker, which queue behind each other here.
    producer = Producer(conf | {"linger.ms": 5, "acks": "all"})
    payload = os.urandom(RECORD_BYTES)
    start, wall = time.monotonic(), time.time()
    for i in range(total):
        intended = start + i / CTP_RATE
        delay = intended - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        stamp = int((wall + intended - start) * 1000)
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS, timestamp=stamp)
                break
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    producer.flush(60)


def _output_reader(conf: dict[str, Any], topic: str, total: int, out: Any) -> None:
    """Child process: read ``topic`` at read_committed; send each record's latency (ms
    from the input's intended send time, carried in the key) when done."""
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer(
        conf
        | {
            "group.id": f"bench-ctpl-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    latencies: list[float] = []
    end = time.monotonic() + CHILD_LIFETIME_S
    while len(latencies) < total and time.monotonic() < end:
        for msg in reader.consume(500, 0.1):
            if msg.error() is None and msg.key():
                latencies.append(time.time() * 1000 - int(msg.key()))
    reader.close()
    out.send(latencies)


def ctp_latency(nodes: Cluster, admin: Any, seconds: float, exactly_once: bool, timeout: float):
    """Input at CTP_RATE records/s for ``seconds`` from a child process; the loop in
    this one; a read_committed reader of the output in another child, noting receive
    time minus each input record's intended send time."""
    source = create_topic(admin, timeout, "ctpl-in")
    sink = create_topic(admin, timeout, "ctpl-out")
    total = int(CTP_RATE * seconds)
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    receiving, sending = context.Pipe(duplex=False)
    feeder = context.Process(target=_paced_input, args=(nodes.conf, source, total, go))
    reader = context.Process(target=_output_reader, args=(nodes.conf, sink, total, sending))
    feeder.start()
    reader.start()
    loop = Loop(nodes.conf, source, sink, exactly_once)
    runner = threading.Thread(
        target=loop.run, args=(total, time.monotonic() + seconds + timeout), daemon=True
    )
    runner.start()
    latencies: list[float] = []
    try:
        # The loop's group must have its partitions before the clock starts.
        if not loop.ready.wait(timeout):
            raise TimeoutError("the loop's group gave it no partitions in time")
        go.set()
        runner.join(seconds + timeout)
        if receiving.poll(timeout):
            latencies = receiving.recv()
    finally:
        loop.stop.set()
        runner.join(10)
        loop.close()
        for child in (feeder, reader):
            child.join(5)
            if child.is_alive():
                child.kill()
        delete_topic(admin, source)
        delete_topic(admin, sink)
    ordered = sorted(latencies)

    def pct(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None

    return {"received": len(ordered), "sent": total, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


# --- read_committed over aborted transactions ---------------------------------------------


def read_backlog(conf: dict[str, Any], topic: str, isolation: str, expected: int, timeout: float):
    """Seconds to read ``topic`` from offset 0 until ``expected`` records arrived."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        conf
        | {
            "group.id": f"bench-rc-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 50 * 2**20,
            "max.partition.fetch.bytes": 10 * 2**20,
            "queued.max.messages.kbytes": 2**20,
            "queued.min.messages": 2_000_000,
            "fetch.queue.backoff.ms": 5,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    start = time.perf_counter()
    deadline = start + timeout
    while got < expected and time.perf_counter() < deadline:
        # No more than what is left: consume() waits its whole timeout for a count it
        # cannot fill.
        wanted = min(10_000, expected - got)
        got += sum(1 for m in consumer.consume(wanted, 1.0) if m.error() is None)
    seconds = time.perf_counter() - start
    consumer.close()
    if got != expected:
        raise RuntimeError(f"{isolation} read {got} records, expected {expected}")
    return seconds


def read_committed(nodes: Cluster, admin: Any, records: int, repeats: int, timeout: float):
    topic = create_topic(admin, timeout, "rc")
    produce_records(nodes.conf, topic, records, transactional=True, abort_every=10)
    transactions = -(-records // TXN_RECORDS)
    aborted = transactions // 10 * TXN_RECORDS
    runs: dict[str, list[dict[str, Any]]] = {"read_committed": [], "read_uncommitted": []}
    for _ in range(repeats):
        for isolation, expected in (
            ("read_uncommitted", records),
            ("read_committed", records - aborted),
        ):
            seconds = read_backlog(nodes.conf, topic, isolation, expected, max(timeout, 600))
            runs[isolation].append(
                {
                    "backlog_records_per_s": round(records / seconds),
                    "delivered_records_per_s": round(expected / seconds),
                }
            )
    delete_topic(admin, topic)
    committed = _summary(runs["read_committed"], "backlog_records_per_s")
    uncommitted = _summary(runs["read_uncommitted"], "backlog_records_per_s")
    return committed | {
        "aborted_records": aborted,
        "baseline_read_uncommitted": uncommitted,
        "ratio": round(
            committed["backlog_records_per_s"] / uncommitted["backlog_records_per_s"], 3
        ),
    }


# --- the command ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on every wait (s)")
    parser.add_argument(
        "--only",
        choices=["produce", "produce_parallel", "ctp", "read_committed"],
        action="append",
        help="run only these workloads (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    scale = 0.01 if args.quick else 1.0
    repeats = 1 if args.quick else args.repeats
    work = Path(tempfile.mkdtemp(prefix="millrace-transactions-bench-"))
    try:
        with metadata_database("postgres", f"millrace_bench_txn_{os.getpid()}") as url:
            assert url is not None
            env = bench_env(
                work, {"DATABASE_URL": url, "MILLRACE_INTERNAL_SECRET": secrets.token_hex(32)}
            )
            prepare_store(env)
            ports = {broker_id: free_port() for broker_id in BROKER_IDS}
            key = run_step(env, "bench.store", "credentials", "bench-transactions")
            _run(work, env, ports, key, args, scale, repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _run(work, env, ports, key, args, scale: float, repeats: int) -> None:
    from confluent_kafka.admin import AdminClient

    common = {
        "brokers": len(BROKER_IDS),
        "replication_factor": 3,
        "min_insync_replicas": 2,
        "acks": "all",
        "partitions": PARTITIONS,
        "record_bytes": RECORD_BYTES,
        "records_per_transaction": TXN_RECORDS,
        "cpus": os.cpu_count(),
        "pinned": False,
    }
    wanted = set(args.only or ["produce", "produce_parallel", "ctp", "read_committed"])
    with cluster(work, env, ports, key) as nodes:
        admin = AdminClient(nodes.conf)
        if "produce" in wanted:
            records = int(PRODUCE_RECORDS * scale)
            result = txn_produce(nodes, admin, records, repeats, args.timeout)
            emit(
                "txn_produce_100b_acks_all_rf3",
                records=records,
                repeats=repeats,
                target_ratio=0.5,
                **common,
                **result,
            )
        if "produce_parallel" in wanted:
            records = int(PRODUCE_RECORDS * scale)
            result = txn_produce_parallel(
                nodes, admin, records, repeats, PARALLEL_PRODUCERS, args.timeout
            )
            emit(
                f"txn_produce_100b_acks_all_rf3_{PARALLEL_PRODUCERS}_producers",
                records=records,
                repeats=repeats,
                producers=PARALLEL_PRODUCERS,
                **common,
                **result,
            )
        if "ctp" in wanted:
            records = int(CTP_RECORDS * scale)
            seconds = 3.0 if args.quick else CTP_SECONDS
            runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
            latency: dict[bool, dict[str, Any]] = {}
            for _ in range(repeats):
                for exactly_once in (False, True):
                    runs[exactly_once].append(
                        ctp_throughput(nodes, admin, records, exactly_once, args.timeout)
                    )
            for exactly_once in (False, True):
                latency[exactly_once] = ctp_latency(
                    nodes, admin, seconds, exactly_once, args.timeout
                )
            eos, alo = _summary(runs[True]), _summary(runs[False])
            emit(
                "consume_transform_produce",
                records=records,
                repeats=repeats,
                latency_rate_per_s=CTP_RATE,
                latency_seconds=seconds,
                **common,
                **eos,
                latency=latency[True],
                baseline_at_least_once=alo | {"latency": latency[False]},
                ratio=round(eos["records_per_s"] / alo["records_per_s"], 3),
            )
        if "read_committed" in wanted:
            records = int(BACKLOG_RECORDS * scale)
            result = read_committed(nodes, admin, records, repeats, args.timeout)
            emit(
                "read_committed_10pct_aborted",
                records=records,
                repeats=repeats,
                target_ratio=0.8,
                **common,
                **result,
            )


if __name__ == "__main__":
    sys.exit(main())
