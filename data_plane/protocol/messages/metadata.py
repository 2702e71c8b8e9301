"""Metadata (key 3): brokers, and topics with their partitions. Versions 0-13."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT16, INT32, STRING, UUID

KEY = 3
VALID = (0, 13)
FLEXIBLE = (9, None)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

REQUEST = message(
    KEY,
    "Metadata",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "topics",
        Array(
            Struct(
                Field("topic_id", UUID, versions=(10, None)),
                Field("name", STRING, nullable=(10, None)),
            )
        ),
        nullable=(1, None),
    ),
    Field("allow_auto_topic_creation", BOOL, versions=(4, None), default=True),
    Field("include_cluster_authorized_operations", BOOL, versions=(8, 10)),
    Field("include_topic_authorized_operations", BOOL, versions=(8, None)),
)

RESPONSE = message(
    KEY,
    "Metadata",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(3, None)),
    Field(
        "brokers",
        Array(
            Struct(
                Field("node_id", INT32),
                Field("host", STRING),
                Field("port", INT32),
                Field("rack", STRING, versions=(1, None), nullable=(1, None)),
            )
        ),
    ),
    Field("cluster_id", STRING, versions=(2, None), nullable=(2, None)),
    Field("controller_id", INT32, versions=(1, None), default=-1),
    Field(
        "topics",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("name", STRING, nullable=(12, None)),
                Field("topic_id", UUID, versions=(10, None)),
                Field("is_internal", BOOL, versions=(1, None)),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("error_code", INT16),
                            Field("partition_index", INT32),
                            Field("leader_id", INT32),
                            Field("leader_epoch", INT32, versions=(7, None), default=-1),
                            Field("replica_nodes", Array(INT32)),
                            Field("isr_nodes", Array(INT32)),
                            Field("offline_replicas", Array(INT32), versions=(5, None)),
                        )
                    ),
                ),
                Field(
                    "topic_authorized_operations",
                    INT32,
                    versions=(8, None),
                    default=AUTHORIZED_OPERATIONS_OMITTED,
                ),
            )
        ),
    ),
    Field(
        "cluster_authorized_operations",
        INT32,
        versions=(8, 10),
        default=AUTHORIZED_OPERATIONS_OMITTED,
    ),
    # KIP-1102: a top-level error (REBOOTSTRAP_REQUIRED for a client that must bootstrap
    # again); Millrace has no such condition, so it is always NONE.
    Field("error_code", INT16, versions=(13, None)),
)
