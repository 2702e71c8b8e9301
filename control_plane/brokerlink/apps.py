from django.apps import AppConfig


class BrokerlinkConfig(AppConfig):
    """The Django adapters of the broker's ports (``data_plane.broker.ports``).

    Imported only by ``manage.py broker``; it owns no models (the change log it reads is
    ``core.MetadataChange``, written by every service that changes what brokers see).
    """

    name = "control_plane.brokerlink"
    label = "brokerlink"
    default_auto_field = "django.db.models.BigAutoField"
