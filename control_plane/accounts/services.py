"""Use cases of people's accounts: sign-up and e-mail verification, tenants of their own,
invitations, and sign-in lockout. Every change to a tenant records an audit event.

A signed-up person proves their address before anything that trusts it: creating a
tenant, accepting an invitation (sent to an address, so only its owner may take it) and
being found by that address when a tenant admin adds members.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes, force_str
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from control_plane.accounts import mail
from control_plane.accounts.models import Account, Invitation, InvitationStatus
from control_plane.accounts.tokens import verification_tokens
from control_plane.audit.services import record_event
from control_plane.core.actor import Actor
from control_plane.core.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    LimitExceeded,
    NotFound,
    NotPermitted,
)
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Membership, Role, Tenant

# --- addresses and verification -----------------------------------------------------------


def normalize_email(email: str) -> str:
    email = (email or "").strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidInput("enter a valid e-mail address", field="email") from None
    return email


def is_verified(user: AbstractBaseUser) -> bool:
    """Signed-up users once they proved their address; operator-made users always."""
    account = Account.objects.filter(user=user).only("email_verified_at").first()
    return account is None or account.email_verified_at is not None


def users_with_email(email: str) -> list[Any]:
    """Accounts whose address is ``email`` and proven (or vouched for by an operator)."""
    users = get_user_model().objects.filter(email__iexact=email.strip())
    return [
        u
        for u in users.select_related("account")
        if not hasattr(u, "account") or u.account.email_verified_at is not None
    ]


def link(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


def _verification_link(user: AbstractBaseUser, base_url: str) -> str:
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = verification_tokens.make_token(user)
    return link(base_url, reverse("frontend:verify-email", args=[uid, token]))


@dataclass
class SignUp:
    email: str
    user: Any | None  # None: the address already had an account (told by mail, not here)


def sign_up(*, email: str, password: str, base_url: str) -> SignUp:
    """Make an unverified account named by its address and mail it a verification link.

    The answer is the same whether or not the address already has an account (no
    enumeration): an existing owner gets a mail saying so, with a password-reset link.
    """
    if not settings.MILLRACE_SIGNUP_ENABLED:
        raise NotPermitted("sign-up is turned off on this server; ask an operator for an account")
    email = normalize_email(email)
    user_model = get_user_model()
    taken = user_model.objects.filter(email__iexact=email).exists() or (
        user_model.objects.filter(username__iexact=email).exists()
    )
    candidate = user_model(username=email, email=email)
    try:
        validate_password(password, user=candidate)
    except ValidationError as exc:
        raise InvalidInput(" ".join(exc.messages), field="password") from None
    if taken:
        mail.send(
            email,
            "account_exists",
            {"email": email, "reset_link": link(base_url, reverse("frontend:password-reset"))},
        )
        return SignUp(email, None)
    try:
        with transaction.atomic():  # no mail sent: no account made (sign up again)
            user = user_model.objects.create_user(username=email, email=email, password=password)
            Account.objects.create(user=user)
            send_verification(user, base_url)
    except IntegrityError:  # the same address signing up twice at once
        return SignUp(email, None)
    return SignUp(email, user)


def send_verification(user: AbstractBaseUser, base_url: str) -> None:
    """(Again) mail the user a link that proves their address; nothing if proven."""
    if is_verified(user):
        return
    mail.send(
        user.email,
        "verify_email",
        {"email": user.email, "link": _verification_link(user, base_url)},
    )


def verify_email(uidb64: str, token: str) -> AbstractBaseUser:
    """The user whose address the link proves, now verified; InvalidInput otherwise."""
    invalid = InvalidInput("this link is not valid: it was used already, or it expired")
    try:
        pk = int(force_str(urlsafe_base64_decode(uidb64)))
    except (TypeError, ValueError, OverflowError):
        raise invalid from None
    user = get_user_model().objects.filter(pk=pk).first()
    if user is None or not verification_tokens.check_token(user, token):
        raise invalid
    with transaction.atomic():
        account, _ = Account.objects.select_for_update().get_or_create(user=user)
        if account.email_verified_at is None:
            account.email_verified_at = timezone.now()
            account.save(update_fields=["email_verified_at"])
    return user


# --- tenants of one's own -----------------------------------------------------------------


def owned_tenants(user: AbstractBaseUser) -> int:
    return Membership.objects.filter(user=user, role=Role.OWNER).count()


def create_tenant(actor: Actor, *, slug: str, name: str) -> Tenant:
    """A verified person's own tenant, within ``MILLRACE_SIGNUP_MAX_TENANTS`` owned."""
    user = actor.user
    if actor.api_key is not None or user is None:
        raise NotPermitted("only a signed-in person can create a tenant of their own")
    if not is_verified(user):
        raise NotPermitted("verify your e-mail address before creating a tenant")
    limit = settings.MILLRACE_SIGNUP_MAX_TENANTS
    if not actor.is_staff and owned_tenants(user) >= limit:
        raise LimitExceeded(
            f"you already own {limit} tenant{'s' if limit != 1 else ''}, the most allowed"
        )
    return tenancy_services.create_own_tenant(actor, slug=slug, name=name)


# --- invitations --------------------------------------------------------------------------


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def invitation_snapshot(invitation: Invitation) -> dict[str, Any]:
    return {"email": invitation.email, "role": invitation.role, "status": invitation.status}


@dataclass
class Invited:
    invitation: Invitation
    token: str  # only in the mail (and here, for the caller's tests)


def invite(actor: Actor, tenant: Tenant, *, email: str, role: str, base_url: str) -> Invited:
    """Mail ``email`` a single-use link to join the tenant as ``role`` (admins invite up
    to admin, owners any role); an earlier open invitation of the address is replaced.
    If the mail cannot be sent, nothing is kept."""
    tenancy_services.check_may_manage(actor, tenant, role=role)
    email = normalize_email(email)
    members = Membership.objects.filter(tenant=tenant, user__email__iexact=email)
    if members.exists():
        raise AlreadyExists(f"{email} is already a member of {tenant.slug}", field="email")
    token = secrets.token_urlsafe(32)
    days = settings.MILLRACE_INVITATION_DAYS
    # Only the address's invitations are locked while the mail is sent (the tenant's
    # row is not: a slow mail server must not hold up its topics); two invitations of
    # one address at once meet at the one-open-invitation constraint.
    try:
        with transaction.atomic():
            invitation = _replace_invitation(actor, tenant, email, role, token, days)
            _send_invitation(actor, invitation, token, base_url)  # Unavailable: rolled back
    except IntegrityError:
        raise Conflict(f"another invitation to {email} was being sent; try again") from None
    return Invited(invitation, token)


def _replace_invitation(
    actor: Actor, tenant: Tenant, email: str, role: str, token: str, days: int
) -> Invitation:
    now = timezone.now()
    open_ = Invitation.objects.filter(tenant=tenant, email=email, accepted_at=None, revoked_at=None)
    open_.update(revoked_at=now)
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=email,
        role=role,
        token_hash=_hash(token),
        invited_by=actor.user if actor.user is not None and actor.user.pk else None,
        expires_at=now + timedelta(days=days),
    )
    record_event(
        actor,
        tenant=tenant,
        action="invitation.create",
        object_type="invitation",
        object_id=invitation.pk,
        object_repr=email,
        after=invitation_snapshot(invitation),
    )
    return invitation


def _send_invitation(actor: Actor, invitation: Invitation, token: str, base_url: str) -> None:
    days = settings.MILLRACE_INVITATION_DAYS
    mail.send(
        invitation.email,
        "invitation",
        {
            "tenant": invitation.tenant,
            "role": Role(invitation.role).label.lower(),
            "inviter": actor.label,
            "days": days,
            "link": link(base_url, reverse("frontend:invitation", args=[token])),
        },
    )


def revoke_invitation(actor: Actor, invitation: Invitation) -> Invitation:
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        tenancy_services.check_may_manage(actor, invitation.tenant, role=invitation.role)
        if invitation.status != InvitationStatus.PENDING:
            raise Conflict(f"this invitation is {invitation.status} already")
        before = invitation_snapshot(invitation)
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        record_event(
            actor,
            tenant=invitation.tenant,
            action="invitation.revoke",
            object_type="invitation",
            object_id=invitation.pk,
            object_repr=invitation.email,
            before=before,
            after=invitation_snapshot(invitation),
        )
    return invitation


def invitation_for(token: str) -> Invitation:
    """The invitation a link's token names, in any state; NotFound otherwise."""
    found = (
        Invitation.objects.select_related("tenant", "invited_by")
        .filter(token_hash=_hash(token or ""))
        .first()
    )
    if found is None:
        raise NotFound("no such invitation: check the link in the mail")
    return found


def _unusable(invitation: Invitation) -> str | None:
    return {
        InvitationStatus.ACCEPTED: "this invitation was used already",
        InvitationStatus.REVOKED: "this invitation was withdrawn",
        InvitationStatus.EXPIRED: "this invitation has expired: ask for a new one",
    }.get(InvitationStatus(invitation.status))


def check_acceptable(user: AbstractBaseUser, invitation: Invitation) -> str | None:
    """Why ``user`` cannot accept ``invitation`` now, or None."""
    unusable = _unusable(invitation)
    if unusable:
        return unusable
    if not is_verified(user):
        return "verify your e-mail address first"
    if (user.email or "").strip().lower() != invitation.email:
        return (
            f"this invitation was sent to {invitation.email}; sign in with the account of "
            "that address (or sign up with it) to accept it"
        )
    return None


def accept_invitation(actor: Actor, token: str) -> Membership:
    """``actor`` (a person) joins the invitation's tenant with its role; single use."""
    return _accept(actor, invitation_for(token).pk)


def accept_own_invitation(actor: Actor, pk: int) -> Membership:
    """Accept one of the open invitations to the actor's own proven address (listed to
    them when signed in: the address is the proof, as the link's token is)."""
    if actor.user is None or actor.api_key is not None:
        raise NotPermitted("sign in to accept an invitation")
    if pk not in {i.pk for i in pending_invitations_for(actor.user)}:
        raise NotFound("no such invitation for your address")
    return _accept(actor, pk)


def _accept(actor: Actor, pk: int) -> Membership:
    if actor.user is None or actor.api_key is not None:
        raise NotPermitted("sign in to accept an invitation")
    user = actor.user
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().select_related("tenant").get(pk=pk)
        why = check_acceptable(user, invitation)
        if why:
            raise Conflict(why)
        invitation.accepted_at = timezone.now()
        invitation.accepted_by = user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        tenant = invitation.tenant
        membership = Membership.objects.filter(tenant=tenant, user=user).first()
        if membership is None:
            # The invitation is the admin's consent; the system adds (audited), and the
            # acceptance below names the person.
            membership = tenancy_services.add_member(
                Actor.system(), tenant, user=user, role=invitation.role
            )
        record_event(
            actor,
            tenant=tenant,
            action="invitation.accept",
            object_type="invitation",
            object_id=invitation.pk,
            object_repr=invitation.email,
            after=invitation_snapshot(invitation),
        )
    return membership


def pending_invitations_for(user: AbstractBaseUser) -> list[Invitation]:
    """Open invitations to the user's proven address (shown when they have no tenant)."""
    if not user.email or not is_verified(user):
        return []
    rows = Invitation.objects.filter(
        email=user.email.strip().lower(),
        accepted_at=None,
        revoked_at=None,
        expires_at__gt=timezone.now(),
    )
    return list(rows.select_related("tenant"))


# --- sign-in lockout ----------------------------------------------------------------------


def _lock_key(identifier: str) -> str:
    digest = hashlib.sha256(identifier.strip().lower().encode()).hexdigest()[:32]
    return f"login-failures:{digest}"


def login_locked(identifier: str) -> bool:
    """Too many wrong passwords for this username or address lately (whatever the
    client address): sign-in is refused until the lockout passes or the password is
    reset."""
    count = cache.get(_lock_key(identifier), 0)
    return int(count) >= settings.MILLRACE_LOGIN_LOCKOUT_FAILURES


def record_login_failure(identifier: str) -> None:
    key = _lock_key(identifier)
    timeout = settings.MILLRACE_LOGIN_LOCKOUT_SECONDS
    if cache.add(key, 1, timeout=timeout):
        return
    try:
        cache.incr(key)
    except ValueError:  # expired meanwhile
        cache.add(key, 1, timeout=timeout)


def clear_login_failures(*identifiers: str) -> None:
    cache.delete_many([_lock_key(i) for i in identifiers if i])
