"""The Kafka-protocol broker: an asyncio server over the partition log (Step 3).

It reaches metadata only through :class:`~data_plane.broker.ports.MetadataStore`, so its
logic is tested without a database; the Django adapter lives in the control plane.
"""
