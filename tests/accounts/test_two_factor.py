"""Two-factor sign-in: enrolment with an authenticator app's code (computed here with
pyotp, as the app would), sign-in in two steps in the console and over the REST API,
single-use codes and recovery codes, and turning it off."""

from __future__ import annotations

import re
import time

import pyotp
import pytest
from django.test import Client

from control_plane.accounts import two_factor
from control_plane.accounts.models import TwoFactor
from control_plane.audit.models import AuditEvent
from tests.conftest import make_user

pytestmark = pytest.mark.django_db
STEP = two_factor.STEP_SECONDS


def password(user) -> str:
    return f"{user.username}-pw-123!"


def code_at(secret: str, steps_from_now: int = 0) -> str:
    return pyotp.TOTP(secret).at(time.time() + steps_from_now * STEP)


def enrol(user) -> tuple[str, list[str]]:
    """Turn two-factor on through the console; (secret, recovery codes)."""
    client = Client()
    client.force_login(user)
    page = client.get("/account/two-factor/")
    assert page.status_code == 200 and b"<svg" in page.content
    secret = re.search(rb'id="totp-secret" value="([A-Z2-7]+)"', page.content).group(1).decode()
    wrong = client.post("/account/two-factor/", {"code": "000000"})
    assert wrong.status_code == 400 and not two_factor.is_enabled(user)
    done = client.post("/account/two-factor/", {"code": code_at(secret)})
    assert done.status_code == 200 and done["Cache-Control"] == "no-store"
    codes = re.findall(rb"<code>([0-9a-f]{8}-[0-9a-f]{8})</code>", done.content)
    assert len(codes) == two_factor.RECOVERY_CODES
    return secret, [c.decode() for c in codes]


def sign_in(user, code: str | None) -> Client:
    client = Client()
    first = client.post("/login/", {"username": user.username, "password": password(user)})
    assert first.status_code == 302 and first["Location"] == "/login/code/"
    assert client.get("/account/").status_code == 302  # not signed in yet
    if code is not None:
        client.post("/login/code/", {"code": code})
    return client


def signed_in(client: Client) -> bool:
    return client.get("/account/").status_code == 200


def test_enrolment_then_sign_in_needs_the_apps_code_once(settings):
    user = make_user("tess")
    secret, _ = enrol(user)
    assert TwoFactor.objects.get(user=user).secret == secret
    assert AuditEvent.objects.filter(action="account.two_factor.enable", actor="tess")
    assert not signed_in(sign_in(user, "123456" if code_at(secret) != "123456" else "654321"))
    # The code of the next step (a phone's clock a little ahead) works...
    ahead = code_at(secret, 1)
    assert signed_in(sign_in(user, ahead))
    # ...and once only: the same code, or an older one, is refused afterwards.
    assert not signed_in(sign_in(user, ahead))
    assert not signed_in(sign_in(user, code_at(secret)))


def test_recovery_codes_work_once_each_and_can_be_renewed():
    user = make_user("uli")
    secret, codes = enrol(user)
    assert signed_in(sign_in(user, codes[0].upper().replace("-", " ")))  # as typed
    assert not signed_in(sign_in(user, codes[0]))
    assert two_factor.recovery_codes_left(user) == 9
    client = sign_in(user, codes[1])
    renewed = client.post("/account/two-factor/recovery-codes/", {"code": code_at(secret, 1)})
    fresh = re.findall(rb"<code>([0-9a-f-]{17})</code>", renewed.content)
    assert len(fresh) == 10
    assert not signed_in(sign_in(user, codes[2]))  # the old ones are gone
    assert signed_in(sign_in(user, fresh[0].decode()))


def test_wrong_codes_start_again_and_count_toward_the_lockout(settings):
    settings.MILLRACE_LOGIN_LOCKOUT_FAILURES = 100
    user = make_user("vera")
    secret, _ = enrol(user)
    client = sign_in(user, None)
    for _ in range(4):
        assert client.post("/login/code/", {"code": "00000x"}).status_code == 400
    back = client.post("/login/code/", {"code": "00000x"})
    assert back.status_code == 302 and back["Location"] == "/login/"
    assert client.post("/login/code/", {"code": code_at(secret)})["Location"] == "/login/"
    assert not signed_in(client)
    # Five wrong codes counted against the account: with a lockout at five, the
    # password alone no longer gets to the code step.
    settings.MILLRACE_LOGIN_LOCKOUT_FAILURES = 5
    locked = Client().post("/login/", {"username": "vera", "password": password(user)})
    assert locked.status_code == 429


def test_turning_it_off_needs_the_password_and_a_code():
    user = make_user("walt")
    secret, codes = enrol(user)
    client = sign_in(user, codes[0])
    client.post("/account/two-factor/off/", {"password": "wrong", "code": code_at(secret, 1)})
    assert two_factor.is_enabled(user)
    client.post("/account/two-factor/off/", {"password": password(user), "code": "000000"})
    assert two_factor.is_enabled(user)
    client.post("/account/two-factor/off/", {"password": password(user), "code": codes[1]})
    assert not two_factor.is_enabled(user)
    plain = Client()
    response = plain.post("/login/", {"username": "walt", "password": password(user)})
    assert response.status_code == 302 and response["Location"] == "/"


def test_the_rest_login_asks_for_the_code():
    user = make_user("xena")
    secret, codes = enrol(user)
    url = "/api/v1/auth/login/"
    body = {"username": "xena", "password": password(user)}
    needed = Client().post(url, body, content_type="application/json")
    assert needed.status_code == 401 and needed.json()["error"]["code"] == "otp_required"
    wrong = Client().post(url, {**body, "otp": "000000"}, content_type="application/json")
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "authentication_failed"
    no_password = Client().post(
        url, {**body, "password": "nope", "otp": code_at(secret)}, content_type="application/json"
    )
    assert no_password.status_code == 401  # a code alone is nothing
    client = Client()
    ok = client.post(url, {**body, "otp": codes[0]}, content_type="application/json")
    assert ok.status_code == 200 and client.get("/api/v1/auth/me/").status_code == 200
