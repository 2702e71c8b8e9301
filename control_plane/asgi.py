"""ASGI entry point: Django over HTTP (console, admin API). WebSocket streams join in Step 6."""

from __future__ import annotations

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

django_asgi_app = get_asgi_application()

application = ProtocolTypeRouter({"http": django_asgi_app})
