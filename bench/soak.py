"""Soak: ``manage.py up`` on its embedded defaults under steady load and a noisy neighbour.

``make run`` once died after about six minutes on a busy two-core machine (a Celery
message read half-written). This runs the real command, as a newcomer does, for a long
time (``--seconds``, 30 minutes by default) beside processes that burn every core, with a
steady producer (confluent-kafka, acks=all, idempotent) and a consumer in a group, and
checks from the outside that:

* ``up`` and every child stay up: no exit, no restart (``up`` restarts a child that dies,
  and says so in its log; a restart here is a failure);
* the web app answers ``/readyz`` and the broker is never fenced;
* the producer keeps its pace (at least 90% of ``--rate`` acknowledged), and every
  acknowledged record is consumed, in order per partition, none twice;
* Celery keeps up: the embedded queue folder never piles up;
* the Connect fleet keeps up: a connector created over the REST API (a file sink, run as
  a key of its own) copies the topic to a file, every acknowledged record included;
* usage metering kept count: after the stop, the hourly rows hold every acknowledged
  record of the topic;
* the children's memory does not keep growing (reported, not judged).

Prints one JSON line per report interval and a final summary, and exits non-zero if a
check failed. Every loop is bounded by ``--seconds`` plus fixed grace periods.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_ENV_DROP = {"DATABASE_URL", "REDIS_URL", "MILLRACE_ENV", "SECRET_KEY", "DEBUG"}
TOPIC = "soak"
PARTITIONS = 3
GROUP = "soak-readers"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def burn(until: float) -> None:
    """A noisy neighbour: one core of pure CPU until ``until`` (time.time())."""
    n = 0
    while time.time() < until:
        n = (n * 1103515245 + 12345) & 0xFFFFFFFF


@dataclass
class Tally:
    """What the load threads saw; updated under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[int, list[int]] = field(default_factory=dict)  # partition -> seqs acked
    produce_errors: int = 0
    consumed: dict[int, list[int]] = field(default_factory=dict)  # partition -> seqs read
    consume_errors: int = 0
    last_error: str = ""


class Stack:
    """``manage.py up`` as a child process, its log in a file."""

    def __init__(self, data_dir: Path, services: bool) -> None:
        self.port, self.broker_port = free_port(), free_port()
        self.data_dir = data_dir
        self.log_path = data_dir / "up.log"
        env = dict(os.environ)
        if not services:
            env = {k: v for k, v in env.items() if k not in EMBEDDED_ENV_DROP}
        env.update(MILLRACE_DATA_DIR=str(data_dir / "data"), PYTHONUNBUFFERED="1")
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(  # noqa: S603 - our own command line
            [
                sys.executable,
                "manage.py",
                "up",
                "--port",
                str(self.port),
                "--broker-port",
                str(self.broker_port),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log()
            if "Millrace is up" in text and "ready on 127.0.0.1" in text:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"manage.py up did not start:\n{self.log()[-3000:]}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def ready(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=10) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def children_rss_mb(self) -> float:
        """Resident memory of ``up`` and its children, in MiB."""
        assert self.process is not None
        pids = {self.process.pid}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(stat[1]) == self.process.pid:
                        pids.add(int(entry.name))
        total = 0
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return round(total / 1024, 1)

    def queue_depth(self) -> int:
        folder = self.data_dir / "data" / "celery" / "queue"
        try:
            return sum(1 for name in os.listdir(folder) if name.endswith(".msg"))
        except FileNotFoundError:
            return 0

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


def produce(bootstrap: str, rate: float, stop: threading.Event, tally: Tally) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
        }
    )

    def delivered(err: Any, msg: Any) -> None:
        with tally.lock:
            if err is not None:
                tally.produce_errors += 1
                tally.last_error = f"produce: {err}"
            else:
                tally.acked.setdefault(msg.partition(), []).append(int(msg.key()))

    seq = 0
    started = time.monotonic()
    while not stop.is_set():
        wait = started + seq / rate - time.monotonic()
        if wait > 0:
            # Never negative: librdkafka reads a negative timeout as "wait forever".
            producer.poll(min(0.05, wait))
            continue
        producer.produce(
            TOPIC,
            key=str(seq).encode(),
            value=f"{seq}:".encode() + b"v" * 200,
            partition=seq % PARTITIONS,
            on_delivery=delivered,
        )
        seq += 1
        producer.poll(0)
    producer.flush(120)


def consume(bootstrap: str, stop: threading.Event, tally: Tally) -> None:
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    consumer.subscribe([TOPIC])
    try:
        while not stop.is_set():
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    with tally.lock:
                        tally.consume_errors += 1
                        tally.last_error = f"consume: {msg.error()}"
                continue
            with tally.lock:
                tally.consumed.setdefault(msg.partition(), []).append(int(msg.key()))
    finally:
        consumer.close()


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.perf import create_topics

    create_topics(AdminClient({"bootstrap.servers": bootstrap}), [NewTopic(TOPIC, PARTITIONS, 1)])


COPY = "soak-copy"


def start_copy(stack: Stack) -> Path:
    """A FileStreamSink of the topic, created over the REST API with a key that may read
    the topic and use the Connect cluster; the platform's fleet runs it. The file it
    writes."""
    import base64
    import shlex

    def create_key(*args: str) -> dict[str, str]:
        out = subprocess.run(  # noqa: S603 - our own command line
            [sys.executable, "manage.py", "create_api_key", "default", "soak-connect", *args],
            cwd=ROOT, env=stack.env, capture_output=True, text=True, check=True, timeout=120,
        ).stdout  # fmt: skip
        return dict(shlex.split(line)[0].split("=", 1) for line in out.splitlines()
                    if line.startswith(("KEY=", "SECRET=")))  # fmt: skip

    create_key("--preset", "consumer", "--topic", TOPIC, "--group", "connect-")
    key = create_key("--preset", "topic-admin", "--topic", "connect-", "--topic-pattern",
                     "prefixed")  # fmt: skip
    string = "org.apache.kafka.connect.storage.StringConverter"
    body = json.dumps({"name": COPY, "config": {
        "connector.class": "FileStreamSink", "topics": TOPIC, "file": f"{COPY}.txt",
        "key.converter": string, "value.converter": string,
    }}).encode()  # fmt: skip
    token = base64.b64encode(f"{key['KEY']}:{key['SECRET']}".encode()).decode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.port}/api/v1/tenants/default/connect/connectors",
        data=body, method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        if response.status != 201:
            raise RuntimeError(f"creating the connector answered {response.status}")
    return stack.data_dir / "data" / "connect-files" / "default" / f"{COPY}.txt"


def copied(path: Path) -> set[int]:
    """The sequence numbers the connector wrote (``<seq>:vvv...`` lines)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return set()
    return {int(line.split(":", 1)[0]) for line in text.splitlines() if ":" in line}


METERED = """
import json
from control_plane.tenancy.models import Tenant
from control_plane.usage import services as usage
usage.aggregate()
rows = usage.usage([Tenant.objects.get(slug="default")], *usage.period(None, None), "topic")
print(json.dumps({r["topic"]: r["produce_records"] for r in rows}))
"""


def metered_records(stack: Any) -> int:
    """Records appended to the load's topic as the metering counted them: the stopped
    stack's brokers reported as they shut down; summed into hourly rows here."""
    out = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "manage.py", "shell", "-c", METERED],
        cwd=ROOT, env=stack.env, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    line = next(x for x in reversed(out.splitlines()) if x.startswith("{"))
    return int(json.loads(line).get(TOPIC, 0))


def copy_missing(tally: Tally, path: Path) -> int:
    with tally.lock:
        acked = {seq for seqs in tally.acked.values() for seq in seqs}
    return len(acked - copied(path))


def check_records(tally: Tally) -> dict[str, int]:
    """Lost (acked, never read), duplicated and out-of-order reads, per the keys."""
    lost = duplicates = out_of_order = 0
    with tally.lock:
        for partition, acked in tally.acked.items():
            read = tally.consumed.get(partition, [])
            lost += len(set(acked) - set(read))
            duplicates += len(read) - len(set(read))
            out_of_order += sum(1 for a, b in itertools.pairwise(read) if b <= a)
        acked_total = sum(len(v) for v in tally.acked.values())
        consumed_total = sum(len(v) for v in tally.consumed.values())
    return {
        "acked": acked_total,
        "consumed": consumed_total,
        "lost": lost,
        "duplicates": duplicates,
        "out_of_order": out_of_order,
    }


def run(
    seconds: float,
    burners: int,
    rate: float,
    report_every: float = 60.0,
    data_dir: Path | None = None,
    services: bool = False,
    emit: Any = print,
) -> dict[str, Any]:
    """The soak; returns the summary (``ok`` says whether every check held)."""
    own_dir = data_dir is None
    base = Path(tempfile.mkdtemp(prefix="millrace-soak-")) if data_dir is None else data_dir
    stack = Stack(base, services)
    stack.start()
    bootstrap = f"127.0.0.1:{stack.broker_port}"
    create_topic(bootstrap)
    copy_path = start_copy(stack)
    rss_start = stack.children_rss_mb()

    until = time.time() + seconds
    ctx = multiprocessing.get_context("spawn")
    neighbours = [ctx.Process(target=burn, args=(until,), daemon=True) for _ in range(burners)]
    for process in neighbours:
        process.start()
    tally, stop_producing, stop_consuming = Tally(), threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=produce, args=(bootstrap, rate, stop_producing, tally)),
        threading.Thread(target=consume, args=(bootstrap, stop_consuming, tally)),
    ]
    for thread in threads:
        thread.start()

    not_ready = 0
    max_queue = 0
    started = time.monotonic()
    next_report = started + report_every
    try:
        while time.time() < until and stack.process is not None and stack.process.poll() is None:
            time.sleep(min(5.0, max(0.1, until - time.time())))
            if not stack.ready():
                not_ready += 1
            max_queue = max(max_queue, stack.queue_depth())
            if time.monotonic() >= next_report:
                next_report += report_every
                emit(
                    json.dumps(
                        {
                            "soak": "progress",
                            "elapsed_s": round(time.monotonic() - started),
                            "rss_mb": stack.children_rss_mb(),
                            "queue_depth": stack.queue_depth(),
                            **check_records(tally),
                        }
                    )
                )
    finally:
        load_seconds = time.monotonic() - started
        stop_producing.set()
        threads[0].join(180)
        # Let the consumer read what was acknowledged (bounded).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and check_records(tally)["lost"]:
            time.sleep(0.5)
        stop_consuming.set()
        threads[1].join(60)
        # And the Connect fleet's copy of it (bounded).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and copy_missing(tally, copy_path):
            time.sleep(0.5)
        for process in neighbours:
            process.terminate()
        rss_end = stack.children_rss_mb() if stack.process.poll() is None else None
        alive = stack.process.poll() is None
        code = stack.stop()

    log = stack.log()
    records = check_records(tally)
    # Usage metering kept count: every acknowledged record is in the hourly rows (a record
    # appended whose acknowledgement the producer never got may be counted too).
    metered = metered_records(stack)
    summary: dict[str, Any] = {
        "soak": "summary",
        "seconds": round(time.monotonic() - started),
        "burners": burners,
        "rate": rate,
        "up_stayed_up": alive,
        "up_exit_code": code,
        "restarts": len(re.findall(r"exited with code .*; restarting", log)),
        "fenced": len(re.findall(r"fenced brokers", log)),
        "lease_stalls": len(re.findall(r"no running broker renewed its lease", log)),
        "not_ready": not_ready,
        "max_queue_depth": max_queue,
        "produce_errors": tally.produce_errors,
        "consume_errors": tally.consume_errors,
        "last_error": tally.last_error,
        "connect_copy_missing": copy_missing(tally, copy_path),
        "connect_copy_lines": len(copied(copy_path)),
        "metered_records": metered,
        "metering_missing": max(0, records["acked"] - metered),
        "rss_start_mb": rss_start,
        "rss_end_mb": rss_end,
        **records,
    }
    # The producer paces itself; falling far behind the pace means the stack stalled.
    summary["acked_per_s"] = round(records["acked"] / max(1.0, load_seconds), 1)
    summary["ok"] = bool(
        alive
        and code == 0
        and summary["restarts"] == 0
        and summary["fenced"] == 0
        and summary["acked_per_s"] >= 0.9 * rate
        and records["lost"] == 0
        and records["duplicates"] == 0
        and records["out_of_order"] == 0
        and summary["connect_copy_missing"] == 0
        and summary["metering_missing"] == 0
        and max_queue < 100
    )
    summary["log"] = str(stack.log_path)
    emit(json.dumps(summary))
    if own_dir and summary["ok"]:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1800, help="how long (default 30 min)")
    parser.add_argument(
        "--burners", type=int, default=os.cpu_count() or 2, help="CPU-burning processes"
    )
    parser.add_argument("--rate", type=float, default=200, help="records per second produced")
    parser.add_argument("--report-every", type=float, default=60, help="seconds between lines")
    parser.add_argument("--data-dir", type=Path, help="keep the stack's files here")
    parser.add_argument(
        "--services",
        action="store_true",
        help="keep DATABASE_URL/REDIS_URL (default: the embedded defaults of make run)",
    )
    args = parser.parse_args()
    summary = run(
        args.seconds,
        args.burners,
        args.rate,
        args.report_every,
        args.data_dir,
        args.services,
    )
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
