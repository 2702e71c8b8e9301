"""Signed, expiring links for proving an e-mail address (Django's password-reset token
scheme with its own salt): a link stops working once the address is verified or
changed, and after ``PASSWORD_RESET_TIMEOUT``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.tokens import PasswordResetTokenGenerator


class EmailVerificationTokens(PasswordResetTokenGenerator):
    key_salt = "millrace.accounts.EmailVerificationTokens"

    def _make_hash_value(self, user: Any, timestamp: int) -> str:
        from control_plane.accounts.models import Account

        account = Account.objects.filter(user=user).first()
        verified = account.email_verified_at if account is not None else "operator"
        return f"{user.pk}{user.email}{verified}{timestamp}"


verification_tokens = EmailVerificationTokens()
