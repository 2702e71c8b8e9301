"""Millrace's own Kafka protocol client (blocking), for the control plane's questions."""

from data_plane.client.cluster import (
    EARLIEST,
    LATEST,
    ClusterClient,
    OffsetAnswer,
    PositionAnswer,
    ReadAnswer,
)
from data_plane.client.connection import AuthenticationFailed, Connection, KafkaClientError

__all__ = [
    "EARLIEST",
    "LATEST",
    "AuthenticationFailed",
    "ClusterClient",
    "Connection",
    "KafkaClientError",
    "OffsetAnswer",
    "PositionAnswer",
    "ReadAnswer",
]
