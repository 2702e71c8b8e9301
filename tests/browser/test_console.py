"""The console in real headless Chromium (Debian's ``chromium``, driven by Playwright),
served by a real daphne process next to a real broker, on this run's database.

The tests run in order and share one signed-in owner of tenant A: sign in, create a
topic, watch the live tail while records are produced, produce a test record and find it
in the message browser, create a service account, a key and an ACL, ask the ACL checker,
watch a consumer group's lag move and reset its offsets; then a member of tenant B signs
in and sees none of it. Screenshots of the main pages go to ``CONSOLE_SCREENSHOTS`` (``make
screenshots`` writes docs/images/console/, which docs/console.md shows) or a temporary
directory.

daphne reads the database from its own process, so what the tests write must be
committed: users are made by the module's fixture (outside any test transaction) and lag
samples in a thread of their own (:func:`committed`); the users are removed at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from django.db import connection, connections

from bench.common import start_web, stop_process
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role, Tenant
from tests.broker.conftest import confluent_conf, free_port
from tests.broker.test_clients import confluent_create
from tests.broker.test_groups import consumer
from tests.conftest import SYSTEM, make_user

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (.ci/run installs it)",
    ),
    pytest.mark.django_db,
]
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def world(kafka, django_db_blocker, tmp_path_factory):
    """daphne on loopback, an owner of tenant A and a member of tenant B (committed)."""
    suffix = uuid.uuid4().hex[:6]
    with django_db_blocker.unblock():
        alice = make_user(f"alice-{suffix}")
        tenancy_services.add_member(
            SYSTEM, Tenant.objects.get(slug=kafka.tenant_a), user=alice, role=Role.OWNER
        )
        bob = make_user(f"bob-{suffix}")
        tenancy_services.add_member(
            SYSTEM, Tenant.objects.get(slug=kafka.tenant_b), user=bob, role=Role.OWNER
        )
    port = free_port()
    web = start_web(kafka.env, port, tmp_path_factory.mktemp("web") / "daphne.log")
    shots = Path(os.environ.get("CONSOLE_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    try:
        yield {
            "base": f"http://127.0.0.1:{port}",
            "alice": alice,
            "bob": bob,
            "shots": shots,
            "topic": f"orders-{suffix}",
            "group": f"billing-{suffix}",
            "account": f"pipeline-{suffix}",
        }
    finally:
        stop_process(web, grace=20)
        with django_db_blocker.unblock():
            alice.delete()
            bob.delete()


@pytest.fixture(scope="module")
def browser(world):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread, which Django takes for an
    # async context; the tests' ORM calls are still plain synchronous code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                yield chromium
            finally:
                chromium.close()
                # While Playwright's loop runs in this thread, Django keeps the thread's
                # connection in context-local storage, apart from the one pytest-django
                # closes; left open, it keeps the test database from being dropped.
                connections.close_all()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def sign_in(browser, world, who: str, width: int = 1280):
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(world["base"] + "/login/")
    page.fill("#id_username", world[who].username)
    page.fill("#id_password", f"{world[who].username}-pw-123!")
    page.click("main form button[type=submit]")
    page.wait_for_url(re.compile(r".*/t/[a-z0-9-]+/$"))
    return page


@pytest.fixture(scope="module")
def alice(browser, world):
    page = sign_in(browser, world, "alice")
    yield page
    page.context.close()


def shot(page, world, name: str) -> None:
    page.screenshot(path=str(world["shots"] / f"{name}.png"), full_page=True)


def committed(fn):
    """Run ``fn`` on a database connection of its own (autocommit), outside the test's
    transaction, so daphne sees what it writes."""
    errors = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    if errors:
        raise errors[0]


def snippet(page, name: str) -> str:
    """A client snippet's text, as the Copy button would copy it."""
    return page.locator(f"#snippet-{name}").text_content()


def run_pasted(program: str, text: str, timeout: float = 60) -> str:
    """Run a snippet as a person pasting it would (a shell line, or a Python script)."""
    args = [program, "-c", text]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (text, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def produce(kafka, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for value in values:
        producer.produce(topic, value=value, key=b"ext", partition=partition)
    assert producer.flush(20) == 0


def test_sign_in_and_create_a_topic(alice, world, kafka):
    page = alice
    assert page.locator("h1").inner_text() == "Acme"
    page.click("nav.sidenav >> text=Topics")
    page.click("text=Create topic")
    page.fill("#id_name", world["topic"])
    page.fill("#id_partitions", "2")
    page.fill("input[name=retention_amount]", "3")
    page.select_option("select[name=retention_unit]", "d")
    page.click("main form button[type=submit]")
    page.wait_for_url(re.compile(rf".*/topics/{world['topic']}/$"))
    assert page.locator("h1").inner_text() == world["topic"]
    assert page.locator("#partitions tbody tr").count() == 2
    assert "3 d" in page.locator("dl.stats").inner_text()
    # A name Kafka refuses: the API's message, on the field, nothing created.
    page.goto(f"{world['base']}/t/{kafka.tenant_a}/create-topic/")
    page.fill("#id_name", "bad name!")
    page.click("main form button[type=submit]")
    assert page.locator("#name-error").is_visible()
    # A config edit the service refuses: shown again as typed, the error beside it.
    page.goto(f"{world['base']}/t/{kafka.tenant_a}/topics/{world['topic']}/")
    page.fill("input[name='retention.ms']", "abc")
    page.fill("input[name='segment.ms']", "700000")
    page.click("#configs-heading ~ form button[type=submit]")
    assert page.locator("#config-retention-ms-error").inner_text()
    assert page.locator("input[name='retention.ms']").input_value() == "abc"
    assert page.locator("input[name='segment.ms']").input_value() == "700000"
    assert page.locator("input[name='retention.ms']").get_attribute("aria-invalid") == "true"
    page.goto(f"{world['base']}/t/{kafka.tenant_a}/topics/{world['topic']}/")
    assert "3 d" in page.locator("dl.stats").inner_text()  # nothing was saved
    assert page.locator("input[name='segment.ms']").input_value() != "700000"

    page.goto(f"{world['base']}/t/{kafka.tenant_a}/topics/")
    assert page.locator("#topics tbody tr").count() >= 1
    shot(page, world, "topics")


def test_a_topic_page_gives_working_client_settings(alice, world, kafka):
    from confluent_kafka.admin import AdminClient, NewTopic

    name = world["topic"] + "-hello"
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(20)
    page = alice
    page.goto(f"{world['base']}/t/{kafka.tenant_a}/topics/{name}/")
    assert "SASL_PLAINTEXT" in page.locator("#connect").inner_text()
    key = kafka.admin_a

    def filled(text: str) -> str:  # what the page asks the reader to do
        assert "<API key id>" in text and "<API secret>" in text
        return text.replace("<API key id>", key.key_id).replace("<API secret>", key.secret)

    assert run_pasted(sys.executable, filled(snippet(page, "python"))).strip() == "delivered"
    rest = filled(snippet(page, "rest")).split("# read partition 0 from the start")
    assert '"offset"' in run_pasted("bash", rest[0])
    assert "first record" in run_pasted("bash", rest[1])
    kcat = filled(snippet(page, "kcat")).splitlines()
    read_line = kcat[kcat.index("# read the topic from the start, then exit") + 1]
    consumed = run_pasted("bash", read_line)
    lines = consumed.splitlines()
    assert lines == ["first record", json.dumps({"note": "first record"}, separators=(",", ":"))]
    for other in ("java", "spark", "websocket"):
        assert name in snippet(page, other) or other == "java"


def test_client_versions_show_the_clients_that_connected(alice, world, kafka):
    """The snippets the previous test ran connected confluent-kafka (which names itself in
    ApiVersions v3+) and kcat: the brokers report them (every second in tests) and the
    Client versions page lists them with the request versions they used."""
    page = alice
    page.click("nav.sidenav >> text=Client versions")
    deadline = time.monotonic() + 30

    def row_text() -> str:
        row = page.locator("#clients tr", has_text="confluent-kafka-python")
        return row.first.inner_text() if row.count() else ""

    # Each broker reports on its own second: the admin client's requests (one identity
    # with the producer's) may be shown before the producer's are.
    while "Produce v" not in (text := row_text()):
        assert time.monotonic() < deadline, page.locator("main").inner_text()
        time.sleep(1)
        page.reload()
    assert "Produce v" in text and "Metadata v" in text
    assert kafka.admin_a.principal in text
    assert "current" in text  # librdkafka 2.16 sends versions Kafka 4 serves
    shot(page, world, "client-versions")


def test_live_tail_and_message_browser(alice, world, kafka):
    page = alice
    topic = world["topic"]
    page.goto(f"{world['base']}/t/{kafka.tenant_a}/topics/{topic}/messages/")
    page.click("#tail-start")
    page.wait_for_function("document.getElementById('tail-status').textContent.startsWith('Live')")
    produce(kafka, topic, [b'{"order": 1}', b'{"order": 2}'])
    page.wait_for_function("document.querySelectorAll('#tail-rows tr.record').length >= 2")
    assert '{"order": 2}' in page.locator("#tail-rows").inner_text()
    # Paused: new records wait (the server stops after its window) until resumed.
    page.click("#tail-pause")
    produce(kafka, topic, [b'{"order": 3}'])
    page.wait_for_function("document.getElementById('tail-status').textContent.includes('waiting')")
    assert page.locator("#tail-rows tr.record").count() == 2
    page.click("#tail-pause")
    page.wait_for_function("document.querySelectorAll('#tail-rows tr.record').length == 3")
    shot(page, world, "live-tail")

    # A test record from the form, then found in the browser (pretty JSON) and in the live
    # tail of another tab.
    tail = page.context.new_page()
    tail.goto(page.url)
    tail.click("#tail-start")
    tail.wait_for_function("document.getElementById('tail-status').textContent.startsWith('Live')")
    # Refused first (a header without a colon): the page comes back with every value as
    # typed and the reason beside the headers, and nothing is produced.
    page.fill("#id_produce_key", "from-console")
    page.fill("#id_value", '{"hello": "browser", "n": 42}')
    page.fill("#id_headers", "no-colon-here")
    page.select_option("#id_produce_partition", "1")
    page.click("form.produce button[type=submit]")
    assert "name: value" in page.locator("#headers-error").inner_text()
    assert page.locator("#id_produce_key").input_value() == "from-console"
    assert page.locator("#id_value").input_value() == '{"hello": "browser", "n": 42}'
    assert page.locator("#id_headers").input_value() == "no-colon-here"
    assert page.locator("#id_produce_partition").input_value() == "1"
    page.fill("#id_headers", "source: console")
    page.click("form.produce button[type=submit]")
    page.wait_for_url(re.compile(r".*from=offset.*"))
    assert "Produced to partition 1" in page.locator(".flash.success").inner_text()
    rows = page.locator("#message-rows tbody")
    # Compact rows: the value on one line; the whole record (pretty JSON, headers) on expand.
    assert '{"hello":"browser","n":42}' in rows.locator("tr.record").first.inner_text()
    assert page.locator("#message-rows tr.detail").first.is_hidden()
    rows.locator("button.expand").first.click()
    assert rows.locator("button.expand").first.get_attribute("aria-expanded") == "true"
    detail = page.locator("#message-rows tr.detail").first
    assert detail.is_visible() and '"hello": "browser"' in detail.inner_text()
    assert "source" in detail.inner_text()
    rows.locator("button.expand").first.click()
    assert detail.is_hidden()
    tail.wait_for_function(
        "document.getElementById('tail-rows').textContent.includes('\"hello\": \"browser\"')"
    )
    assert "from-console" in tail.locator("#tail-rows").inner_text()
    tail.close()
    # Filter by key over every partition, newest first.
    page.fill("#id_key", "ext")
    page.select_option("#id_partition", "all")
    page.select_option("#id_from", "newest")
    page.click("#browse-form button[type=submit]")
    page.wait_for_function("document.getElementById('scan-summary') !== null")
    page.wait_for_function("document.querySelectorAll('#message-rows tr.record').length == 3")
    assert "Scanned" in page.locator("#scan-summary").inner_text()
    shot(page, world, "messages")


def test_export_link_downloads_the_rows_shown(alice, world, kafka):
    page = alice  # still on the browser, filtered by key "ext": three rows
    with page.expect_download() as download:
        page.click("#export-jsonl")
    lines = Path(download.value.path()).read_text().splitlines()
    assert download.value.suggested_filename == f"{world['topic']}-messages.jsonl"
    assert [json.loads(line)["value"] for line in lines] == [
        '{"order":3}',
        '{"order":2}',
        '{"order":1}',
    ]
    with page.expect_download() as download:
        page.click("#export-csv")
    assert Path(download.value.path()).read_text().startswith("partition,offset,timestamp,")


def test_live_tail_filter_and_partition_choice(alice, world, kafka):
    topic = world["topic"].replace("orders-", "tail-")  # apart: the group test counts lag
    confluent_create(kafka, kafka.admin_a, topic, partitions=2)
    page = alice.context.new_page()
    page.goto(f"{world['base']}/t/{kafka.tenant_a}/topics/{topic}/messages/")
    page.select_option("#id_tail_partition", "1")
    page.fill("#id_tail_text", "pick")
    page.click("#tail-start")
    page.wait_for_function("document.getElementById('tail-status').textContent.startsWith('Live')")
    assert page.locator("#id_tail_text").is_disabled()  # fixed while the tail runs
    produce(kafka, topic, [b"pick-0"], partition=0)
    produce(kafka, topic, [b"skip-1", b"pick-1"], partition=1)
    page.wait_for_function("document.querySelectorAll('#tail-rows tr.record').length >= 1")
    produce(kafka, topic, [b"pick-again"], partition=1)
    page.wait_for_function("document.querySelectorAll('#tail-rows tr.record').length >= 2")
    text = page.locator("#tail-rows").inner_text()
    assert "pick-1" in text and "pick-again" in text
    assert "pick-0" not in text and "skip-1" not in text
    # Expand a tail row: the record in full.
    page.locator("#tail-rows button.expand").first.click()
    detail = page.locator("#tail-rows tr.detail").first
    assert detail.is_visible() and "pick-again" in detail.inner_text()
    shot(page, world, "live-tail-filtered")
    page.click("#tail-start")
    page.close()


def test_service_account_key_acl_and_checker(alice, world, kafka):
    page = alice
    base = f"{world['base']}/t/{kafka.tenant_a}"
    page.goto(base + "/create-service-account/")
    page.fill("#id_name", world["account"])
    page.click("main form button[type=submit]")
    page.goto(base + "/create-api-key/")
    page.select_option("#id_service_account", world["account"])
    page.fill("#id_description", "the nightly pipeline")
    page.click("main form button[type=submit]")
    secret = page.locator("#api-key-secret").input_value()
    assert len(secret) >= 20
    assert page.locator("#copy-secret").is_visible()
    shot(page, world, "api-key-created")
    # The client settings beside the secret work as pasted: kcat and confluent-kafka sign
    # in with the new key (it may describe the topics its ACL below names, once made).
    kcat_lines = snippet(page, "kcat").splitlines()
    listing = run_pasted("bash", kcat_lines[1])
    assert f"broker 1 at 127.0.0.1:{kafka.port}" in listing
    python_snippet = snippet(page, "python")
    assert secret in python_snippet and "SCRAM-SHA-256" in snippet(page, "java")
    page.goto(base + "/api-keys/")
    assert secret not in page.content()  # shown once
    assert world["account"] in page.locator("main").inner_text()

    page.goto(base + "/create-acl/")
    page.select_option("#id_principal", f"User:{world['account']}")
    page.select_option("#id_permission", "allow")
    page.select_option("#id_operation", "read")
    page.select_option("#id_resource_type", "topic")
    page.select_option("#id_pattern_type", "prefixed")
    page.fill("#id_resource_name", "orders-")
    page.click("main form button[type=submit]")
    page.goto(base + "/acls/")
    assert "orders-" in page.locator("main").inner_text()
    shot(page, world, "acls")

    # Now the key may describe the topic, and the Python snippet (pasted as is) lists it.
    assert world["topic"] in run_pasted(sys.executable, python_snippet)

    page.goto(base + "/acl-check/")
    page.select_option("#id_principal", f"User:{world['account']}")
    page.select_option("#id_operation", "read")
    page.select_option("#id_resource_type", "topic")
    page.fill("#id_resource_name", world["topic"])
    page.click("main form button[type=submit]")
    answer = page.locator("#acl-answer")
    answer.locator(".verdict").wait_for()
    assert "Allowed" in answer.inner_text() and "orders-" in answer.inner_text()
    shot(page, world, "acl-check")
    page.select_option("#id_operation", "write")
    page.click("main form button[type=submit]")
    page.wait_for_function("document.querySelector('#acl-answer').textContent.includes('Denied')")
    assert "denied by default" in answer.inner_text()


def test_a_service_account_with_an_acl_preset(alice, world, kafka):
    page = alice
    base = f"{world['base']}/t/{kafka.tenant_a}"
    name = world["account"] + "-reader"
    page.goto(base + "/create-service-account/")
    # The hint names the principal literally (a template literal once swallowed "<name>").
    assert "Its principal is User:<name>." in page.locator("#name-hint").inner_text()
    page.fill("#id_name", name)
    page.fill("#id_description", "reads orders")
    page.select_option("#id_preset", "consumer")
    page.fill("#id_topic", "orders-")
    page.select_option("#id_topic_pattern", "prefixed")
    page.click("main form button[type=submit]")
    # Refused (a consumer needs a group): everything typed is still there, the error beside
    # the field it is about, and nothing was created.
    assert "needs a group" in page.locator("#group-error").inner_text()
    assert page.locator("#id_name").input_value() == name
    assert page.locator("#id_description").input_value() == "reads orders"
    assert page.locator("#id_preset").input_value() == "consumer"
    assert page.locator("#id_topic").input_value() == "orders-"
    assert page.locator("#id_topic_pattern").input_value() == "prefixed"
    page.fill("#id_group", "billing-")
    page.click("main form button[type=submit]")
    page.wait_for_url(re.compile(r".*/acls/\?principal="))
    assert "with 4 ACLs (consumer for topics starting 'orders-'" in page.content()
    rows = page.locator("main table tbody tr")
    assert rows.count() == 4
    assert all(f"User:{name}" in rows.nth(i).inner_text() for i in range(4))
    # Ordinary ACLs: the checker explains them like any other.
    page.goto(base + "/acl-check/")
    page.select_option("#id_principal", f"User:{name}")
    page.select_option("#id_operation", "read")
    page.select_option("#id_resource_type", "group")
    page.fill("#id_resource_name", world["group"])
    page.click("main form button[type=submit]")
    answer = page.locator("#acl-answer")
    answer.locator(".verdict").wait_for()
    assert "Allowed" in answer.inner_text() and "billing-" in answer.inner_text()


def test_consumer_group_lag_moves_and_offsets_reset(alice, world, kafka):
    from control_plane.groups import lag as group_lag
    from control_plane.groups import topic_samples

    page = alice
    topic, group = world["topic"], world["group"]
    c = consumer(kafka, group)
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    c.close()
    committed(group_lag.sample_lag)
    committed(topic_samples.sample_topics)  # what the beat schedule does every minute
    url = f"{world['base']}/t/{kafka.tenant_a}/groups/{group}/"
    page.goto(url)
    assert page.locator("#group-offsets td.lag").first.inner_text() == "2"  # 3 - 1
    time.sleep(1.1)
    produce(kafka, topic, [b'{"order": %d}' % i for i in range(4, 14)])
    committed(group_lag.sample_lag)
    committed(topic_samples.sample_topics)
    page.goto(url)
    assert page.locator("#group-offsets td.lag").first.inner_text() == "12"  # the lag moved
    page.locator(".chart canvas").first.wait_for()  # uPlot drew the lag history
    shot(page, world, "consumer-group")
    page.goto(f"{world['base']}/t/{kafka.tenant_a}/groups/")
    assert group in page.locator("#groups").inner_text()

    # The chart's times are 24-hour UTC, like the rest of the console.
    page.goto(url)
    box = page.locator(".chart canvas").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
    legend_time = page.locator(".u-legend .u-series").first.locator(".u-value").inner_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", legend_time), legend_time
    assert page.locator(".u-legend .u-series").first.locator(".u-label").inner_text() == "UTC"

    # While the group has a member, a reset is refused, and the page says why.
    member = consumer(kafka, group)
    member.subscribe([topic])
    joined = False
    for _ in range(40):
        member.poll(0.5)
        if member.assignment():
            joined = True
            break
    assert joined
    try:
        page.goto(url)
        page.select_option("#id_to", "earliest")
        page.click("text=Preview reset")
        refused = page.locator("#reset-refused")
        assert "while it has members" in refused.inner_text()
        assert page.locator("#id_to").input_value() == "earliest"  # the choice is kept
    finally:
        member.close()

    page.goto(url)
    page.select_option("#id_to", "latest")
    for _ in range(30):  # the member's leaving reaches the coordinator
        page.click("text=Preview reset")
        if page.locator("#reset-refused").count() == 0:
            break
        time.sleep(0.5)
        page.goto(url)
        page.select_option("#id_to", "latest")
    assert "Nothing has changed yet" in page.locator("main").inner_text()
    assert page.locator("#reset-plan tbody tr").count() == 1
    shot(page, world, "reset-preview")
    page.click("text=Confirm reset")
    page.wait_for_url(url)
    assert page.locator("#group-offsets td.lag").first.inner_text() == "0"

    page.goto(f"{world['base']}/t/{kafka.tenant_a}/")
    assert group in page.locator("#worst-groups").inner_text()
    page.locator(".chart canvas").first.wait_for()  # the throughput chart
    assert page.locator("#storage-used").inner_text() != "0 B"
    shot(page, world, "overview")


def test_a_member_of_tenant_b_sees_none_of_it(browser, world, kafka):
    page = sign_in(browser, world, "bob", width=390)  # and on a phone-sized screen
    try:
        assert "acme" not in page.locator("header").inner_text().lower()
        page.goto(f"{world['base']}/t/{kafka.tenant_b}/topics/")
        assert world["topic"] not in page.content()
        for path in ("", "topics/" + world["topic"] + "/", "groups/" + world["group"] + "/"):
            response = page.goto(f"{world['base']}/t/{kafka.tenant_a}/{path}")
            assert response.status == 404
            # The console's own page: its header, its sign-out, a way back.
            assert page.locator("h1").inner_text() == "Not found"
            assert page.locator("header.topbar").is_visible()
            assert page.locator("text=Back to the console").is_visible()
        # A page of the tenant bob may see, but not as an operator: 403, in the layout too.
        response = page.goto(f"{world['base']}/cluster/")
        assert response.status == 403
        assert page.locator("h1").inner_text() == "Not allowed"
        icon = page.locator("link[rel=icon]").get_attribute("href")
        assert page.request.get(world["base"] + icon).status == 200
        assert page.request.get(world["base"] + "/favicon.ico").status == 200
        page.goto(f"{world['base']}/t/{kafka.tenant_b}/api-keys/")
        assert world["account"] not in page.content()
        page.goto(f"{world['base']}/t/{kafka.tenant_b}/")
        shot(page, world, "phone-overview")
    finally:
        page.context.close()
