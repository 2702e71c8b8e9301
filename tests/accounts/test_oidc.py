"""Single sign-on against a real OpenID Connect provider process (tests/oidc.py): the
authorization code flow with PKCE, the ID token checked, people matched by the address
the provider vouches for, and what is refused."""

from __future__ import annotations

import time
import urllib.parse

import pyotp
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from control_plane.accounts import services as accounts
from tests.conftest import make_user
from tests.oidc import OidcProvider

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider(tmp_path, settings):
    found = OidcProvider(tmp_path).start()
    settings.MILLRACE_OIDC_ISSUER = found.issuer
    settings.MILLRACE_OIDC_CLIENT_ID = "millrace-console"
    settings.MILLRACE_OIDC_CLIENT_SECRET = "console-secret"
    settings.MILLRACE_OIDC_NAME = "Acme SSO"
    try:
        yield found
    finally:
        found.stop()


def back_from_provider(provider, client: Client, sub: str, next_url: str = "") -> tuple:
    """Sign in through the provider as ``sub``; (the callback's response, its URL)."""
    start = client.get("/login/sso/" + (f"?next={next_url}" if next_url else ""))
    assert start.status_code == 302, start.content
    location = start["Location"]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"][0]
    assert query["redirect_uri"] == ["http://testserver/login/sso/callback/"]
    callback = provider.authorize(location, sub)
    assert callback.startswith("http://testserver/login/sso/callback/?"), callback
    path = callback.removeprefix("http://testserver")
    return client.get(path), path


def signed_in_as(client: Client) -> str | None:
    response = client.get("/api/v1/auth/me/")
    return response.json()["username"] if response.status_code == 200 else None


def test_the_login_page_offers_the_provider_only_when_configured(settings, provider):
    assert b"Sign in with Acme SSO" in Client().get("/login/").content
    settings.MILLRACE_OIDC_ISSUER = ""
    assert b"Sign in with" not in Client().get("/login/").content
    assert Client().get("/login/sso/").status_code == 404


def test_an_existing_account_signs_in_by_its_confirmed_address(provider):
    make_user("yara")  # yara@example.com, made by an operator
    provider.set_user("u-1", email="YARA@example.com", email_verified=True)
    client = Client()
    response, _ = back_from_provider(provider, client, "u-1", "/account/")
    assert response.status_code == 302 and response["Location"] == "/account/"
    assert signed_in_as(client) == "yara"


def test_a_new_address_gets_an_account_confirmed_by_the_provider(provider, settings):
    provider.set_user("u-2", email="zed@example.com", email_verified=True)
    client = Client()
    response, _ = back_from_provider(provider, client, "u-2")
    assert response.status_code == 302 and signed_in_as(client) == "zed@example.com"
    user = get_user_model().objects.get(username="zed@example.com")
    assert accounts.is_verified(user) and not user.has_usable_password()
    # With sign-up off, an unknown address is refused.
    settings.MILLRACE_SIGNUP_ENABLED = False
    provider.set_user("u-3", email="new@example.com", email_verified=True)
    other = Client()
    refused, _ = back_from_provider(provider, other, "u-3")
    assert refused["Location"] == "/login/" and signed_in_as(other) is None
    assert b"no account has new@example.com" in other.get("/login/").content


def test_an_address_the_provider_does_not_vouch_for_is_refused(provider):
    make_user("abe")
    provider.set_user("u-4", email="abe@example.com", email_verified=False)
    client = Client()
    refused, _ = back_from_provider(provider, client, "u-4")
    assert refused["Location"] == "/login/" and signed_in_as(client) is None
    assert b"did not vouch for an e-mail address" in client.get("/login/").content
    # An unconfirmed sign-up of the address is not taken over either.
    Client().post("/signup/", {"email": "cat@example.com", "password": "a-Long-and-odd-pw-7"})
    provider.set_user("u-5", email="cat@example.com", email_verified=True)
    refused, _ = back_from_provider(provider, client, "u-5")
    assert refused["Location"] == "/login/" and signed_in_as(client) is None


def test_a_callback_works_once_and_only_for_its_own_sign_in(provider):
    make_user("bea")
    provider.set_user("u-6", email="bea@example.com", email_verified=True)
    client = Client()
    _, path = back_from_provider(provider, client, "u-6")
    assert signed_in_as(client) == "bea"
    replay = Client()
    replay.get("/login/sso/")  # a sign-in of its own, with another state
    answer = replay.get(path)  # someone else's code and state
    assert answer["Location"] == "/login/" and signed_in_as(replay) is None
    assert b"does not belong to this sign-in" in replay.get("/login/").content
    tampered = Client()
    start = tampered.get("/login/sso/")
    callback = provider.authorize(start["Location"], "u-6")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(callback).query)
    bad = tampered.get("/login/sso/callback/", {"code": query["code"][0], "state": "x"})
    assert bad["Location"] == "/login/" and signed_in_as(tampered) is None


def test_two_factor_still_asks_for_a_code(provider):
    from control_plane.accounts.models import TwoFactor

    user = make_user("cal")
    secret = pyotp.random_base32()
    TwoFactor.objects.create(user=user, secret=secret)
    provider.set_user("u-7", email="cal@example.com", email_verified=True)
    client = Client()
    response, _ = back_from_provider(provider, client, "u-7")
    assert response["Location"] == "/login/code/" and signed_in_as(client) is None
    code = pyotp.TOTP(secret).at(time.time())
    assert client.post("/login/code/", {"code": code}).status_code == 302
    assert signed_in_as(client) == "cal"


def _forge(key, **claims):
    import jwt

    return jwt.encode(claims, key, algorithm="RS256")


@pytest.mark.parametrize(
    ("case", "accepted"),
    [
        ("good", True),  # the harness itself: a token it makes, checked with its key
        ("not the provider's signature", False),
        ("another nonce", False),
        ("another audience", False),
        ("another issuer", False),
        ("expired", False),
    ],
)
def test_id_tokens_are_checked(provider, monkeypatch, case, accepted):
    from cryptography.hazmat.primitives.asymmetric import rsa

    from control_plane.accounts import oidc

    make_user("dot")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client = Client()
    start = client.get("/login/sso/")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(start["Location"]).query)
    now = int(time.time())
    claims = {
        "iss": provider.issuer,
        "aud": "millrace-console",
        "sub": "u-9",
        "iat": now,
        "exp": now + 300,
        "nonce": query["nonce"][0],
        "email": "dot@example.com",
        "email_verified": True,
    }
    claims.update(
        {
            "another nonce": {"nonce": "x"},
            "another audience": {"aud": "someone-else"},
            "another issuer": {"iss": "http://127.0.0.1:1"},
            "expired": {"iat": now - 900, "exp": now - 600},
        }.get(case, {})
    )
    real = oidc._get_json

    def token_endpoint(url, data=None, auth=None):
        if data is not None:  # the code exchange: answered with the forged token
            return {"id_token": _forge(key, **claims), "token_type": "Bearer"}
        return real(url, data, auth)

    monkeypatch.setattr(oidc, "_get_json", token_endpoint)
    if case != "not the provider's signature":
        monkeypatch.setattr(oidc, "_signing_key", lambda uri, token: key.public_key())
    client.get("/login/sso/callback/", {"code": "c", "state": query["state"][0]})
    assert (signed_in_as(client) == "dot") is accepted
