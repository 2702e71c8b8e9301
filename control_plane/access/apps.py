from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "control_plane.access"
    label = "access"
    default_auto_field = "django.db.models.BigAutoField"
