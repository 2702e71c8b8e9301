"""Console page benchmark: ``python -m bench.console`` (``make bench-console``).

One SASL broker and the web tier (daphne on ``control_plane.asgi`` with DEBUG off, as
deployed) on loopback, on a throwaway Postgres database (dropped at the end). The
``default`` tenant gets ``--topics`` topics (1,000; one partition each, one record each),
``--groups`` consumer groups (100) each with committed offsets on ten topics, and an hour
of the samples the beat schedule takes each minute (topic offsets and sizes: 60,000 rows
behind the throughput chart), then a real sampling pass of topics and lag. An owner of the
tenant signs in over HTTP, and each page is fetched ``--requests`` times (after three
warm-up fetches), one request at a time, as a person clicking would; the time is the whole
HTTP exchange on loopback, brokers' answers included. Prints one JSON line per page with
p50/p95/max in milliseconds, against the target of a p95 of at most 300 ms.
"""

from __future__ import annotations

import argparse
import http.client
import http.cookies
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import (
    emit,
    free_port,
    run_python,
    run_step,
    sasl_broker,
    start_web,
    stop_process,
)

TARGET_P95_MS = 300
PASSWORD = "bench-console-pw-123!"
SETUP = "bench.console_setup"  # the steps inside Django: the owner, samples, --profile


def topic(i: int) -> str:
    return f"orders-{i:04d}"


def group(i: int) -> str:
    return f"billing-{i:03d}"


def seed(bootstrap: str, key: dict[str, str], topics: int, groups: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = perf.Endpoint(bootstrap, key["username"], key["password"]).confluent()
    admin = AdminClient(conf)
    for start in range(0, topics, 100):
        perf.create_topics(
            admin, [NewTopic(topic(i), 1, 1) for i in range(start, min(topics, start + 100))]
        )
    producer = Producer({**conf, "linger.ms": 20})
    for i in range(topics):
        producer.produce(topic(i), key=b"k", value=json.dumps({"order": i}).encode())
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("seed records were not delivered")
    for g in range(groups):
        consumer = Consumer({**conf, "group.id": group(g), "enable.auto.commit": False})
        offsets = [TopicPartition(topic((g * 10 + j) % topics), 0, 1) for j in range(10)]
        consumer.commit(offsets=offsets, asynchronous=False)
        consumer.close()


class Session:
    """One signed-in browser: a keep-alive connection and its cookies."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str | None = None) -> tuple[int, str]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["Referer"] = f"http://127.0.0.1:{self.port}/login/"
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        text = response.read().decode(errors="replace")
        for header in response.headers.get_all("Set-Cookie") or []:
            cookie = http.cookies.SimpleCookie(header)
            for name, morsel in cookie.items():
                self.cookies[name] = morsel.value
        return response.status, text

    def sign_in(self, username: str) -> None:
        _, page = self.request("GET", "/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        if token is None:
            raise RuntimeError("no CSRF token on the login page")
        form = urllib.parse.urlencode(
            {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token.group(1)}
        )
        status, _ = self.request("POST", "/login/", form)
        if status != 302:
            raise RuntimeError(f"sign-in answered {status}")


def measure(session: Session, path: str, requests: int) -> dict[str, Any]:
    for _ in range(3):  # warm up: connections to the brokers, template caches
        status, _ = session.request("GET", path)
        if status != 200:
            raise RuntimeError(f"{path} answered {status}")
    times = []
    size = 0
    for _ in range(requests):
        started = time.perf_counter()
        status, body = session.request("GET", path)
        times.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise RuntimeError(f"{path} answered {status}")
        size = len(body)
    times.sort()
    return {
        "requests": requests,
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
        "max_ms": round(times[-1], 1),
        "html_bytes": size,
        "target_p95_ms": TARGET_P95_MS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small tenant (smoke test)")
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    parser.add_argument("--profile", metavar="PAGE", help="profile one page instead (a path)")
    args = parser.parse_args(argv)
    if args.quick:
        args.topics, args.groups, args.requests = 20, 3, 3
    work = Path(tempfile.mkdtemp(prefix="millrace-bench-console-"))
    name = f"millrace_bench_console_{os.getpid()}"
    with sasl_broker(name, work) as (env, key, broker_port):
        seed(f"127.0.0.1:{broker_port}", key, args.topics, args.groups)
        run_step(env, SETUP, "owner", "--password", PASSWORD)
        run_step(env, SETUP, "samples")
        if args.profile:
            print(run_python({**env, "DEBUG": "0"}, "-m", SETUP, "profile", args.profile))
            return 0
        port = free_port()
        web = start_web(env, port, work / "web.log")
        try:
            session = Session(port)
            session.sign_in("bench-owner")
            middle = args.topics // 2
            pages = {
                "overview": "/t/default/",
                "topic_list": "/t/default/topics/",
                "topic_detail": f"/t/default/topics/{topic(middle)}/",
                "group_list": "/t/default/groups/",
                "group_detail": f"/t/default/groups/{group(args.groups // 2)}/",
            }
            for page, path in pages.items():
                emit(
                    f"console_{page}",
                    path=path,
                    topics=args.topics,
                    groups=args.groups,
                    **measure(session, path, args.requests),
                )
        finally:
            stop_process(web, grace=15)
            if args.keep:
                print(f"logs in {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
