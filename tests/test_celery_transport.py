"""The embedded Celery transport: a reader never sees part of a message or table.

Kombu's own filesystem transport made a message file under its final name and then wrote
it; a worker polling at that moment read a partial file and died (issue: `make run` died
after minutes). These tests race a publisher of large messages against a polling reader
in the same folder, as beat and the worker do, and check every message arrives whole.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection

from control_plane.core.celery_transport import Transport

QUEUE = "millrace"
MESSAGES = 30
# Large enough that writing one takes far longer than a reader's poll.
BODY = "x" * (8 * 2**20)


def _connection(folder: Path) -> Connection:
    (folder / "queue").mkdir(parents=True, exist_ok=True)
    return Connection(
        "filesystem://",
        transport=Transport,
        transport_options={
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        },
    )


PUBLISHER = """
import sys
from kombu import Connection
from {module} import Transport
folder, count = sys.argv[1], int(sys.argv[2])
with Connection("filesystem://", transport=Transport, transport_options={{
    "data_folder_in": folder, "data_folder_out": folder, "control_folder": folder + "-control",
}}) as connection:
    channel = connection.channel()
    for n in range(count):
        channel._put("{queue}", {{"n": n, "body": "x" * {size}}})
"""


def test_a_reader_racing_a_publisher_process_gets_every_message_whole(tmp_path):
    """Beat publishes from its own process while the worker polls, as under `make run`."""
    reader = _connection(tmp_path)
    channel = reader.channel()
    code = PUBLISHER.format(module=Transport.__module__, queue=QUEUE, size=len(BODY))
    publisher = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "queue"), str(MESSAGES)],
        stderr=subprocess.PIPE,
        text=True,
    )
    received: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while len(received) < MESSAGES and time.monotonic() < deadline:
            try:
                message = channel._get(QUEUE)  # a partial file raised here and killed the worker
            except Empty:
                continue
            assert message["body"] == BODY
            received.append(message["n"])
    finally:
        reader.release()
        _, stderr = publisher.communicate(timeout=60)
    assert publisher.returncode == 0, stderr
    assert received == list(range(MESSAGES))
    # Nothing half-written is left behind for a later reader.
    assert list((tmp_path / "queue").iterdir()) == []


def test_exchange_tables_are_replaced_whole_and_bindings_survive(tmp_path):
    connection = _connection(tmp_path)
    channel = connection.channel()
    try:
        stop = threading.Event()
        seen: list[BaseException] = []

        def look() -> None:
            while not stop.is_set():
                try:
                    channel.get_table("fan")
                except Exception as exc:  # noqa: BLE001 - any failure to read the table counts
                    seen.append(exc)
                    return

        thread = threading.Thread(target=look, daemon=True)
        thread.start()
        for n in range(200):
            channel._queue_bind("fan", f"key{n}", "", f"queue{n}")
        for n in range(0, 200, 2):
            channel._delete(f"queue{n}", "fan", f"key{n}", "")
        stop.set()
        thread.join(timeout=30)
        assert seen == []
        assert sorted(q.queue for q in channel.get_table("fan")) == sorted(
            f"queue{n}" for n in range(1, 200, 2)
        )
        # Binding twice changes nothing.
        channel._queue_bind("fan", "key1", "", "queue1")
        assert len(channel.get_table("fan")) == 100
    finally:
        connection.release()


def test_an_undecodable_message_is_set_aside_not_fatal(tmp_path, caplog):
    connection = _connection(tmp_path)
    channel = connection.channel()
    try:
        (tmp_path / "queue" / f"1_bad.{QUEUE}.msg").write_bytes(b'{"truncated": ')
        channel._put(QUEUE, {"n": 1})
        assert channel._get(QUEUE) == {"n": 1}
        with pytest.raises(Empty):
            channel._get(QUEUE)
    finally:
        connection.release()
    assert [p.name for p in (tmp_path / "corrupt").iterdir()] == [f"1_bad.{QUEUE}.msg"]
    assert "undecodable Celery message" in caplog.text
