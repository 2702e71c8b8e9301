"""Streams through a real daphne server and real TCP sockets (the other stream tests use
Channels' in-process communicator).

The web process runs as deployed (``DATABASE_POOL_SIZE``, DEBUG off) on this test run's
database, next to the module's broker; the client is the ``websockets`` package.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bench.common import start_web, stop_process
from tests.broker.conftest import free_port
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer
from tests.streams.test_ws import basic, produce

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def web(kafka, tmp_path_factory):
    """daphne serving control_plane.asgi on loopback, as the benchmark runs it: its port."""
    port = free_port()
    process = start_web(kafka.env, port, tmp_path_factory.mktemp("web") / "daphne.log")
    try:
        yield port
    finally:
        stop_process(process, grace=20)


def test_a_killed_tcp_socket_leaves_the_group_and_its_unacked_records_are_redelivered(kafka, web):
    import websockets

    name = topic_name("wsd")
    group = f"g-{name}"
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    url = f"ws://127.0.0.1:{web}/ws/v1/tenants/{kafka.tenant_a}/stream"
    auth = basic(kafka.admin_a).decode()

    async def scenario():
        ws = await websockets.connect(url, additional_headers={"Authorization": auth})
        assert json.loads(await ws.recv())["type"] == "authenticated"
        subscribe = {"type": "subscribe", "topics": [name], "group": group, "from": "earliest"}
        await ws.send(json.dumps(subscribe))
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if frame["type"] == "assigned":
                break
        assert len(frame["partitions"]) == 2
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, produce, kafka, name, [b"%d" % i for i in range(6)], -2)
        delivered = []
        while len(delivered) < 6:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 20))
            delivered += frame.get("records", [])
        # Acknowledge the first record of partition 0 only, let the commit happen, then
        # drop the connection without a close frame (a browser tab killed, a network cut).
        first = min(r["offset"] for r in delivered if r["partition"] == 0)
        await ws.send(json.dumps({"type": "ack", "topic": name, "partition": 0, "offset": first}))
        await asyncio.sleep(1.5)
        ws.transport.abort()
        return sorted(r["value"] for r in delivered if (r["partition"], r["offset"]) != (0, first))

    unacked = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert len(unacked) == 5
    # A Kafka member of the same group takes over both partitions from the committed
    # offsets: exactly the unacknowledged records, nothing acknowledged.
    c = consumer(kafka, group)
    c.subscribe([name])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(json.loads(m.value()))
    extra = c.poll(1.0)
    assignment = c.assignment()
    c.close()
    assert sorted(got) == unacked
    assert extra is None
    assert len(assignment) == 2
