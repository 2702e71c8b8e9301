"""Metadata at hosted scale: ``python -m bench.metadata [--quick]`` (``make bench-metadata``).

Three SASL brokers and the web tier (daphne) on a throwaway Postgres database. First a
small cluster (``--small`` tenants, each with one topic of ``--partitions`` partitions:
1,000 partitions by default), then grown while the brokers run to ``--tenants`` tenants
(100,000 partitions), every change made through the control plane's services. At each
size, in the same run:

* **metadata_latency**: Metadata v12 (all of one tenant's topics) from each broker, as a
  client of that tenant sends it; p50/p99 in ms over ``--requests`` requests a broker;
* **topic_visible**: topics created through the REST API (in another tenant) (``POST
  /api/v1/tenants/<slug>/topics/``); from the API's 201 to the topic being in every
  broker's Metadata answer with a leader; p50/p99/max over ``--creations`` creations;
* **controller_tick**: ``controller_tick()`` timings (p50/max ms);
* **broker_rss_mb** of each broker.

Then one broker is restarted at the large size: **broker_startup** is the seconds from its
start to its "ready on" line. The last line compares the sizes (``metadata_p99_ratio``).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    bench_env,
    emit,
    free_port,
    metadata_database,
    prepare_store,
    rss_mb,
    run_step,
    start_broker,
    start_web,
    stop_process,
)
from bench.metadata_setup import tenant_slug
from data_plane.client.connection import Connection, KafkaClientError

METADATA = 3
SETUP = "bench.metadata_setup"
# The REST creations go to another tenant than the one whose Metadata latency is measured,
# so that tenant answers with the same partitions at both sizes.
PROBE_TENANT = tenant_slug(1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def login(port: int, key: dict[str, str]) -> Connection:
    conn = Connection("127.0.0.1", port, client_id="bench-metadata", timeout=30)
    conn.authenticate("SCRAM-SHA-256", key["username"], key["password"])
    return conn


def metadata(conn: Connection, topics: list[str] | None) -> dict[str, Any]:
    body = {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    return conn.request(METADATA, 12, body)


def metadata_latency(conns: list[Connection], requests: int) -> dict[str, Any]:
    took: list[float] = []
    partitions = 0
    for conn in conns:
        for _ in range(requests):
            started = time.perf_counter()
            answer = metadata(conn, None)
            took.append((time.perf_counter() - started) * 1000)
        partitions = sum(len(t["partitions"]) for t in answer["topics"])
    return {
        "p50_ms": percentile(took, 0.5),
        "p99_ms": percentile(took, 0.99),
        "requests": len(took),
        "tenant_partitions": partitions,
    }


def visible_everywhere(conns: list[Connection], name: str) -> bool:
    for conn in conns:
        [topic] = metadata(conn, [name])["topics"]
        if topic["error_code"] != 0 or not topic["partitions"]:
            return False
        if any(p["leader_id"] < 0 for p in topic["partitions"]):
            return False
    return True


def topic_visible(
    web_port: int, key: dict[str, str], conns: list[Connection], label: str, creations: int
) -> dict[str, Any]:
    auth = base64.b64encode(f"{key['username']}:{key['password']}".encode()).decode()
    took: list[float] = []
    for i in range(creations):
        name = f"probe-{label}-{i}"
        http_conn = http.client.HTTPConnection("127.0.0.1", web_port, timeout=30)
        http_conn.request(
            "POST",
            f"/api/v1/tenants/{PROBE_TENANT}/topics/",
            body=json.dumps({"name": name, "partition_count": 1}),
            headers={"Authorization": f"Basic {auth}", "Content-Type": "application/json"},
        )
        response = http_conn.getresponse()
        body = response.read()
        if response.status != 201:
            raise RuntimeError(f"creating {name}: {response.status} {body[:300]!r}")
        created = time.perf_counter()
        deadline = time.monotonic() + 30
        while not visible_everywhere(conns, name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not in every broker's Metadata after 30 s")
            time.sleep(0.005)
        took.append((time.perf_counter() - created) * 1000)
    return {
        "p50_ms": percentile(took, 0.5),
        "p99_ms": percentile(took, 0.99),
        "max_ms": round(max(took), 2),
        "creations": len(took),
    }


def measure(
    label: str,
    env: dict[str, str],
    brokers: dict[int, Any],
    ports: dict[int, int],
    web_port: int,
    key: dict[str, str],
    probe_key: dict[str, str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    conns = [login(port, key) for port in ports.values()]
    probes = [login(port, probe_key) for port in ports.values()]
    try:
        latency = metadata_latency(conns, args.requests)
        emit("metadata_latency", size=label, **latency)
        visible = topic_visible(web_port, probe_key, probes, label, args.creations)
        emit("topic_visible", size=label, **visible)
    finally:
        for conn in conns + probes:
            conn.close()
    # As grown: the planner may not have statistics of the new rows yet. Then after
    # ANALYZE, which autovacuum runs within a minute of such growth (the steady state).
    for analyzed in (False, True):
        step = ["tick", "--count", str(args.ticks), *(["--analyze"] if analyzed else [])]
        ticks = run_step(env, SETUP, *step)["tick_ms"]
        emit(
            "controller_tick",
            size=label,
            analyzed=analyzed,
            p50_ms=percentile(ticks, 0.5),
            max_ms=max(ticks),
            ticks=len(ticks),
        )
    rss = {str(i): rss_mb(b.pid) for i, b in brokers.items()}
    emit("broker_rss_mb", size=label, **rss)
    return {"latency": latency, "visible": visible}


def wait_for_tenant(ports: dict[int, int], key: dict[str, str], timeout: float) -> float:
    """Seconds until every broker answers Metadata for the tenant ``key`` belongs to."""
    started = time.monotonic()
    while True:
        try:
            conns = [login(port, key) for port in ports.values()]
        except KafkaClientError:
            conns = []  # a key newer than a broker's metadata: it refreshes on sign-in
        try:
            if conns and visible_everywhere(conns, "events"):
                return round(time.monotonic() - started, 2)
        finally:
            for conn in conns:
                conn.close()
        if time.monotonic() - started > timeout:
            raise RuntimeError("the last tenant's topic did not reach every broker")
        time.sleep(0.2)


def run(args: argparse.Namespace, work: Path) -> None:
    with metadata_database("postgres", "millrace_bench_metadata") as url:
        assert url is not None
        env = bench_env(
            work,
            {
                "DATABASE_URL": url,
                "MILLRACE_DEFAULT_REPLICATION_FACTOR": str(args.replication_factor),
                "DJANGO_LOG_LEVEL": "WARNING",
            },
        )
        prepare_store(env)
        brokers: dict[int, Any] = {}
        ports = {i: free_port() for i in (1, 2, 3)}
        web = None
        try:
            for i, port in ports.items():
                brokers[i] = start_broker(
                    env,
                    port=port,
                    data_dir=work / f"broker-{i}",
                    log_path=work / f"broker-{i}.log",
                    broker_id=i,
                    anonymous=False,
                )
            seeded = run_step(
                env,
                SETUP,
                "seed",
                "--first",
                "0",
                "--count",
                str(args.small),
                "--partitions",
                str(args.partitions),
            )
            emit("seed", size="small", **seeded)
            key = run_step(env, SETUP, "credentials", "--tenant", tenant_slug(0))
            probe_key = run_step(env, SETUP, "credentials", "--tenant", PROBE_TENANT)
            wait_for_tenant(ports, key, 60)
            wait_for_tenant(ports, probe_key, 60)
            web_port = free_port()
            web = start_web(env, web_port, work / "web.log")
            small = measure("small", env, brokers, ports, web_port, key, probe_key, args)

            grow = args.tenants - args.small
            seeded = run_step(
                env,
                SETUP,
                "seed",
                "--first",
                str(args.small),
                "--count",
                str(grow),
                "--partitions",
                str(args.partitions),
            )
            last = run_step(env, SETUP, "credentials", "--tenant", tenant_slug(args.tenants - 1))
            caught_up = wait_for_tenant(ports, last, 300)
            emit("seed", size="large", brokers_caught_up_s=caught_up, **seeded)
            large = measure("large", env, brokers, ports, web_port, key, probe_key, args)

            stop_process(brokers[3])
            started = time.monotonic()
            brokers[3] = start_broker(
                env,
                port=ports[3],
                data_dir=work / "broker-3",
                log_path=work / "broker-3.log",
                broker_id=3,
                anonymous=False,
            )
            emit(
                "broker_startup",
                size="large",
                seconds=round(time.monotonic() - started, 2),
                rss_mb=rss_mb(brokers[3].pid),
            )
            emit(
                "summary",
                small_partitions=args.small * args.partitions,
                large_partitions=args.tenants * args.partitions,
                replication_factor=args.replication_factor,
                metadata_p99_ratio=round(
                    large["latency"]["p99_ms"] / max(small["latency"]["p99_ms"], 0.001), 2
                ),
                topic_visible_p99_small_ms=small["visible"]["p99_ms"],
                topic_visible_p99_large_ms=large["visible"]["p99_ms"],
            )
        finally:
            if web is not None:
                stop_process(web)
            for broker in brokers.values():
                stop_process(broker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--small", type=int, default=10, help="tenants of the small size")
    parser.add_argument("--partitions", type=int, default=100, help="of each tenant's topic")
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--requests", type=int, default=500, help="Metadata requests a broker")
    parser.add_argument("--creations", type=int, default=200)
    parser.add_argument("--ticks", type=int, default=20)
    args = parser.parse_args(argv)
    if args.quick:
        args.tenants, args.small, args.partitions = 12, 3, 10
        args.requests, args.creations, args.ticks = 50, 10, 5
    with tempfile.TemporaryDirectory(prefix="millrace-bench-metadata-") as tmp:
        run(args, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
