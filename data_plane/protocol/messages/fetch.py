"""Fetch (key 1): read record batches from partitions. Versions 0-17.

v0-3 answer in message formats v0 (v0-1) and v1 (v2-3), down-converted from the stored
batches (``data_plane.records.legacy``), as Kafka 3.9 did; v3 adds the response-wide
``max_bytes``.

v13 names topics by id (request, forgotten topics, response); v14 has no schema change;
v15 moves the follower's id into the tagged ``replica_state``; v16 adds the response's
tagged ``node_endpoints`` for ``current_leader`` (KIP-951); v17 adds the partition's
tagged ``replica_directory_id`` (KIP-853, KRaft voters only).
"""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT8, INT16, INT32, INT64, RECORDS, STRING, UUID

KEY = 1
VALID = (0, 17)
FLEXIBLE = (12, None)

REQUEST = message(
    KEY,
    "Fetch",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "cluster_id",
        STRING,
        versions=(12, None),
        nullable=(12, None),
        tag=0,
        tagged=(12, None),
    ),
    Field("replica_id", INT32, versions=(0, 14), default=-1),
    Field(
        "replica_state",
        Struct(
            Field("replica_id", INT32, versions=(15, None), default=-1),
            Field("replica_epoch", INT64, versions=(15, None), default=-1),
        ),
        versions=(15, None),
        tag=1,
        tagged=(15, None),
    ),
    Field("max_wait_ms", INT32),
    Field("min_bytes", INT32),
    Field("max_bytes", INT32, versions=(3, None), default=0x7FFFFFFF),
    Field("isolation_level", INT8, versions=(4, None)),
    Field("session_id", INT32, versions=(7, None)),
    Field("session_epoch", INT32, versions=(7, None), default=-1),
    Field(
        "topics",
        Array(
            Struct(
                Field("topic", STRING, versions=(0, 12)),
                Field("topic_id", UUID, versions=(13, None)),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("partition", INT32),
                            Field("current_leader_epoch", INT32, versions=(9, None), default=-1),
                            Field("fetch_offset", INT64),
                            Field("last_fetched_epoch", INT32, versions=(12, None), default=-1),
                            Field("log_start_offset", INT64, versions=(5, None), default=-1),
                            Field("partition_max_bytes", INT32),
                            Field(
                                "replica_directory_id",
                                UUID,
                                versions=(17, None),
                                tag=0,
                                tagged=(17, None),
                            ),
                        )
                    ),
                ),
            )
        ),
    ),
    Field(
        "forgotten_topics_data",
        Array(
            Struct(
                Field("topic", STRING, versions=(7, 12)),
                Field("topic_id", UUID, versions=(13, None)),
                Field("partitions", Array(INT32), versions=(7, None)),
            )
        ),
        versions=(7, None),
    ),
    Field("rack_id", STRING, versions=(11, None)),
)

RESPONSE = message(
    KEY,
    "Fetch",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field("error_code", INT16, versions=(7, None)),
    Field("session_id", INT32, versions=(7, None)),
    Field(
        "responses",
        Array(
            Struct(
                Field("topic", STRING, versions=(0, 12)),
                Field("topic_id", UUID, versions=(13, None)),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("partition_index", INT32),
                            Field("error_code", INT16),
                            Field("high_watermark", INT64),
                            Field("last_stable_offset", INT64, versions=(4, None), default=-1),
                            Field("log_start_offset", INT64, versions=(5, None), default=-1),
                            Field(
                                "diverging_epoch",
                                Struct(
                                    Field("epoch", INT32, versions=(12, None), default=-1),
                                    Field("end_offset", INT64, versions=(12, None), default=-1),
                                ),
                                versions=(12, None),
                                tag=0,
                                tagged=(12, None),
                            ),
                            Field(
                                "current_leader",
                                Struct(
                                    Field("leader_id", INT32, versions=(12, None), default=-1),
                                    Field("leader_epoch", INT32, versions=(12, None), default=-1),
                                ),
                                versions=(12, None),
                                tag=1,
                                tagged=(12, None),
                            ),
                            Field(
                                "snapshot_id",
                                Struct(
                                    Field("end_offset", INT64, default=-1),
                                    Field("epoch", INT32, default=-1),
                                ),
                                versions=(12, None),
                                tag=2,
                                tagged=(12, None),
                            ),
                            Field(
                                "aborted_transactions",
                                Array(
                                    Struct(
                                        Field("producer_id", INT64, versions=(4, None)),
                                        Field("first_offset", INT64, versions=(4, None)),
                                    )
                                ),
                                versions=(4, None),
                                nullable=(4, None),
                            ),
                            Field("preferred_read_replica", INT32, versions=(11, None), default=-1),
                            Field("records", RECORDS, nullable=(0, None)),
                        )
                    ),
                ),
            )
        ),
    ),
    Field(
        "node_endpoints",
        Array(
            Struct(
                Field("node_id", INT32, versions=(16, None)),
                Field("host", STRING, versions=(16, None)),
                Field("port", INT32, versions=(16, None)),
                Field("rack", STRING, versions=(16, None), nullable=(16, None)),
            )
        ),
        versions=(16, None),
        tag=0,
        tagged=(16, None),
    ),
)
