from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "control_plane.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"
