"""Sending the accounts' mail: verification, password reset, invitations.

Where it goes is configured by environment (``EMAIL_HOST`` and friends, see
docs/accounts.md): a real SMTP connection when a host is set, otherwise
:class:`OutboxBackend`, which keeps each message in the database for the console's
development mail page (``/dev/mail/``) and logs one line. Mail is sent while the
request is answered: a failure is told to the person at once ("could not send"), and
they can ask again; nothing is half-done (the account or invitation stays as it was
made, and a new link replaces the old).
"""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, send_mail
from django.core.mail.backends.base import BaseEmailBackend
from django.template.loader import render_to_string

from control_plane.core.errors import Unavailable

logger = logging.getLogger("millrace.accounts")

OUTBOX_BACKEND = "control_plane.accounts.mail.OutboxBackend"


class OutboxBackend(BaseEmailBackend):
    """Keeps messages in :class:`~control_plane.accounts.models.OutboxMail`."""

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        from control_plane.accounts.models import OutboxMail

        for message in email_messages:
            body = message.body if isinstance(message.body, str) else str(message.body)
            OutboxMail.objects.create(
                to=", ".join(message.to), subject=str(message.subject), body=body
            )
            # The recipient only: bodies hold links that sign people in.
            logger.info("mail kept for the development mail page (/dev/mail/): to %s", message.to)
        return len(email_messages)


def uses_outbox() -> bool:
    """True when mail stays on this server (no SMTP host configured)."""
    return bool(settings.EMAIL_BACKEND == OUTBOX_BACKEND)


def send(to: str, template: str, context: dict[str, Any]) -> None:
    """Render ``accounts/mail/<template>_subject.txt`` and ``…_body.txt`` and send them;
    :class:`Unavailable` if the mail server would not take the message."""
    subject = render_to_string(f"accounts/mail/{template}_subject.txt", context)
    body = render_to_string(f"accounts/mail/{template}_body.txt", context)
    try:
        send_mail(
            " ".join(subject.split()),
            body,
            settings.DEFAULT_FROM_EMAIL,
            [to],
            fail_silently=False,
        )
    except (smtplib.SMTPException, OSError) as exc:
        logger.warning("sending %s mail failed: %s", template, exc)
        raise Unavailable(
            "the mail could not be sent (the mail server did not take it); try again later"
        ) from None
