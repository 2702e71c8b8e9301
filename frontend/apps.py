from typing import Any

from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        user_logged_out.connect(_end_live_tails, dispatch_uid="frontend.end_live_tails")


def _end_live_tails(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """Logging out ends the session's live tails at once (the signal comes before the
    session is flushed, so its key is still known)."""
    from frontend.tail import end_session_sockets

    session = getattr(request, "session", None)
    end_session_sockets(session.session_key if session is not None else None)
