"""Two-factor sign-in: an authenticator app's time-based codes (TOTP, RFC 6238) and
single-use recovery codes.

Enrolment shows a new secret (as a QR code and as text) and takes effect only when the
person enters a code it produces, so a mistyped secret cannot lock anyone out. From then
on every sign-in (console and REST API) asks for a code after the password; a recovery
code (ten are shown once, at enrolment or when renewed) works instead, once each.
Turning two-factor off needs the password and a code.
"""

from __future__ import annotations

import hashlib
import secrets
import time

import pyotp
import segno
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from control_plane.accounts.models import RecoveryCode, TwoFactor
from control_plane.audit.services import record_event
from control_plane.core.actor import Actor
from control_plane.core.errors import Conflict, InvalidInput

STEP_SECONDS = 30
DIGITS = 6
WINDOW = 1  # steps either side of now (a phone's clock a little off, typing time)
RECOVERY_CODES = 10


def new_secret() -> str:
    return pyotp.random_base32()


def provisioning_uri(user: AbstractBaseUser, secret: str) -> str:
    name = getattr(user, "email", "") or user.get_username()
    return pyotp.TOTP(secret).provisioning_uri(name=name, issuer_name=settings.MILLRACE_TOTP_ISSUER)


def qr_svg(uri: str) -> str:
    """The URI as an inline SVG QR code (what authenticator apps scan)."""
    return str(segno.make(uri, error="m").svg_inline(scale=4, border=2))


def is_enabled(user: AbstractBaseUser) -> bool:
    return bool(user.pk) and TwoFactor.objects.filter(user=user).exists()


def _matching_step(secret: str, code: str, after: int) -> int | None:
    """The time step (later than ``after``) at which ``code`` is the secret's code."""
    now = int(time.time()) // STEP_SECONDS
    totp = pyotp.TOTP(secret)
    for step in range(now - WINDOW, now + WINDOW + 1):
        if step > after and secrets.compare_digest(totp.at(step * STEP_SECONDS), code):
            return step
    return None


def _clean(code: str) -> str:
    return "".join((code or "").split()).replace("-", "").lower()


def _hash(code: str) -> str:
    return hashlib.sha256(_clean(code).encode()).hexdigest()


def _new_recovery_codes(user: AbstractBaseUser) -> list[str]:
    RecoveryCode.objects.filter(user=user).delete()
    codes = [f"{secrets.token_hex(4)}-{secrets.token_hex(4)}" for _ in range(RECOVERY_CODES)]
    RecoveryCode.objects.bulk_create(RecoveryCode(user=user, code_hash=_hash(c)) for c in codes)
    return codes


def _audit(actor: Actor, action: str) -> None:
    assert actor.user is not None
    record_event(
        actor,
        tenant=None,
        action=action,
        object_type="user",
        object_id=actor.user.pk,
        object_repr=actor.user.get_username(),
    )


def enable(actor: Actor, secret: str, code: str) -> list[str]:
    """Turn two-factor on with ``secret`` once ``code`` proves the app has it; the new
    recovery codes (shown once)."""
    user = actor.user
    assert user is not None
    if not secret:
        raise InvalidInput("start again: the setup expired", field="code")
    step = _matching_step(secret, _clean(code), 0)
    if step is None:
        raise InvalidInput("that code is not the app's current one; try the next", field="code")
    with transaction.atomic():
        if TwoFactor.objects.select_for_update().filter(user=user).exists():
            raise Conflict("two-factor sign-in is on already")
        TwoFactor.objects.create(user=user, secret=secret, last_step=step)
        codes = _new_recovery_codes(user)
        _audit(actor, "account.two_factor.enable")
    return codes


def verify(user: AbstractBaseUser, code: str) -> bool:
    """Is ``code`` the user's current authenticator code (not used before) or an unused
    recovery code? Using it spends it."""
    cleaned = _clean(code)
    if not cleaned:
        return False
    with transaction.atomic():
        device = TwoFactor.objects.select_for_update().filter(user=user).first()
        if device is None:
            return False
        if cleaned.isdigit() and len(cleaned) == DIGITS:
            step = _matching_step(device.secret, cleaned, device.last_step)
            if step is None:
                return False
            device.last_step = step
            device.save(update_fields=["last_step"])
            return True
        spent = RecoveryCode.objects.filter(
            user=user, code_hash=_hash(cleaned), used_at=None
        ).update(used_at=timezone.now())
        return spent == 1


def recovery_codes_left(user: AbstractBaseUser) -> int:
    return RecoveryCode.objects.filter(user=user, used_at=None).count()


def renew_recovery_codes(actor: Actor, code: str) -> list[str]:
    user = actor.user
    assert user is not None
    if not verify(user, code):
        raise InvalidInput("that code is not right", field="code")
    with transaction.atomic():
        codes = _new_recovery_codes(user)
        _audit(actor, "account.two_factor.recovery_codes")
    return codes


def disable(actor: Actor, password: str, code: str) -> None:
    user = actor.user
    assert user is not None
    if not user.check_password(password):
        raise InvalidInput("the password is not right", field="password")
    if not verify(user, code):
        raise InvalidInput("that code is not right", field="code")
    with transaction.atomic():
        TwoFactor.objects.filter(user=user).delete()
        RecoveryCode.objects.filter(user=user).delete()
        _audit(actor, "account.two_factor.disable")
