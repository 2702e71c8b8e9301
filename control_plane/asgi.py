"""ASGI entry point: Django over HTTP (console, REST APIs) and the WebSocket streams."""

from __future__ import annotations

import os

from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import re_path  # noqa: E402

from control_plane.streams.routing import websocket_urlpatterns  # noqa: E402 - after setup
from frontend.tail import ConsoleTail  # noqa: E402

# The data API's streams authenticate with API keys (header or first frame), never with
# the console's session cookie, so a cross-site page cannot open one with a visitor's
# session. The console's live tail does use the session: it sits behind the session
# middleware and an Origin check (the page's own host only).
console_websockets = AllowedHostsOriginValidator(
    AuthMiddlewareStack(
        URLRouter(
            [
                re_path(
                    r"^t/(?P<tenant_slug>[a-z0-9-]+)/stream/?$",
                    ConsoleTail.as_asgi(),
                )
            ]
        )
    )
)
application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter(
            [
                *websocket_urlpatterns,
                re_path(r"^ws/console/", console_websockets),
            ]
        ),
    }
)
