from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "control_plane.lifecycle"
    label = "lifecycle"
    default_auto_field = "django.db.models.BigAutoField"
