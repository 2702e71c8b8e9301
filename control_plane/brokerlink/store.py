"""Every broker port over Django: what ``manage.py broker`` hands the broker."""

from __future__ import annotations

from control_plane.brokerlink.admin_requests import DjangoAdmin
from control_plane.brokerlink.client_reports import DjangoClientReports
from control_plane.brokerlink.credentials import DjangoCredentials
from control_plane.brokerlink.groups import DjangoGroupStore
from control_plane.brokerlink.metadata import DjangoMetadataSource
from control_plane.brokerlink.registry import DjangoBrokerRegistry
from control_plane.brokerlink.transactions import DjangoTransactionStore
from control_plane.brokerlink.usage import DjangoUsageReports


class DjangoMetadataStore(
    DjangoMetadataSource,
    DjangoCredentials,
    DjangoBrokerRegistry,
    DjangoAdmin,
    DjangoGroupStore,
    DjangoClientReports,
    DjangoTransactionStore,
    DjangoUsageReports,
):
    """:class:`data_plane.broker.ports.MetadataStore` over the Django models.

    ``allow_anonymous``: the development listener (``broker --allow-anonymous``): clients
    without credentials act in the ``default`` tenant, and the broker row says so.
    """

    def __init__(self, *, allow_anonymous: bool = False) -> None:
        DjangoMetadataSource.__init__(self)
        DjangoCredentials.__init__(self, allow_anonymous=allow_anonymous)
        DjangoBrokerRegistry.__init__(self, dev_listener=allow_anonymous)

    def close(self) -> None:
        """Let go of the LISTEN connection and the liveness lock (tests; the broker
        process ends with ``deregister_broker``)."""
        self.stop_listening()
        self._liveness.release()
