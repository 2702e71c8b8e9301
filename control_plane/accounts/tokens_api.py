"""Personal API tokens: a person's credential for the admin REST API from scripts and
CI, without a password or a browser session (and so without CSRF).

A token is ``mrpat_`` + a 12-character id + a 32-character secret. It acts as its owner
with their memberships and roles as they are at each request; it cannot create or revoke
tokens (a signed-in session does that). Made and revoked tokens are audited.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from control_plane.accounts.models import PersonalToken
from control_plane.audit.services import record_event
from control_plane.core.actor import Actor
from control_plane.core.errors import Conflict, InvalidInput, LimitExceeded

PREFIX = "mrpat_"
ID_LENGTH = 12
SECRET_LENGTH = 32
MAX_ACTIVE = 20
_ALPHABET = string.ascii_letters + string.digits
# Seen within this long, the last-used time is not written again.
TOUCH_EVERY = timedelta(minutes=1)


class TokenRejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class CreatedToken:
    token: PersonalToken
    text: str  # shown once


def _random(n: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(n))


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _audit(actor: Actor, action: str, token: PersonalToken) -> None:
    record_event(
        actor,
        tenant=None,
        action=action,
        object_type="personal_token",
        object_id=token.pk,
        object_repr=f"{token.name} ({token.token_id})",
        after={"name": token.name, "token_id": token.token_id, "state": token.state},
    )


def create(actor: Actor, *, name: str, expires_in_days: int | None) -> CreatedToken:
    user = actor.user
    if user is None or actor.api_key is not None:
        raise InvalidInput("only a signed-in person makes personal tokens")
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise InvalidInput("name the token (up to 100 characters)", field="name")
    if expires_in_days is not None and not 1 <= expires_in_days <= 3650:
        raise InvalidInput("expires_in_days must be 1 to 3650, or empty", field="expires_in_days")
    active = PersonalToken.objects.filter(user=user, revoked_at=None)
    if sum(1 for t in active if t.state == "active") >= MAX_ACTIVE:
        raise LimitExceeded(f"at most {MAX_ACTIVE} active tokens; revoke one first")
    secret = _random(SECRET_LENGTH)
    with transaction.atomic():
        token = PersonalToken.objects.create(
            user=user,
            name=name,
            token_id=_random(ID_LENGTH),
            secret_hash=_hash(secret),
            expires_at=(
                timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
            ),
        )
        _audit(actor, "account.token.create", token)
    return CreatedToken(token, f"{PREFIX}{token.token_id}{secret}")


def revoke(actor: Actor, token: PersonalToken) -> PersonalToken:
    with transaction.atomic():
        token = PersonalToken.objects.select_for_update().get(pk=token.pk)
        if token.revoked_at is not None:
            raise Conflict("this token is revoked already")
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        _audit(actor, "account.token.revoke", token)
    return token


def authenticate(text: str) -> tuple[AbstractBaseUser, PersonalToken]:
    """The person and token ``text`` names; TokenRejected (one reason for every bad
    token, so guessing learns nothing) otherwise."""
    rejected = TokenRejected("invalid, expired or revoked personal token")
    body = text.removeprefix(PREFIX)
    if len(body) != ID_LENGTH + SECRET_LENGTH:
        raise rejected
    token_id, secret = body[:ID_LENGTH], body[ID_LENGTH:]
    token = PersonalToken.objects.select_related("user").filter(token_id=token_id).first()
    if token is None or not secrets.compare_digest(token.secret_hash, _hash(secret)):
        raise rejected
    if token.state != "active" or not token.user.is_active:
        raise rejected
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
        PersonalToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user, token
