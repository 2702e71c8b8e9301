from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "control_plane.alerts"
    label = "alerts"
    default_auto_field = "django.db.models.BigAutoField"
