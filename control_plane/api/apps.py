from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "control_plane.api"
    label = "api"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from control_plane.api import schema  # noqa: F401  (registers OpenAPI extensions)
