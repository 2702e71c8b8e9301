"""People who signed up themselves, the invitations that bring them into tenants, and the
mail a development server keeps instead of sending.

Users that operators make (``createsuperuser``, the admin, ``manage.py`` commands) have
no :class:`Account`: an operator vouches for them, so they count as verified.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from control_plane.tenancy.models import Role


class Account(models.Model):
    """A signed-up user's own state: whether their e-mail address is proven theirs."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account"
    )
    email_verified_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.user} ({'verified' if self.email_verified_at else 'unverified'})"


class InvitationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    ACCEPTED = "accepted", "Accepted"
    REVOKED = "revoked", "Revoked"
    EXPIRED = "expired", "Expired"


class Invitation(models.Model):
    """An e-mailed offer to join a tenant with a role: single use, expiring, revocable.

    Only a SHA-256 of the token in the link is kept, so the table alone lets no one in.
    At most one pending invitation per tenant and address: inviting again replaces it.
    """

    tenant = models.ForeignKey(
        "tenancy.Tenant", on_delete=models.CASCADE, related_name="invitations"
    )
    email = models.EmailField()  # lowercased
    role = models.CharField(max_length=16, choices=Role.choices)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "email"],
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_one_open_per_address",
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} to {self.tenant_id} as {self.role} ({self.status})"

    @property
    def status(self) -> str:
        if self.accepted_at is not None:
            return InvitationStatus.ACCEPTED
        if self.revoked_at is not None:
            return InvitationStatus.REVOKED
        if self.expires_at <= timezone.now():
            return InvitationStatus.EXPIRED
        return InvitationStatus.PENDING


class OutboxMail(models.Model):
    """Mail "sent" by a server without SMTP (the development default): kept here and
    shown on the console's development mail page instead of leaving the machine."""

    to = models.TextField()
    subject = models.CharField(max_length=998)
    body = models.TextField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-sent_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.to}: {self.subject}"


class TwoFactor(models.Model):
    """A person's authenticator app (TOTP, RFC 6238: SHA-1, 6 digits, 30-second steps).

    The shared secret must be readable to check codes, as in every TOTP server; it never
    leaves the server after enrolment. ``last_step`` is the time step of the last code
    accepted, so a code is accepted once (no replay within its window)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="two_factor"
    )
    secret = models.CharField(max_length=64)
    last_step = models.BigIntegerField(default=0)
    enabled_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"two-factor of {self.user}"


class RecoveryCode(models.Model):
    """A single-use code that stands in for the authenticator (a SHA-256 is kept)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="recovery_codes"
    )
    code_hash = models.CharField(max_length=64)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"recovery code of {self.user} ({'used' if self.used_at else 'unused'})"


class PersonalToken(models.Model):
    """A person's token for the admin REST API (``Authorization: Bearer mrpat_…``): it
    acts as that person, with their roles, until it expires or is revoked. Only a
    SHA-256 of its secret part is kept; the whole token is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens"
    )
    name = models.CharField(max_length=100)
    token_id = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_id}) of {self.user}"

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"
