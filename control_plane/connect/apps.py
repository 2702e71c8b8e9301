from django.apps import AppConfig


class ConnectConfig(AppConfig):
    name = "control_plane.connect"
    label = "connect"
    verbose_name = "Connect"
    default_auto_field = "django.db.models.BigAutoField"
