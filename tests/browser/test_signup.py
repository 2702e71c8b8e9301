"""From sign-up to a produced record with no operator, in real headless Chromium against
daphne, a real broker and a real SMTP server process (tests/smtp.py):

sign up -> the mailed link confirms the address -> sign in -> create a tenant -> invite
a second person by e-mail -> they sign up, confirm and accept -> Get started makes a
topic and a key -> kcat, pasted from the page, produces a record and reads it back.

The steps (page loads and form submissions a person makes) and the time from the first
page to the record read back are printed as ``signup_to_first_record`` (the figure in
docs/performance.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connections

from bench.common import start_web, stop_process
from control_plane.tenancy.models import Membership, Tenant
from tests.broker.conftest import free_port
from tests.browser.test_console import ARGS, CHROMIUM, TIMEOUT_MS, snippet
from tests.smtp import SmtpServer, link_in

pytestmark = [
    pytest.mark.skipif(
        not __import__("pathlib").Path(CHROMIUM).exists(), reason="Debian's chromium is missing"
    ),
    pytest.mark.django_db(transaction=True),
]
PASSWORD = "a-Long-and-odd-pw-7"


@pytest.fixture(scope="module")
def site(kafka, tmp_path_factory):
    """daphne sending mail to a real SMTP server process."""
    directory = tmp_path_factory.mktemp("signup")
    smtp = SmtpServer(directory).start()
    port = free_port()
    env = {
        **kafka.env,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp.port),
        "DEFAULT_FROM_EMAIL": "Millrace <no-reply@millrace.test>",
    }
    web = start_web(env, port, directory / "daphne.log")
    try:
        yield {"base": f"http://127.0.0.1:{port}", "smtp": smtp}
    finally:
        stop_process(web, grace=20)
        smtp.stop()


@pytest.fixture(scope="module")
def chromium():
    import os

    from playwright.sync_api import sync_playwright

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                yield browser
            finally:
                browser.close()
                connections.close_all()  # see tests/browser/test_console.py's browser
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


class Person:
    """One browser context; counts what a person does (page loads and submissions)."""

    def __init__(self, chromium, site, email: str) -> None:
        self.context = chromium.new_context(viewport={"width": 1280, "height": 900})
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.site, self.email, self.steps = site, email, 0

    def go(self, path: str) -> None:
        self.steps += 1
        self.page.goto(path if path.startswith("http") else self.site["base"] + path)

    def submit(self, fields: dict[str, str], button: str = "main form button[type=submit]"):
        for selector, value in fields.items():
            self.page.fill(selector, value)
        self.steps += 1
        self.page.click(button)

    def sign_up_and_confirm(self) -> None:
        self.go("/signup/")
        self.submit({"#id_email": self.email, "#id_password": PASSWORD})
        assert "Check your mail" in self.page.locator("main").inner_text()
        mail = self.site["smtp"].wait_for(self.email, "Confirm your e-mail")
        self.go(link_in(mail, self.site["base"]))  # lands on sign-in, address filled
        assert f"{self.email} is confirmed" in self.page.locator("main").inner_text()
        assert self.page.input_value("#id_username") == self.email
        self.submit({"#id_password": PASSWORD})


def test_a_person_signs_up_and_produces_a_record_without_an_operator(chromium, site, kafka):
    started = time.monotonic()
    suffix = uuid.uuid4().hex[:6]
    owner = Person(chromium, site, f"owner-{suffix}@example.com")
    owner.sign_up_and_confirm()
    assert "You are not in a tenant yet" in owner.page.locator("main").inner_text()
    owner.steps += 1
    owner.page.click("text=Create a tenant")
    slug = f"team-{suffix}"
    owner.submit({"#id_name": f"Team {suffix}", "#id_slug": slug})
    owner.page.wait_for_url(re.compile(rf".*/t/{slug}/get-started/$"))

    # Get started: a topic and a key, and kcat pasted from the page.
    topic = f"orders-{suffix}"
    owner.submit({"#id_topic": topic})
    owner.page.wait_for_load_state()
    assert "API key created" in owner.page.locator("main").inner_text(), owner.page.content()
    secret = owner.page.locator("#api-key-secret").input_value()
    assert len(secret) >= 20
    kcat = snippet(owner.page, "kcat").splitlines()
    produce_line = kcat[kcat.index("# produce lines typed on stdin (Ctrl-D ends)") + 1]
    read_line = kcat[kcat.index("# read the topic from the start, then exit") + 1]
    produced = subprocess.run(
        ["bash", "-c", produce_line],
        input="hello from a new tenant\n",
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    read = subprocess.run(["bash", "-c", read_line], capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == ["hello from a new tenant"]
    seconds = time.monotonic() - started
    steps = owner.steps + 2  # and the two kcat commands
    print("\nsignup_to_first_record " + json.dumps({"seconds": round(seconds, 1), "steps": steps}))

    # Invite a second person, who signs up with the invited address and accepts.
    invitee_email = f"dev-{suffix}@example.com"
    owner.go(f"/t/{slug}/members/")
    owner.page.fill("#id_email", invitee_email)
    owner.page.select_option("#id_invite_role", "developer")
    owner.page.click("text=Send invitation")
    assert f"Invitation sent to {invitee_email}" in owner.page.locator("main").inner_text()
    invitation = site["smtp"].wait_for(invitee_email, "You are invited")
    invitee = Person(chromium, site, invitee_email)
    invitee.go(link_in(invitation, site["base"]))
    assert "Sign up with" in invitee.page.locator("main").inner_text()
    invitee.sign_up_and_confirm()
    invitee.page.click("text=Accept")
    invitee.page.wait_for_url(re.compile(rf".*/t/{slug}/$"))
    assert Membership.objects.get(tenant__slug=slug, user__username=invitee_email).role == (
        "developer"
    )
    invitee.go(link_in(invitation, site["base"]))
    assert "used already" in invitee.page.locator("main").inner_text()
    # The new member reads what the owner's key produced (the topics page lists it).
    invitee.go(f"/t/{slug}/topics/")
    assert topic in invitee.page.locator("main").inner_text()
    # The tenant is the owner's alone: nothing else in it, no operator involved.
    tenant = Tenant.objects.get(slug=slug)
    assert list(tenant.memberships.values_list("user__username", "role").order_by("role")) == [
        (invitee_email, "developer"),
        (owner.email, "owner"),
    ]
    assert not get_user_model().objects.get(username=owner.email).is_staff
    owner.context.close()
    invitee.context.close()
