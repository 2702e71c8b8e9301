"""WebSocket streams against a real broker, through the ASGI app and the real channel layer."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections

from control_plane.asgi import application
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer

pytestmark = pytest.mark.django_db


def basic(key):
    return b"Basic " + base64.b64encode(f"{key.key_id}:{key.secret}".encode())


def path(kafka, tenant=None, query=""):
    return f"/ws/v1/tenants/{tenant or kafka.tenant_a}/stream" + (f"?{query}" if query else "")


async def open_socket(kafka, key=None, *, tenant=None, auth=True, query=""):
    headers = [(b"authorization", basic(key or kafka.admin_a))] if auth else []
    comm = WebsocketCommunicator(application, path(kafka, tenant, query), headers=headers)
    connected, _ = await comm.connect(timeout=10)
    assert connected
    return comm


async def frames_until(comm, predicate, seconds=30):
    """Frames received until one satisfies ``predicate`` (which is included)."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        frame = await comm.receive_json_from(timeout=deadline - time.monotonic())
        out.append(frame)
        if predicate(frame):
            return out
    raise AssertionError(f"no matching frame in {out[-5:]}")


async def closed_with(comm, seconds=10):
    """(frames before the close, close code)."""
    frames = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = await comm.receive_output(timeout=deadline - time.monotonic())
        if message["type"] == "websocket.close":
            return frames, message.get("code")
        frames.append(json.loads(message["text"]))
    raise AssertionError("socket not closed")


def produce(kafka, name, values, partition=None):
    from confluent_kafka import Producer

    p = Producer(confluent_conf(kafka, kafka.admin_a, **{"linger.ms": 2}))
    for i, v in enumerate(values):
        kwargs = (
            {}
            if partition is None
            else {"partition": partition if partition >= 0 else i % -partition}
        )
        p.produce(name, value=v, key=str(i).encode(), **kwargs)
    assert p.flush(30) == 0


def run(coro):
    async def main():
        try:
            return await asyncio.wait_for(coro, 120)
        finally:
            # The stream's database work ran in asgiref's thread: close its connection, or
            # the test database could not be dropped at the end.
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    return asyncio.run(main())


def test_positions_window_and_acks(kafka):
    name = topic_name("ws")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    produce(kafka, name, [b"\x00\xffraw%d" % i for i in range(30)], partition=0)

    async def scenario():
        comm = await open_socket(kafka)
        hello = await comm.receive_json_from(timeout=10)
        assert hello["type"] == "authenticated" and hello["principal"] == kafka.admin_a.principal
        await comm.send_json_to(
            {
                "type": "subscribe",
                "partitions": [{"topic": name, "partition": 0, "position": "earliest"}],
                "window": 10,
                "value_format": "binary",
                "key_format": "string",
            }
        )
        await frames_until(comm, lambda f: f["type"] == "subscribed")
        records = []
        while len(records) < 10:
            frame = await comm.receive_json_from(timeout=10)
            assert frame["type"] == "records"
            records += frame["records"]
        assert [r["offset"] for r in records] == list(range(10))
        assert base64.b64decode(records[3]["value"]) == b"\x00\xffraw3"
        assert records[3]["key"] == "3"
        # The window is spent: nothing more until an acknowledgement.
        assert await comm.receive_nothing(timeout=1.5)
        await comm.send_json_to({"type": "ack", "topic": name, "partition": 0, "offset": 4})
        more = await frames_until(comm, lambda f: f["type"] == "records")
        got = [r["offset"] for f in more for r in f.get("records", [])]
        while len(got) < 5:
            frame = await comm.receive_json_from(timeout=10)
            got += [r["offset"] for r in frame["records"]]
        assert got == [10, 11, 12, 13, 14]
        assert await comm.receive_nothing(timeout=1)
        # By timestamp: a second socket starting at the timestamp of offset 20.
        await comm.disconnect()
        comm = await open_socket(kafka)
        await comm.receive_json_from(timeout=10)
        await comm.send_json_to(
            {
                "type": "subscribe",
                "partitions": [{"topic": name, "partition": 0, "offset": 25}],
                "value_format": "binary",
            }
        )
        frames = await frames_until(comm, lambda f: f["type"] == "records")
        assert frames[-1]["records"][0]["offset"] == 25
        await comm.disconnect()

    run(scenario())


def test_stream_without_a_format_shows_text_as_text(kafka):
    name = topic_name("wsa")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    produce(kafka, name, [b'{"n": 1}', b"plain text", b"\x00\xff"], partition=0)

    async def read(**formats):
        comm = await open_socket(kafka)
        await comm.receive_json_from(timeout=10)
        where = [{"topic": name, "partition": 0, "position": "earliest"}]
        await comm.send_json_to({"type": "subscribe", "partitions": where, **formats})
        records = []
        while len(records) < 3:
            frame = await comm.receive_json_from(timeout=20)
            records += frame.get("records", [])
        await comm.disconnect()
        return [(r["key"], r.get("key_format"), r["value"], r.get("value_format")) for r in records]

    async def scenario():
        # The keys are b"0", b"1", b"2": JSON numbers.
        assert await read() == [
            (0, "json", {"n": 1}, "json"),
            (1, "json", "plain text", "string"),
            (2, "json", "AP8=", "binary"),
        ]
        assert await read(key_format="string", value_format="json") == [
            ("0", None, {"n": 1}, None),
            ("1", None, "cGxhaW4gdGV4dA==", "binary"),
            ("2", None, "AP8=", "binary"),
        ]
        assert await read(value_format="string") == [
            (0, "json", '{"n": 1}', None),
            (1, "json", "plain text", None),
            (2, "json", "AP8=", "binary"),
        ]

    run(scenario())


def test_group_member_shares_partitions_and_unacked_records_are_redelivered(kafka):
    name = topic_name("wsg")
    group = f"g-{name}"
    confluent_create(kafka, kafka.admin_a, name, partitions=4)

    async def scenario():
        comm = await open_socket(kafka)
        await comm.receive_json_from(timeout=10)
        await comm.send_json_to(
            {
                "type": "subscribe",
                "topics": [name],
                "group": group,
                "from": "earliest",
                "window": 1000,
            }
        )
        frames = await frames_until(comm, lambda f: f["type"] == "assigned")
        assert len(frames[-1]["partitions"]) == 4
        # A Kafka client joins the group: two partitions each.
        c = consumer(kafka, group)
        c.subscribe([name])
        loop = asyncio.get_running_loop()
        mine: set = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await loop.run_in_executor(None, c.poll, 0.2)
            # (A receive that times out would stop the app: look before taking.)
            frame = {} if await comm.receive_nothing(0.1) else await comm.receive_json_from()
            if frame.get("type") == "assigned":
                mine = {(p["topic"], p["partition"]) for p in frame["partitions"]}
            theirs = {(t.topic, t.partition) for t in c.assignment()}
            if len(mine) == 2 and len(theirs) == 2:
                break
        assert len(mine) == 2 and mine.isdisjoint(theirs)
        # Two records on each partition; the socket acknowledges only the first of each.
        await loop.run_in_executor(None, produce, kafka, name, [b"%d" % i for i in range(8)], -4)
        delivered = []
        while len(delivered) < 4:
            frame = await comm.receive_json_from(timeout=20)
            delivered += frame.get("records", [])
        kafka_seen = []
        deadline = time.monotonic() + 20
        while len(kafka_seen) < 4 and time.monotonic() < deadline:
            m = await loop.run_in_executor(None, c.poll, 0.2)
            if m is not None and m.error() is None:
                kafka_seen.append(m.value())
        assert len(kafka_seen) == 4
        await loop.run_in_executor(None, lambda: c.commit(asynchronous=False))
        first = {}
        for r in delivered:
            first.setdefault(r["partition"], r["offset"])
        for partition, offset in first.items():
            await comm.send_json_to(
                {"type": "ack", "topic": name, "partition": partition, "offset": offset}
            )
        await asyncio.sleep(1.5)  # commits follow acknowledgements
        unacked = sorted(r["value"] for r in delivered if r["offset"] != first[r["partition"]])
        # Killing the socket makes its member leave: the Kafka member gets everything,
        # and the unacknowledged records again (at-least-once), not the acknowledged ones.
        await comm.disconnect()
        redelivered = []
        deadline = time.monotonic() + 30
        while len(redelivered) < 2 and time.monotonic() < deadline:
            m = await loop.run_in_executor(None, c.poll, 0.2)
            if m is not None and m.error() is None:
                redelivered.append(json.loads(m.value()))
        assert len(c.assignment()) == 4
        extra = await loop.run_in_executor(None, c.poll, 1.0)
        c.close()
        assert sorted(redelivered) == unacked
        assert extra is None

    run(scenario())


def test_acknowledged_offsets_are_committed_when_the_socket_closes(kafka, monkeypatch):
    """at-least-once: what was acknowledged since the last periodic commit is committed on
    close, before the socket's member leaves (the periodic commit is turned off here, so
    only the close can have committed)."""
    from confluent_kafka import Consumer, TopicPartition

    from control_plane.streams import consumers as ws

    monkeypatch.setattr(ws, "COMMIT_INTERVAL_S", 3600.0)
    name = topic_name("wsc")
    group = f"g-{name}"
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    produce(kafka, name, [b"%d" % i for i in range(5)], partition=0)

    async def scenario():
        comm = await open_socket(kafka)
        await comm.receive_json_from(timeout=10)
        await comm.send_json_to(
            {"type": "subscribe", "topics": [name], "group": group, "from": "earliest"}
        )
        delivered = []
        deadline = time.monotonic() + 30
        while len(delivered) < 5 and time.monotonic() < deadline:
            frame = await comm.receive_json_from(timeout=20)
            delivered += frame.get("records", [])
        assert [r["offset"] for r in delivered] == [0, 1, 2, 3, 4]
        await comm.send_json_to({"type": "ack", "topic": name, "partition": 0, "offset": 2})
        await comm.receive_nothing(0.2)  # the ack is taken before the close
        await comm.disconnect()

    run(scenario())
    c = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": group}))
    try:
        (found,) = c.committed([TopicPartition(name, 0)], timeout=10)
    finally:
        c.close()
    assert found.offset == 3  # the next record to read after the acknowledged one


def test_authentication_and_bad_frames(kafka, settings):
    shared = f"shared-{topic_name()}"
    private = topic_name("private")
    confluent_create(kafka, kafka.admin_a, shared, partitions=1)
    confluent_create(kafka, kafka.admin_a, private, partitions=1)

    async def scenario():
        # Credentials in the URL are refused (URLs are logged).
        comm = await open_socket(kafka, auth=False, query="secret=abc")
        frames, code = await closed_with(comm)
        assert code == 4400 and frames[0]["code"] == "credentials_in_url"
        # A wrong secret in an auth frame.
        comm = await open_socket(kafka, auth=False)
        await comm.send_json_to({"type": "auth", "key_id": kafka.admin_a.key_id, "secret": "nope"})
        frames, code = await closed_with(comm)
        assert code == 4401 and "invalid" in frames[0]["message"]
        # Anything before authenticating closes the socket.
        comm = await open_socket(kafka, auth=False)
        await comm.send_json_to({"type": "subscribe", "topics": [shared]})
        _, code = await closed_with(comm)
        assert code == 4401
        # Another tenant's path does not exist for this key.
        comm = await open_socket(kafka, kafka.admin_b)
        _, code = await closed_with(comm)
        assert code == 4404
        # The reader key, authenticated by an auth frame: may read shared-*, nothing else.
        comm = await open_socket(kafka, auth=False)
        await comm.send_json_to(
            {"type": "auth", "key_id": kafka.reader_a.key_id, "secret": kafka.reader_a.secret}
        )
        assert (await comm.receive_json_from(timeout=10))["type"] == "authenticated"
        await comm.send_json_to({"type": "subscribe", "topics": [private]})
        frame = await comm.receive_json_from(timeout=10)
        assert frame["code"] == "permission_denied" and private in frame["message"]
        await comm.send_json_to({"type": "subscribe", "topics": [shared], "group": "g"})
        frame = await comm.receive_json_from(timeout=10)
        assert frame["code"] == "permission_denied" and "group" in frame["message"]
        await comm.send_json_to({"type": "produce", "id": 7, "topic": shared, "value": 1})
        frame = await comm.receive_json_from(timeout=10)
        assert frame == {**frame, "type": "error", "id": 7, "code": "permission_denied"}
        await comm.send_json_to({"type": "subscribe", "topics": [shared], "from": "earliest"})
        assert (await comm.receive_json_from(timeout=10))["type"] == "subscribed"
        # Malformed frames get error frames; too many close the socket.
        settings.MILLRACE_WS_MAX_BAD_FRAMES = 10
        await comm.send_to(text_data="{nope")
        assert (await comm.receive_json_from(timeout=5))["code"] == "bad_frame"
        await comm.send_json_to({"type": "ack", "topic": shared, "partition": "x"})
        assert (await comm.receive_json_from(timeout=5))["code"] == "bad_frame"
        for _ in range(7):
            await comm.send_json_to({"type": "what"})
            assert (await comm.receive_json_from(timeout=5))["code"] == "bad_frame"
        await comm.send_to(bytes_data=b"\x00")
        frames, code = await closed_with(comm)
        assert code == 1008 and frames[-1]["code"] == "too_many_bad_frames"

    run(scenario())


def test_produce_over_the_socket(kafka):
    name = topic_name("wsp")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)

    async def scenario():
        comm = await open_socket(kafka)
        await comm.receive_json_from(timeout=10)
        for i in range(5):
            await comm.send_json_to(
                {
                    "type": "produce",
                    "id": f"r{i}",
                    "topic": name,
                    "partition": 1,
                    "key": f"k{i}",
                    "value": base64.b64encode(bytes([i, 255])).decode(),
                    "value_format": "binary",
                    "headers": {"n": str(i)},
                }
            )
        replies = {}
        while len(replies) < 5:
            frame = await comm.receive_json_from(timeout=20)
            replies[frame["id"]] = frame
        assert [replies[f"r{i}"]["offset"] for i in range(5)] == [0, 1, 2, 3, 4]
        assert {r["type"] for r in replies.values()} == {"produced"}
        await comm.send_json_to(
            {"type": "produce", "id": "bad", "topic": name, "partition": 5, "value": 1}
        )
        frame = await comm.receive_json_from(timeout=10)
        assert frame["id"] == "bad" and frame["code"] == "not_found"
        await comm.disconnect()

    run(scenario())
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": "check"}))
    c.assign([TopicPartition(name, 1, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m)
    c.close()
    assert [m.value() for m in got] == [bytes([i, 255]) for i in range(5)]
    assert [m.key() for m in got] == [b'"k%d"' % i for i in range(5)]
    assert got[2].headers() == [("n", b"2")]


@pytest.mark.parametrize("path", ["broadcast", "periodic check"])
def test_revoking_the_key_closes_the_stream(kafka, settings, monkeypatch, path):
    if path == "broadcast":
        settings.MILLRACE_WS_KEY_CHECK_SECONDS = 600  # only the channel layer can close it
    else:
        settings.MILLRACE_WS_KEY_CHECK_SECONDS = 2
        monkeypatch.setattr("control_plane.core.notify._close_streams", lambda ids: None)
    from control_plane.access import services
    from control_plane.access.models import ApiKey
    from tests.broker.conftest import SYSTEM, _key

    name = topic_name("rev")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    result = {}

    def make_key():
        # Committed (another thread, its own connection) so the broker sees it.
        from control_plane.tenancy.models import Tenant

        tenant = Tenant.objects.get(slug=kafka.tenant_a)
        result["key"] = _key(tenant, f"temp-{name}-{path[0]}", [("topic", "literal", name, "read")])
        connections.close_all()

    t = threading.Thread(target=make_key)
    t.start()
    t.join()
    key = result["key"]

    def revoke():
        services.revoke_api_key(SYSTEM, ApiKey.objects.get(key_id=key.key_id))
        connections.close_all()

    async def scenario():
        comm = await open_socket(kafka, key)
        assert (await comm.receive_json_from(timeout=10))["type"] == "authenticated"
        await comm.send_json_to({"type": "subscribe", "topics": [name]})
        assert (await comm.receive_json_from(timeout=10))["type"] == "subscribed"
        started = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, revoke)
        frames, code = await closed_with(comm, seconds=5)
        assert code == 4401 and frames[-1]["code"] == "key_revoked"
        return time.monotonic() - started

    try:
        assert run(scenario()) < 5
    finally:
        # What this test committed must not reach later tests of this database.
        def cleanup():
            from control_plane.access.models import ServiceAccount
            from control_plane.audit.models import AuditEvent

            AuditEvent.objects.filter(
                tenant_slug=kafka.tenant_a, object_repr__contains="temp-"
            ).delete()
            AuditEvent.objects.filter(object_id=key.key_id).delete()
            ServiceAccount.objects.filter(name__startswith="temp-").delete()
            connections.close_all()

        t = threading.Thread(target=cleanup)
        t.start()
        t.join()


def test_a_client_that_never_acknowledges_holds_bounded_memory(kafka):
    name = topic_name("slow")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    produce(kafka, name, [b"x" * 200] * 20_000, partition=-2)

    async def scenario():
        comm = await open_socket(kafka)
        await comm.receive_json_from(timeout=10)
        await comm.send_json_to(
            {"type": "subscribe", "topics": [name], "from": "earliest", "window": 300}
        )
        await frames_until(comm, lambda f: f["type"] == "subscribed")
        received = 0
        while received < 300:
            frame = await comm.receive_json_from(timeout=10)
            received += len(frame.get("records", []))
        # The window is spent: the server sends nothing more, however long it waits, and
        # what it holds for this client is the window plus the Kafka client's bounded
        # prefetch (fetch_max_bytes), not the 4 MB backlog.
        assert received == 300
        assert await comm.receive_nothing(timeout=3)
        await comm.disconnect()

    run(scenario())
