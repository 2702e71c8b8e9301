"""The accounts' mail through a real SMTP server process: what the server received is
what a person would get, and a server that is down loses nothing and leaves nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from control_plane.accounts import services as accounts
from tests.smtp import SmtpServer, body, link_in

pytestmark = pytest.mark.django_db
PASSWORD = "a-Long-and-odd-pw-7"


@pytest.fixture
def smtp(tmp_path, settings):
    server = SmtpServer(tmp_path).start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.port, 5
    settings.DEFAULT_FROM_EMAIL = "Millrace <no-reply@millrace.test>"
    try:
        yield server
    finally:
        server.stop()


def test_the_verification_mail_goes_through_smtp_and_its_link_works(smtp):
    client = Client()
    assert (
        client.post("/signup/", {"email": "uma@example.com", "password": PASSWORD}).status_code
        == 200
    )
    message = smtp.wait_for("uma@example.com", "Confirm your e-mail")
    assert message["From"] == "Millrace <no-reply@millrace.test>"
    assert "signed up for Millrace with uma@example.com" in body(message)
    user = get_user_model().objects.get(username="uma@example.com")
    assert not accounts.is_verified(user)
    assert client.get(link_in(message, "http://testserver")).status_code == 302
    assert accounts.is_verified(user)


def test_a_mail_server_that_is_down_leaves_no_account_and_the_next_try_works(smtp):
    smtp.stop()
    client = Client()
    refused = client.post("/signup/", {"email": "vic@example.com", "password": PASSWORD})
    assert refused.status_code == 400 and b"could not be sent" in refused.content
    assert not get_user_model().objects.filter(username="vic@example.com").exists()
    smtp.start()
    assert (
        client.post("/signup/", {"email": "vic@example.com", "password": PASSWORD}).status_code
        == 200
    )
    smtp.wait_for("vic@example.com", "Confirm your e-mail")
    assert get_user_model().objects.filter(username="vic@example.com").exists()
