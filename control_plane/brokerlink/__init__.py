"""The Django/Postgres adapters of the broker's ports, one module per port:

* ``metadata``: :class:`~data_plane.broker.ports.MetadataSource` (snapshots, the change
  log, live brokers, LISTEN);
* ``credentials``: :class:`~data_plane.broker.ports.Credentials`;
* ``registry``: :class:`~data_plane.broker.ports.BrokerRegistry`;
* ``admin_requests``: :class:`~data_plane.broker.ports.Admin`;
* ``groups``: the coordinator's :class:`~data_plane.groups.coordinator.GroupStore`;
* ``store``: :class:`DjangoMetadataStore`, all of them, for ``manage.py broker``.

Every method is called from the broker's worker threads, never from its event loop, and
starts with ``connections.fresh_connection()`` (a broker lives for days; its connections
must not).
"""
