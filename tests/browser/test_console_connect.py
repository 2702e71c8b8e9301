"""The console's Connect pages in real headless Chromium: a developer creates a
FileStreamSink connector from the plugin's form and lands on its page, where the task the
distributed worker (a ``manage.py connect`` process) runs shows as RUNNING. Served by a
real daphne process next to a real broker (tests/browser/test_console.py describes how);
screenshots of the pages go to ``CONSOLE_SCREENSHOTS`` if it is set."""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pytest

from bench.common import start_web, stop_process
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role, Tenant
from tests.broker.conftest import free_port
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_rest import _worker
from tests.broker.test_connect_standalone import _create
from tests.browser import test_console as console
from tests.conftest import SYSTEM, make_user

pytestmark = [
    pytest.mark.skipif(
        not Path(console.CHROMIUM).exists(),
        reason="Debian's chromium is not installed (.ci/run installs it)",
    ),
    pytest.mark.django_db,
    pytest.mark.slow,
]
browser = console.browser  # the module's Chromium (needs ``world``, below)


@pytest.fixture(scope="module")
def world(kafka, django_db_blocker, tmp_path_factory):
    """daphne on loopback, a developer of tenant A (committed) and a Connect worker."""
    suffix = uuid.uuid4().hex[:6]
    with django_db_blocker.unblock():
        carol = make_user(f"carol-{suffix}")
        tenant = Tenant.objects.get(slug=kafka.tenant_a)
        tenancy_services.add_member(SYSTEM, tenant, user=carol, role=Role.DEVELOPER)
    port = free_port()
    web = start_web(kafka.env, port, tmp_path_factory.mktemp("web") / "daphne.log")
    worker = _worker(kafka, tmp_path_factory.mktemp("worker"))
    shots = os.environ.get("CONSOLE_SCREENSHOTS")
    try:
        yield {
            "base": f"http://127.0.0.1:{port}",
            "carol": carol,
            "shots": Path(shots) if shots else None,
            "connector": f"copy-{suffix}",
        }
    finally:
        stop_process(worker, grace=30)
        stop_process(web, grace=20)
        with django_db_blocker.unblock():
            carol.delete()


def shot(page, world, name: str) -> None:
    if world["shots"]:
        page.screenshot(path=str(world["shots"] / f"{name}.png"), full_page=True)


def test_create_a_file_sink_from_the_form(browser, world, kafka):
    topic, name = topic_name("browser-connect"), world["connector"]
    _create(kafka, topic)
    page = console.sign_in(browser, world, "carol")
    try:
        page.click("nav.sidenav >> text=Connect")
        page.click("text=Create connector")
        page.click("#plugins >> text=FileStreamSink")
        shot(page, world, "connect-create")
        page.fill("#id_name", name)
        page.fill("#id_config-file", f"{name}.txt")
        page.fill("#id_config-topics", topic)
        # A developer proves the key the connector runs as with its secret (admins need not).
        key = kafka.admin_a
        page.select_option("#id_config-kafka-api-key", key.key_id)
        page.click("#connector-form button[type=submit]")
        assert (
            "only an admin or owner" in page.locator("#config-kafka-api-secret-error").inner_text()
        )
        page.fill("#id_name", name)
        page.fill("#id_config-file", f"{name}.txt")
        page.fill("#id_config-topics", topic)
        page.select_option("#id_config-kafka-api-key", key.key_id)
        page.fill("#id_config-kafka-api-secret", key.secret)
        page.click("#connector-form button[type=submit]")
        page.wait_for_url(re.compile(rf".*/connect/{name}/$"))
        assert page.locator("h1").inner_text() == name
        assert f"Connector {name} created." in page.locator(".flash").inner_text()
        deadline = time.monotonic() + 60
        while "RUNNING" not in page.locator("#tasks").inner_text():
            assert time.monotonic() < deadline, page.locator("#tasks").inner_text()
            time.sleep(0.5)
            page.reload()
        assert page.locator("#connector-state").inner_text() == "RUNNING"
        assert page.locator("#config").inner_text().count(f"{name}.txt") == 1
        shot(page, world, "connector")
        page.click("nav.sidenav >> text=Connect")
        assert name in page.locator("#connectors").inner_text()
        shot(page, world, "connect")
    finally:
        page.context.close()
