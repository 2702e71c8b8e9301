from django.apps import AppConfig


class GroupsConfig(AppConfig):
    name = "control_plane.groups"
    label = "groups"
    verbose_name = "Consumer groups"
    default_auto_field = "django.db.models.BigAutoField"
