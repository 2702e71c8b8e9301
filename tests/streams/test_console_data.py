"""The console's data paths against a real broker: the console principal, the message
browser's bounded scans, test produce and the live tail socket (session + Origin)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import uuid

import psycopg
import pytest
from channels.testing import WebsocketCommunicator
from confluent_kafka import Producer
from django.conf import settings
from django.db import connection
from django.test import Client

from control_plane.asgi import application
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role, Tenant
from data_plane import internal_auth
from data_plane.client import ClusterClient, KafkaClientError
from data_plane.protocol.errors import ErrorCode
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.conftest import SYSTEM, make_user
from tests.streams.test_ws import closed_with, frames_until

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def people(kafka, django_db_blocker):
    """Committed users (the broker reads memberships from its own connection)."""
    suffix = uuid.uuid4().hex[:6]
    with django_db_blocker.unblock():
        a = Tenant.objects.get(slug=kafka.tenant_a)
        b = Tenant.objects.get(slug=kafka.tenant_b)
        users = {}
        for name, tenant, role in (
            ("viewer", a, Role.VIEWER),
            ("dev", a, Role.DEVELOPER),
            ("outsider", b, Role.OWNER),
            ("leaver", a, Role.DEVELOPER),
            ("quitter", a, Role.VIEWER),  # logs out
            ("changer", a, Role.VIEWER),  # changes password
        ):
            user = make_user(f"{name}-{suffix}")
            tenancy_services.add_member(SYSTEM, tenant, user=user, role=role)
            users[name] = user
        # Sessions too: the socket's middleware reads them from another thread.
        for user in users.values():
            client = Client()
            client.force_login(user)
            user.session_cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    yield users
    with django_db_blocker.unblock():
        for user in users.values():
            user.delete()


@pytest.fixture(scope="module")
def topic(kafka):
    """A 2-partition topic with 30 keyed JSON records, one binary record and headers."""
    name = topic_name("browse")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for i in range(30):
        producer.produce(
            name,
            key=f"user-{i % 3}".encode(),
            value=json.dumps({"n": i, "kind": "even" if i % 2 == 0 else "odd"}).encode(),
            partition=i % 2,
            headers=[("trace", f"t{i}".encode())],
        )
    producer.produce(name, key=b"blob", value=bytes([0, 255, 16, 1]), partition=0)
    assert producer.flush(20) == 0
    return name


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def console_client(kafka, tenant_slug: str, user_id: int) -> ClusterClient:
    host, port = kafka.bootstrap.split(",")[0].split(":")
    return ClusterClient(
        [(host, int(port))],
        username=internal_auth.console_username(tenant_slug, user_id),
        password=internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
        mechanism=internal_auth.MECHANISM,
    )


def test_the_broker_gives_a_console_member_their_roles_rights(kafka, people, topic):
    with console_client(kafka, kafka.tenant_a, people["viewer"].pk) as client:
        answer = client.read((topic, 0), 0, max_records=5, max_bytes=1 << 20)
        assert answer.error == ErrorCode.NONE and len(answer.records) == 5
    # Another tenant's member cannot act in this tenant: the name does not authenticate.
    with (
        console_client(kafka, kafka.tenant_a, people["outsider"].pk) as client,
        pytest.raises(KafkaClientError),
    ):
        client.read((topic, 0), 0, max_records=5, max_bytes=1 << 20)


def test_browser_shows_the_newest_records_pretty_and_binary_as_hex(kafka, people, topic):
    client = signed_in(people["viewer"])
    page = client.get(f"/t/{kafka.tenant_a}/topics/{topic}/messages/?limit=4")
    assert page.status_code == 200 and "Live tail" in page.content.decode()
    # htmx asks for the results only.
    partial = client.get(
        f"/t/{kafka.tenant_a}/topics/{topic}/messages/?limit=4", HTTP_HX_REQUEST="true"
    )
    html = partial.content.decode()
    assert "Scanned <strong>" in html and "<html" not in html
    assert html.count('<tr class="record">') == 4  # compact rows, each with a detail row
    assert html.count('<tr class="detail"') == 4
    assert "&quot;n&quot;: 29" in html  # newest first, pretty JSON (indented)
    assert "&quot;n&quot;: 0," not in html
    binary = client.get(f"/t/{kafka.tenant_a}/topics/{topic}/messages/?partition=0&key=blob")
    assert "00 ff 10 01" in binary.content.decode()
    b64 = client.get(
        f"/t/{kafka.tenant_a}/topics/{topic}/messages/?partition=0&key=blob&format=base64"
    )
    assert "AP8QAQ==" in b64.content.decode()


def test_filters_by_key_and_by_text_in_values_and_headers(kafka, people, topic):
    client = signed_in(people["viewer"])
    base = f"/t/{kafka.tenant_a}/topics/{topic}/messages/?from=earliest&limit=100"
    html = client.get(base + "&key=user-1").content.decode()
    shown = sorted(int(x) for x in _values(html))  # time order; equal stamps by partition
    assert shown == [i for i in range(30) if i % 3 == 1]
    html = client.get(base + "&text=t17").content.decode()  # a header value
    assert [int(x) for x in _values(html)] == [17]
    html = client.get(base + "&text=%22odd%22&partition=1").content.decode()
    assert [int(x) for x in _values(html)] == [i for i in range(30) if i % 2 == 1]


def _values(html: str) -> list[str]:
    return re.findall(r"&quot;n&quot;: (\d+)", html)


def test_a_scan_is_bounded_and_says_how_much_it_read(kafka, people, topic):
    client = signed_in(people["viewer"])
    url = f"/t/{kafka.tenant_a}/topics/{topic}/messages/?from=earliest&text=nowhere&scan=7"
    html = client.get(url).content.decode()
    assert "Scanned <strong>7</strong> records" in html
    assert "stopped at its limit of 7" in html
    assert 'id="scan-more"' in html
    more = html.split('id="scan-more"')[0].rsplit('href="', 1)[1].split('"')[0]
    assert "resume=" in more
    # Going on reads the next records: the two scans together read the whole topic.
    total = 7
    for _ in range(10):
        html = client.get(more.replace("&amp;", "&")).content.decode()
        total += int(html.split("Scanned <strong>")[1].split("<")[0])
        if 'id="scan-more"' not in html:
            break
        more = html.split('id="scan-more"')[0].rsplit('href="', 1)[1].split('"')[0]
    assert total == 31
    # A scan that read exactly the whole topic offers nothing more.
    exact = client.get(url.replace("scan=7", "scan=31")).content.decode()
    assert "Scanned <strong>31</strong> records" in exact and 'id="scan-more"' not in exact


def test_from_offset_and_timestamp(kafka, people, topic):
    client = signed_in(people["viewer"])
    base = f"/t/{kafka.tenant_a}/topics/{topic}/messages/?partition=1&limit=2"
    html = client.get(base + "&from=offset&offset=10").content.decode()
    assert [int(x) for x in _values(html)] == [21, 23]  # partition 1 holds odd n
    future = client.get(base + "&from=timestamp&timestamp=2999-01-01T00:00").content.decode()
    assert _values(future) == []
    bad = client.get(base + "&from=timestamp&timestamp=yesterday")
    assert bad.status_code == 400 and "enter a date and time" in bad.content.decode()


def test_developer_produces_a_test_record_and_viewer_cannot(kafka, people, topic):
    url = f"/t/{kafka.tenant_a}/topics/{topic}/produce/"
    record = {"key": "console", "value": '{"hello": "world"}', "headers": "src: console"}
    assert signed_in(people["viewer"]).post(url, {**record, "partition": "1"}).status_code == 403
    dev = signed_in(people["dev"])
    response = dev.post(url, {**record, "partition": "1"})
    assert response.status_code == 302 and "from=offset" in response.url
    html = dev.get(response.url).content.decode()
    assert "&quot;hello&quot;: &quot;world&quot;" in html and "console" in html
    bad = dev.post(url, {**record, "headers": "no colon here"}, follow=True)
    assert "write headers as name: value" in bad.content.decode()


def test_another_tenants_member_sees_nothing(kafka, people, topic):
    client = signed_in(people["outsider"])
    assert client.get(f"/t/{kafka.tenant_a}/topics/{topic}/messages/").status_code == 404
    assert client.post(f"/t/{kafka.tenant_a}/topics/{topic}/produce/").status_code == 404
    export = f"/t/{kafka.tenant_a}/topics/{topic}/messages/export/?from=earliest&as=csv"
    assert client.get(export).status_code == 404
    assert Client().get(export).status_code == 302  # signed out: to the sign-in page


def test_the_browser_hides_aborted_transactions_unless_asked(kafka, people):
    """Step 13: by default the page reads as a read_committed consumer and says what it
    left out; ``transactions=show`` marks the aborted records and the markers, in the page
    and in the export."""
    name = topic_name("browse-txn")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"transactional.id": name}))
    producer.init_transactions(30)
    for tag, end in (
        ("kept", producer.commit_transaction),
        ("dropped", producer.abort_transaction),
    ):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(name, value=json.dumps({"n": i, "tag": tag}).encode())
        producer.flush(30)
        end(30)
    client = signed_in(people["viewer"])
    base = f"/t/{kafka.tenant_a}/topics/{name}/messages/?from=earliest"
    html = client.get(base).content.decode()
    assert html.count('<tr class="record">') == 3 and "dropped" not in html
    assert 'id="scan-hidden"' in html and "Hidden: 3 records of aborted transactions" in html
    assert 'name="transactions" value="show"' in html  # the choice, unchecked
    html = client.get(base + "&transactions=show").content.decode()
    assert html.count('data-state="aborted"') == 3 and html.count('<tr class="record">') == 3
    assert html.count('data-state="commit"') == 1 and html.count('data-state="abort"') == 1
    assert 'id="scan-hidden"' not in html and "checked" in html
    _, body = _export(client, kafka, name, "from=earliest&transactions=show&as=jsonl")
    states = [json.loads(line)["transaction"] for line in body.splitlines()]
    assert states == ["", "", "", "commit", "aborted", "aborted", "aborted", "abort"]
    bad = client.get(base + "&transactions=maybe")
    assert bad.status_code == 400 and "transactions" in bad.content.decode()


# --- export ---------------------------------------------------------------------------------


def _export(client, kafka, topic, query: str):
    response = client.get(f"/t/{kafka.tenant_a}/topics/{topic}/messages/export/?{query}")
    body = b"".join(response.streaming_content).decode() if response.streaming else ""
    return response, body


def test_export_streams_the_rows_shown_as_json_lines_and_csv(kafka, people, topic):
    client = signed_in(people["viewer"])
    query = "from=earliest&key=user-1&limit=100"
    page = client.get(f"/t/{kafka.tenant_a}/topics/{topic}/messages/?{query}").content.decode()
    assert 'id="export-jsonl"' in page and "as=jsonl" in page and "rows=shown" in page
    response, body = _export(client, kafka, topic, query + "&as=jsonl&rows=shown")
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="{topic}-messages.jsonl"'
    lines = [json.loads(line) for line in body.splitlines()]
    assert sorted(json.loads(r["value"])["n"] for r in lines) == [
        i for i in range(30) if i % 3 == 1
    ]
    first = lines[0]
    assert first["key"] == "user-1" and first["key_format"] == "text"
    assert first["value_format"] == "json" and "\n" not in first["value"]  # on one line
    assert first["headers"] == [{"key": "trace", "value": f"t{json.loads(first['value'])['n']}"}]
    assert first["timestamp_type"] == "create_time" and first["time"].endswith("+00:00")
    # CSV: a header row, then the same rows; the chosen format applies (hex here).
    response, body = _export(client, kafka, topic, query + "&as=csv&format=hex")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(body)))
    assert len(rows) == 10 and {r["value_format"] for r in rows} == {"hex"}
    assert bytes.fromhex(rows[0]["value"]).startswith(b'{"n": ')
    assert json.loads(rows[0]["headers"])[0]["key"] == "trace"


def test_export_of_every_match_is_bounded_like_the_scan(kafka, people, topic):
    client = signed_in(people["viewer"])
    shown = _export(client, kafka, topic, "from=earliest&text=odd&limit=2&as=jsonl")[1]
    assert len(shown.splitlines()) == 2
    response, matched = _export(
        client, kafka, topic, "from=earliest&text=odd&limit=2&as=jsonl&rows=matched"
    )
    assert len(matched.splitlines()) == 15
    assert int(response["X-Millrace-Scanned"]) >= 31  # the whole topic, however long
    bounded = _export(client, kafka, topic, "from=earliest&text=odd&scan=10&as=jsonl&rows=matched")[
        1
    ]
    assert len(bounded.splitlines()) < 15
    assert (
        client.get(f"/t/{kafka.tenant_a}/topics/{topic}/messages/export/?as=xml").status_code == 400
    )
    assert (
        client.get(f"/t/{kafka.tenant_a}/topics/{topic}/messages/export/?scan=0").status_code == 400
    )


# --- live tail ------------------------------------------------------------------------------


def _session_headers(user, origin="http://localhost"):
    cookie = user.session_cookie
    return [
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
        (b"origin", origin.encode()),
        (b"host", b"testserver"),
    ]


async def _tail(kafka, headers):
    comm = WebsocketCommunicator(
        application, f"/ws/console/t/{kafka.tenant_a}/stream", headers=headers
    )
    connected, _ = await comm.connect(timeout=10)
    return comm, connected


def test_live_tail_streams_new_records_to_a_member(kafka, people, topic):
    headers = _session_headers(people["viewer"])

    async def run():
        comm, connected = await _tail(kafka, headers)
        assert connected
        await frames_until(comm, lambda f: f["type"] == "authenticated")
        await comm.send_json_to(
            {"type": "subscribe", "topics": [topic], "from": "latest", "value_format": "string"}
        )
        await frames_until(comm, lambda f: f["type"] == "subscribed")
        await asyncio.sleep(1.0)
        producer = Producer(confluent_conf(kafka, kafka.admin_a))
        producer.produce(topic, key=b"live", value=b"tail-me", partition=1)
        producer.flush(10)
        frames = await frames_until(comm, lambda f: f["type"] == "records")
        values = [r["value"] for r in frames[-1]["records"]]
        # A viewer's socket may not produce, and may not join groups.
        await comm.send_json_to({"type": "produce", "id": 1, "topic": topic, "value": "x"})
        denied = await frames_until(comm, lambda f: f["type"] == "error")
        await comm.send_json_to({"type": "ping", "id": 2})
        await frames_until(comm, lambda f: f["type"] == "pong")
        await comm.disconnect()
        return values, denied[-1]

    values, denied = asyncio.run(run())
    assert values == ["tail-me"]
    assert denied["code"] == "permission_denied"


def test_live_tail_filters_and_reads_one_partition(kafka, people, topic):
    headers = _session_headers(people["viewer"])

    async def run():
        comm, connected = await _tail(kafka, headers)
        assert connected
        await frames_until(comm, lambda f: f["type"] == "authenticated")
        await comm.send_json_to({"type": "subscribe", "topics": [topic], "filter": {"kex": "1"}})
        bad = await frames_until(comm, lambda f: f["type"] == "error")
        await comm.send_json_to(
            {
                "type": "subscribe",
                "partitions": [{"topic": topic, "partition": 1}],
                "from": "latest",
                "value_format": "string",
                "filter": {"text": "pick"},
            }
        )
        await frames_until(comm, lambda f: f["type"] == "subscribed")
        await asyncio.sleep(1.0)
        producer = Producer(confluent_conf(kafka, kafka.admin_a))
        producer.produce(topic, value=b"skip-me", partition=1)
        producer.produce(topic, value=b"pick-0", partition=0)  # another partition
        producer.produce(topic, value=b"plain", partition=1, headers=[("pick", b"by-name")])
        producer.produce(topic, value=b"pick-1", partition=1)
        producer.flush(10)
        got: list[str] = []
        for _ in range(5):
            frames = await frames_until(comm, lambda f: f["type"] == "records")
            got += [r["value"] for r in frames[-1]["records"]]
            if len(got) >= 2:
                break
        await comm.disconnect()
        return bad[-1], got

    bad, got = asyncio.run(run())
    assert bad["code"] == "bad_frame" and "filter" in bad["message"]
    assert got == ["plain", "pick-1"]


def test_live_tail_refuses_other_origins_outsiders_and_anonymous(kafka, people):
    async def run():
        _, cross_site = await _tail(kafka, _session_headers(people["viewer"], "http://evil.test"))
        comm, connected = await _tail(kafka, _session_headers(people["outsider"]))
        assert connected
        frames, code = await closed_with(comm)
        anon, anon_ok = await _tail(kafka, [(b"origin", b"http://localhost")])
        assert anon_ok
        anon_frames, anon_code = await closed_with(anon)
        return cross_site, frames, code, anon_frames, anon_code

    cross_site, frames, code, anon_frames, anon_code = asyncio.run(run())
    assert cross_site is False
    assert code == 4404 and frames[-1]["code"] == "not_found"
    assert anon_code == 4401 and anon_frames[-1]["code"] == "unauthenticated"


def test_the_console_principal_ends_with_the_membership(kafka, people, topic):
    user = people["leaver"]
    with console_client(kafka, kafka.tenant_a, user.pk) as client:
        assert client.read((topic, 0), 0, max_records=1, max_bytes=4096).records
    # Committed on a connection of its own: the broker must see it.
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as side:
        side.execute("DELETE FROM tenancy_membership WHERE user_id = %s", [user.pk])
    with (
        console_client(kafka, kafka.tenant_a, user.pk) as client,
        pytest.raises(KafkaClientError, match="refused authentication"),
    ):
        client.read((topic, 0), 0, max_records=1, max_bytes=4096)


def test_logging_out_ends_the_sessions_live_tail_at_once(kafka, people):
    from asgiref.sync import sync_to_async

    user = people["quitter"]

    async def run():
        comm, connected = await _tail(kafka, _session_headers(user))
        assert connected
        await frames_until(comm, lambda f: f["type"] == "authenticated")
        browser = Client()
        browser.cookies[settings.SESSION_COOKIE_NAME] = user.session_cookie
        await sync_to_async(browser.post)("/logout/")
        return await closed_with(comm, seconds=1.5)  # at once: before the periodic check

    frames, code = asyncio.run(run())
    assert code == 4401 and frames[-1]["code"] == "session_ended"


def test_a_password_change_ends_the_live_tails_of_older_sessions(kafka, people, django_db_blocker):
    from tests.broker.test_lifecycle import committed

    user = people["changer"]

    def change_password():
        fresh = type(user).objects.get(pk=user.pk)
        fresh.set_password("a new password for this test")
        fresh.save()

    async def run():
        comm, connected = await _tail(kafka, _session_headers(user))
        assert connected
        await frames_until(comm, lambda f: f["type"] == "authenticated")
        await asyncio.to_thread(committed, django_db_blocker, change_password)
        return await closed_with(comm, seconds=15)

    frames, code = asyncio.run(run())
    assert code == 4401 and frames[-1]["code"] == "session_ended"
