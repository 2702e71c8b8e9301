"""ASGI entry point: Django over HTTP (console, REST APIs) and the WebSocket streams."""

from __future__ import annotations

import os

from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

django_asgi_app = get_asgi_application()

from control_plane.streams.routing import websocket_urlpatterns  # noqa: E402 - after setup

# Streams authenticate with API keys (header or first frame), never with the console's
# session cookie, so a cross-site page cannot open one with a visitor's session.
application = ProtocolTypeRouter(
    {"http": django_asgi_app, "websocket": URLRouter(websocket_urlpatterns)}
)
