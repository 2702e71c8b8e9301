"""The example pipeline (data_plane/spark/examples/windowed_totals.py) end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.spark.test_batch import read

pytestmark = pytest.mark.django_db

MINUTE = 60_000
# A recent whole minute: records older than the topic's retention (7 days) may be deleted
# under the test.
BASE_MS = (int(time.time()) // 60 - 60) * 60_000


def window_start(n: int) -> str:
    """The window start the pipeline writes for the n-th minute after BASE_MS."""
    return datetime.fromtimestamp((BASE_MS + n * MINUTE) / 1000, UTC).strftime("%Y-%m-%dT%H:%M")


def test_windowed_totals_per_key(spark, kafka, tmp_path):
    source, target = topic_name("events"), topic_name("totals")
    confluent_create(kafka, kafka.admin_a, source, partitions=2)
    confluent_create(kafka, kafka.admin_a, target, partitions=2)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    events = [  # (user, amount, minute)
        ("ann", 10.0, 0),
        ("bob", 1.0, 0),
        ("ann", 2.5, 0),
        ("ann", 4.0, 1),
        ("bob", 3.0, 1),
        ("cat", 9.0, 10),  # moves the watermark past the first two windows, which then close
    ]
    for user, amount, minute in events:
        producer.produce(
            source,
            key=user.encode(),
            value=json.dumps({"user": user, "amount": amount}).encode(),
            timestamp=BASE_MS + minute * MINUTE + 5_000,
        )
    assert producer.flush(20) == 0
    # As docs/spark.md runs it: its command line, the key in the environment.
    env = {
        **os.environ,
        "MILLRACE_API_KEY": kafka.admin_a.key_id,
        "MILLRACE_API_SECRET": kafka.admin_a.secret,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [
        sys.executable, "-m", "data_plane.spark.examples.windowed_totals",
        "--bootstrap", kafka.bootstrap, "--source", source, "--target", target,
        "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # It says what it did (docs/spark.md shows the line).
    assert "windowed_totals: read 6 events in " in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith(f"wrote 4 totals to {target}"), done.stdout
    out = [
        json.loads(r.value) for r in read(spark, kafka, kafka.admin_a, subscribe=target).collect()
    ]
    final = {(o["key"], o["start"][:16]): (o["events"], o["amount"]) for o in out}
    assert final == {
        ("ann", window_start(0)): (2, 12.5),
        ("bob", window_start(0)): (1, 1.0),
        ("ann", window_start(1)): (1, 4.0),
        ("bob", window_start(1)): (1, 3.0),
    }
