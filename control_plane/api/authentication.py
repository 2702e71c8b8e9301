"""API-key authentication for programs: HTTP Basic ``key_id:secret`` or Bearer ``key_id.secret``.

The authenticated "user" is an :class:`ApiKeyUser` (not a Django user) and
``request.auth`` is the :class:`~control_plane.access.models.ApiKey`; the key's service
account, tenant and ACLs decide what it may do. Failed attempts are rate limited per
client address.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.request import Request

from control_plane.access.models import ApiKey
from control_plane.access.services import KeyRejected, authenticate_api_key
from control_plane.accounts import tokens_api
from control_plane.accounts.models import PersonalToken
from control_plane.core import ratelimit
from control_plane.core.http import client_ip

RATE_SCOPE = "api_key"


class ApiKeyUser:
    """Stands in for ``request.user`` when a request is authenticated by an API key."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key

    def get_username(self) -> str:
        return self.api_key.key_id

    def __str__(self) -> str:
        return self.api_key.key_id


class Throttled(exceptions.Throttled):
    default_detail = "Too many failed authentication attempts."


def _parse(header: str) -> tuple[str, str] | None:
    scheme, _, credentials = header.partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise exceptions.AuthenticationFailed("malformed Basic credentials") from None
        key_id, sep, secret = decoded.partition(":")
    elif scheme.lower() == "bearer":
        key_id, sep, secret = credentials.partition(".")
    else:
        return None
    if not sep or not key_id or not secret:
        raise exceptions.AuthenticationFailed(
            "API key credentials must be 'key_id:secret' (Basic) or 'key_id.secret' (Bearer)"
        )
    return key_id, secret


class PersonalTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer mrpat_…``: a person's own token; the request acts as them
    (``request.auth`` is the :class:`~control_plane.accounts.models.PersonalToken`)."""

    def authenticate(self, request: Request) -> tuple[Any, PersonalToken] | None:
        scheme, _, credentials = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        credentials = credentials.strip()
        if scheme.lower() != "bearer" or not credentials.startswith(tokens_api.PREFIX):
            return None
        ip = client_ip(request._request)
        if ratelimit.is_blocked(RATE_SCOPE, ip):
            raise Throttled(wait=ratelimit.retry_after_seconds())
        try:
            return tokens_api.authenticate(credentials)
        except tokens_api.TokenRejected as exc:
            ratelimit.record_failure(RATE_SCOPE, ip)
            raise exceptions.AuthenticationFailed(exc.reason) from None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="millrace"'


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ApiKeyUser, ApiKey] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        if header.partition(" ")[2].strip().startswith(tokens_api.PREFIX):
            return None  # a personal token (PersonalTokenAuthentication)
        parsed = _parse(header)
        if parsed is None:
            return None
        ip = client_ip(request._request)
        if ratelimit.is_blocked(RATE_SCOPE, ip):
            raise Throttled(wait=ratelimit.retry_after_seconds())
        try:
            key = authenticate_api_key(*parsed)
        except KeyRejected as exc:
            ratelimit.record_failure(RATE_SCOPE, ip)
            raise exceptions.AuthenticationFailed(exc.reason) from None
        return ApiKeyUser(key), key

    def authenticate_header(self, request: Request) -> str:
        # Bearer, not Basic: a Basic challenge makes browsers pop up a password dialog.
        return 'Bearer realm="millrace"'


class CsrfSessionAuthentication(SessionAuthentication):
    """The console's session, with Django's CSRF check on unsafe methods."""
