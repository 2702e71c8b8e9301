"""Connection limits of a real broker process: the authentication deadline, the idle
limit, connections per address and per tenant, and the back-off of failed logins."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from data_plane.broker.limits import MAX_DELAY_SECONDS, FailureDelays
from data_plane.protocol.errors import ErrorCode
from data_plane.records import Record, RecordBatch
from tests.broker.conftest import _brokers, confluent_conf
from tests.broker.test_clients import confluent_consume, confluent_create, topic_name
from tests.broker.test_wire import SASL_AUTH, SASL_HANDSHAKE, RawClient, assert_broker_healthy

pytestmark = pytest.mark.django_db

PER_IP, PER_TENANT, POOL = 30, 6, 2**20


@pytest.fixture(scope="module")
def limited(django_db_setup, django_db_blocker, tmp_path_factory):
    extra = {
        "MILLRACE_BROKER_AUTH_TIMEOUT_MS": "1500",
        "MILLRACE_BROKER_CONNECTIONS_MAX_IDLE_MS": "3000",
        "MILLRACE_BROKER_MAX_CONNECTIONS_PER_IP": str(PER_IP),
        "MILLRACE_BROKER_MAX_CONNECTIONS_PER_TENANT": str(PER_TENANT),
        "MILLRACE_BROKER_QUEUED_MAX_REQUEST_BYTES": str(POOL),
    }
    for envs in _brokers(django_db_blocker, tmp_path_factory, 1, extra_env=extra):
        yield envs[0]


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True if the broker closes ``sock`` within ``seconds`` (bounded wait)."""
    sock.settimeout(0.5)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except ConnectionError:
            return True
    return False


def test_unauthenticated_connections_holding_partial_frames_are_closed(limited):
    attackers = []
    for _ in range(10):
        sock = socket.create_connection(("127.0.0.1", limited.port), timeout=10)
        sock.sendall(struct.pack(">i", 512 * 1024) + b"\0" * 65536)  # a partial frame
        attackers.append(sock)
    assert all(closed_within(s, 15) for s in attackers)
    for s in attackers:
        s.close()
    assert_broker_healthy(limited)


def test_an_idle_authenticated_connection_is_closed_and_a_busy_one_is_not(limited):
    idle, busy = RawClient(limited), RawClient(limited)
    idle.login(limited.admin_a)
    busy.login(limited.admin_a)
    deadline = time.monotonic() + 6  # twice the idle limit
    while time.monotonic() < deadline:
        assert busy.request(18, 3, {})["error_code"] == 0  # ApiVersions keeps it busy
        time.sleep(0.5)
    assert closed_within(idle.sock, 10)
    assert busy.request(18, 3, {})["error_code"] == 0
    idle.close()
    busy.close()


def test_connections_per_address_are_capped(limited):
    held = [
        socket.create_connection(("127.0.0.1", limited.port), timeout=10) for _ in range(PER_IP)
    ]
    try:
        extra = socket.create_connection(("127.0.0.1", limited.port), timeout=10)
        assert closed_within(extra, 5)  # refused while the address holds its limit
        extra.close()
    finally:
        for s in held:
            s.close()
    # Once they are gone, the address may connect again.
    deadline = time.monotonic() + 10
    while True:
        try:
            assert_broker_healthy(limited)
            break
        except (ConnectionError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_connections_per_tenant_are_capped_and_other_tenants_are_not_affected(limited):
    clients = []
    for _ in range(PER_TENANT):
        c = RawClient(limited)
        c.login(limited.admin_a)
        clients.append(c)
    over = RawClient(limited)
    assert over.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    token = b"\x00" + limited.admin_a.key_id.encode() + b"\x00" + limited.admin_a.secret.encode()
    answer = over.request(SASL_AUTH, 2, {"auth_bytes": token})
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "connection limit" in answer["error_message"]
    over.close()
    other = RawClient(limited)
    other.login(limited.admin_b)  # another tenant is unaffected
    other.close()
    clients.pop().close()
    deadline = time.monotonic() + 10
    while True:  # the freed slot is counted back once the broker sees the close
        again = RawClient(limited)
        try:
            again.login(limited.admin_a)
            break
        except AssertionError:
            again.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    again.close()
    for c in clients:
        c.close()


def _logins(env, key, count: int) -> tuple[list[RawClient], str | None]:
    """Up to ``count`` logged-in connections; stops at the first refusal (its message)."""
    clients: list[RawClient] = []
    for _ in range(count):
        c = RawClient(env)
        assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\x00" + key.key_id.encode() + b"\x00" + key.secret.encode()
        answer = c.request(SASL_AUTH, 2, {"auth_bytes": token})
        if answer["error_code"] != 0:
            c.close()
            return clients, answer["error_message"]
        clients.append(c)
    return clients, None


def test_a_plans_connection_limit_and_retention_ceiling_apply_without_a_restart(
    limited, django_db_blocker
):
    from confluent_kafka.admin import AdminClient, NewTopic

    from control_plane.core.actor import Actor
    from control_plane.core.notify import notify_metadata_changed
    from control_plane.tenancy import plans
    from control_plane.tenancy import services as tenancy_services
    from control_plane.tenancy.models import Plan, Tenant
    from tests.broker.test_lifecycle import committed

    operator = Actor.system()
    limits = {
        "max_partitions": 100,
        "max_storage_bytes": 2**30,
        "produce_byte_rate": 2**20,
        "fetch_byte_rate": 2**20,
        "max_connections": 2,
        "max_retention_ms": 3_600_000,
        "max_connectors": 1,
        "max_connector_tasks": 1,
    }
    slug = f"small-{topic_name('p')[-6:]}"

    def assign():
        plan = plans.create_plan(operator, slug=slug, name="Small", limits=limits)
        tenant = Tenant.objects.get(slug=limited.tenant_b)
        tenancy_services.update_tenant(operator, tenant, plan=plan)
        return plan

    plan = committed(django_db_blocker, assign)
    try:
        deadline = time.monotonic() + 10
        while True:  # the broker learns the tenant's new limits within a moment
            clients, refused = _logins(limited, limited.admin_b, 3)
            for c in clients:
                c.close()
            if refused is not None or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert len(clients) == 2 and "connection limit" in (refused or "")
        # A topic may not keep data longer than the plan allows (over the Kafka protocol).
        admin = AdminClient(confluent_conf(limited, limited.admin_b))
        name = topic_name("ceiling")
        futures = admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "-1"})])
        with pytest.raises(Exception, match="at most 3600000"):
            futures[name].result(timeout=20)
        fine = admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "600000"})])
        fine[name].result(timeout=20)
        # An upgrade: the plan allows four; the next connections get in, no restart.
        committed(
            django_db_blocker,
            lambda: plans.update_plan(operator, plan, limits={"max_connections": 4}),
        )
        deadline = time.monotonic() + 10
        while True:
            clients, refused = _logins(limited, limited.admin_b, 3)
            for c in clients:
                c.close()
            if refused is None or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert refused is None and len(clients) == 3
    finally:

        def restore():
            tenant = Tenant.objects.get(slug=limited.tenant_b)
            Tenant.objects.filter(pk=tenant.pk).update(
                plan=None, max_connections=1000, max_retention_ms=None
            )
            notify_metadata_changed("tenant.updated", tenant=tenant.pk)
            Plan.objects.filter(slug=slug).delete()

        committed(django_db_blocker, restore)


def test_real_clients_work_within_the_limits(limited):
    from confluent_kafka import Producer

    name = topic_name("limits")
    confluent_create(limited, limited.admin_a, name, partitions=1)
    producer = Producer(confluent_conf(limited, limited.admin_a))
    for i in range(100):
        producer.produce(name, value=b"%d" % i)
    assert producer.flush(30) == 0
    assert len(confluent_consume(limited, limited.admin_a, name, 1, 100)) == 100


def test_failed_logins_from_one_address_back_off_and_others_do_not():
    now = [0.0]
    delays = FailureDelays(clock=lambda: now[0])
    seen = [delays.failed("10.0.0.1") for _ in range(8)]
    assert seen == sorted(seen) and seen[0] < seen[-1] == MAX_DELAY_SECONDS
    assert delays.failed("10.0.0.2") == seen[0]  # another address starts afresh
    now[0] += 61  # a minute later the address starts afresh too
    assert delays.failed("10.0.0.1") == seen[0]


def test_the_back_off_has_a_configurable_ceiling():
    delays = FailureDelays(clock=lambda: 0.0, max_delay=0.3)
    assert [delays.failed("10.0.0.9") for _ in range(4)] == [0.1, 0.2, 0.3, 0.3]


def test_the_request_pool_makes_readers_wait_and_serves_them_in_order():
    import asyncio

    from data_plane.broker.limits import MemoryPool

    async def scenario():
        pool = MemoryPool(100)
        assert await pool.acquire(60) == 60
        order = []

        async def take(name, size):
            got = await pool.acquire(size)
            order.append(name)
            return got

        first = asyncio.create_task(take("first", 50))
        second = asyncio.create_task(take("second", 10))  # fits, but waits its turn
        await asyncio.sleep(0.05)
        assert order == [] and pool.available == 40
        pool.release(60)
        assert await first == 50 and await second == 10
        assert order == ["first", "second"] and pool.available == 40
        big = asyncio.create_task(take("big", 1000))  # more than the pool: all of it
        await asyncio.sleep(0.05)
        assert not big.done()
        pool.release(60)
        assert await big == 100 and pool.available == 0
        cancelled = asyncio.create_task(take("cancelled", 10))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        pool.release(100)
        assert pool.available == 100  # a cancelled waiter holds nothing

    asyncio.run(scenario())


def test_requests_in_flight_share_one_pool_and_wait_for_room(limited):
    """A connection that announces a request of nearly the whole pool and sends only part
    of it holds that much; another client's request waits for room (its bytes are not read),
    and is served once the hog is gone. The broker never buffers more than the pool."""
    name = topic_name("pool")
    confluent_create(limited, limited.admin_a, name, partitions=1)
    hog = RawClient(limited)
    hog.login(limited.admin_a)
    hog.sock.sendall(struct.pack(">i", POOL - 1000) + b"\0" * 1000)  # most of the pool
    time.sleep(0.5)  # the broker reads the size and reserves it
    waiter = RawClient(limited)
    waiter.login(limited.admin_a)
    batch = RecordBatch(0, tuple(Record(i, 1, None, b"x" * 1000) for i in range(100)))
    body = {
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": batch.encode()}]}],
    }
    waiter.send_request(0, 8, body)
    waiter.sock.settimeout(2)
    with pytest.raises(TimeoutError):
        waiter.sock.recv(1)  # no room in the pool: not even read yet
    hog.close()
    waiter.sock.settimeout(30)
    size = struct.unpack(">i", waiter._recv(4))[0]
    assert len(waiter._recv(size)) == size  # answered once the hog's bytes were freed
    waiter.close()
    assert len(confluent_consume(limited, limited.admin_a, name, 1, 100)) == 100
