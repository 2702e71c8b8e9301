"""WebSocket routes under /ws/v1/."""

from django.urls import re_path

from control_plane.streams.consumers import StreamConsumer

websocket_urlpatterns = [
    re_path(r"^ws/v1/tenants/(?P<tenant_slug>[a-z0-9-]+)/stream/?$", StreamConsumer.as_asgi()),
]
