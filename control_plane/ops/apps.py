from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Commands that run Millrace as a whole: ``manage.py up`` (every process, for a first
    run) and ``manage.py perf`` (the load generator in ``bench.perf``).

    Entry points, like ``urls`` and ``asgi``: nothing imports this app. It owns no models.
    """

    name = "control_plane.ops"
    label = "ops"
    default_auto_field = "django.db.models.BigAutoField"
