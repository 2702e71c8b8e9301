"""Single sign-on with OpenID Connect (the authorization code flow with PKCE).

An operator configures one issuer (``MILLRACE_OIDC_ISSUER``, ``MILLRACE_OIDC_CLIENT_ID``,
``MILLRACE_OIDC_CLIENT_SECRET``); the sign-in page then offers "Sign in with …". The
provider's endpoints and keys come from its discovery document. The ID token's
signature, issuer, audience, expiry and nonce are checked, and the person is matched by
the token's ``email`` only when ``email_verified`` is true: to the one account whose
confirmed address it is, or, where sign-up is open, to a new account with that address
(confirmed by the provider). Two-factor sign-in, when on, still asks for a code.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from control_plane.accounts.models import Account
from control_plane.accounts.services import users_with_email

SESSION = "millrace_oidc"
FLOW_SECONDS = 600  # from leaving for the provider to coming back
HTTP_TIMEOUT = 10
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


class OidcError(Exception):
    """Sign-in with the provider did not work; the message is for the person."""


def configured() -> bool:
    return bool(settings.MILLRACE_OIDC_ISSUER and settings.MILLRACE_OIDC_CLIENT_ID)


def provider_name() -> str:
    return str(settings.MILLRACE_OIDC_NAME)


def _get_json(url: str, data: dict[str, str] | None = None, auth: str | None = None) -> Any:
    headers = {"Accept": "application/json"}
    body = None
    if data is not None:
        body = urllib.parse.urlencode(data).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if auth is not None:
        headers["Authorization"] = auth
    request = urllib.request.Request(url, data=body, headers=headers)  # noqa: S310 - the operator's issuer
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        raise OidcError(f"the sign-in provider answered {exc.code}: {detail}") from None
    except (OSError, ValueError) as exc:
        raise OidcError(f"the sign-in provider could not be reached: {exc}") from None


def discovery() -> dict[str, Any]:
    """The issuer's discovery document (cached for an hour)."""
    issuer = settings.MILLRACE_OIDC_ISSUER.rstrip("/")
    key = "oidc-discovery:" + hashlib.sha256(issuer.encode()).hexdigest()[:16]
    found = cache.get(key)
    if found is None:
        found = _get_json(issuer + "/.well-known/openid-configuration")
        if not isinstance(found, dict) or found.get("issuer", "").rstrip("/") != issuer:
            raise OidcError("the sign-in provider's discovery document names another issuer")
        cache.set(key, found, 3600)
    return found


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def begin(session: Any, redirect_uri: str, next_url: str) -> str:
    """Remember a new flow in the session; the provider's URL to send the person to."""
    config = discovery()
    state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
    session[SESSION] = {
        "state": state,
        "nonce": nonce,
        "verifier": verifier,
        "at": time.time(),
        "next": next_url,
    }
    query = {
        "response_type": "code",
        "client_id": settings.MILLRACE_OIDC_CLIENT_ID,
        "redirect_uri": redirect_uri,
        "scope": settings.MILLRACE_OIDC_SCOPES,
        "state": state,
        "nonce": nonce,
        "code_challenge": _b64(hashlib.sha256(verifier.encode()).digest()),
        "code_challenge_method": "S256",
    }
    return str(config["authorization_endpoint"]) + "?" + urllib.parse.urlencode(query)


def complete(session: Any, params: dict[str, str], redirect_uri: str) -> tuple[dict[str, Any], str]:
    """The verified ID token's claims and where to go next, for the provider's answer
    ``params``; the flow is used up either way (a callback works once)."""
    flow = session.pop(SESSION, None)
    if not isinstance(flow, dict) or time.time() - flow["at"] > FLOW_SECONDS:
        raise OidcError("the sign-in expired or was already used; start again")
    if not secrets.compare_digest(str(params.get("state", "")), flow["state"]):
        raise OidcError("the answer does not belong to this sign-in; start again")
    if params.get("error"):
        raise OidcError(
            f"the sign-in provider refused: {params.get('error_description') or params['error']}"
        )
    code = params.get("code")
    if not code:
        raise OidcError("the sign-in provider sent no code")
    config = discovery()
    client_id = settings.MILLRACE_OIDC_CLIENT_ID
    secret = settings.MILLRACE_OIDC_CLIENT_SECRET
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": flow["verifier"],
    }
    auth = None
    methods = config.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    if secret and "client_secret_basic" in methods:
        pair = f"{urllib.parse.quote(client_id)}:{urllib.parse.quote(secret)}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form["client_id"] = client_id
        if secret:
            form["client_secret"] = secret
    tokens = _get_json(str(config["token_endpoint"]), form, auth)
    id_token = tokens.get("id_token") if isinstance(tokens, dict) else None
    if not id_token:
        raise OidcError("the sign-in provider sent no ID token")
    try:
        key = _signing_key(str(config["jwks_uri"]), id_token)
        claims = jwt.decode(
            id_token,
            key,
            algorithms=ALGORITHMS,
            audience=client_id,
            issuer=config["issuer"],
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            leeway=30,
        )
    except jwt.PyJWTError as exc:
        raise OidcError(f"the ID token is not valid: {exc}") from None
    if not secrets.compare_digest(str(claims.get("nonce", "")), flow["nonce"]):
        raise OidcError("the ID token does not belong to this sign-in")
    return claims, str(flow["next"])


def _signing_key(jwks_uri: str, token: str) -> Any:
    """The provider's key that signed ``token``: the one its ``kid`` names, or, for a
    token without one, the provider's only signing key."""
    kid = jwt.get_unverified_header(token).get("kid")
    keys = jwt.PyJWKClient(jwks_uri, timeout=HTTP_TIMEOUT).get_signing_keys()
    found = [k for k in keys if kid is None or k.key_id == kid]
    if len(found) != 1:
        raise jwt.InvalidTokenError(
            f"no single signing key of the provider matches the token's key id {kid!r}"
        )
    return found[0].key


def user_for(claims: dict[str, Any]) -> AbstractBaseUser:
    """The account the verified claims name (made, where sign-up is open, if none)."""
    email = str(claims.get("email") or "").strip().lower()
    if not email or claims.get("email_verified") is not True:
        raise OidcError(
            "the sign-in provider did not vouch for an e-mail address (email_verified), "
            "which Millrace matches accounts by"
        )
    matches = users_with_email(email)
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise OidcError(f"more than one account has {email}; ask an operator")
    if not settings.MILLRACE_SIGNUP_ENABLED:
        raise OidcError(f"no account has {email}; ask an operator for one")
    user_model = get_user_model()
    if user_model.objects.filter(username__iexact=email).exists():
        # An account named by the address that never confirmed it: not this person's.
        raise OidcError(f"{email} has an account whose address is not confirmed yet")
    try:
        with transaction.atomic():
            user = user_model.objects.create_user(username=email, email=email)
            user.set_unusable_password()
            user.save(update_fields=["password"])
            Account.objects.create(user=user, email_verified_at=timezone.now())
    except IntegrityError:
        raise OidcError("that account was being made at the same time; try again") from None
    return user
