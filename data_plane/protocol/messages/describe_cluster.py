"""DescribeCluster (key 60): the cluster id, controller and brokers. Versions 0-2."""

from __future__ import annotations

from data_plane.protocol.messages.metadata import AUTHORIZED_OPERATIONS_OMITTED
from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT8, INT16, INT32, STRING

KEY = 60
VALID = (0, 2)
FLEXIBLE = (0, None)
ENDPOINT_TYPE_BROKERS = 1

REQUEST = message(
    KEY,
    "DescribeCluster",
    "request",
    VALID,
    FLEXIBLE,
    Field("include_cluster_authorized_operations", BOOL),
    Field("endpoint_type", INT8, versions=(1, None), default=ENDPOINT_TYPE_BROKERS),
    Field("include_fenced_brokers", BOOL, versions=(2, None)),
)

RESPONSE = message(
    KEY,
    "DescribeCluster",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("error_message", STRING, nullable=(0, None)),
    Field("endpoint_type", INT8, versions=(1, None), default=ENDPOINT_TYPE_BROKERS),
    Field("cluster_id", STRING),
    Field("controller_id", INT32, default=-1),
    Field(
        "brokers",
        Array(
            Struct(
                Field("broker_id", INT32),
                Field("host", STRING),
                Field("port", INT32),
                Field("rack", STRING, nullable=(0, None)),
                Field("is_fenced", BOOL, versions=(2, None)),
            )
        ),
    ),
    Field("cluster_authorized_operations", INT32, default=AUTHORIZED_OPERATIONS_OMITTED),
)
