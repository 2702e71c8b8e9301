from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "control_plane.streams"
    label = "streams"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "Streams (REST and WebSocket data API)"
