from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "control_plane.catalog"
    label = "catalog"
    default_auto_field = "django.db.models.BigAutoField"
