"""OffsetCommit (key 8): store a group's consumed positions. Versions 2-9 (v9: the same
body; a KIP-848 member sends its member epoch in ``generation_id_or_member_epoch``)."""

from __future__ import annotations

from data_plane.protocol.schema import ALL as ALL_VERSIONS
from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 8
VALID = (0, 9)
FLEXIBLE = (8, None)

REQUEST = message(
    KEY,
    "OffsetCommit",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_id", STRING),
    Field("generation_id_or_member_epoch", INT32, versions=(1, None), default=-1),
    Field("member_id", STRING, versions=(1, None)),
    Field("group_instance_id", STRING, versions=(7, None), nullable=(7, None)),
    Field("retention_time_ms", INT64, versions=(2, 4), default=-1),
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("partition_index", INT32),
                            Field("committed_offset", INT64),
                            Field("committed_leader_epoch", INT32, versions=(6, None), default=-1),
                            Field("commit_timestamp", INT64, versions=(1, 1), default=-1),
                            Field("committed_metadata", STRING, nullable=ALL_VERSIONS),
                        )
                    ),
                ),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "OffsetCommit",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(3, None)),
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(Struct(Field("partition_index", INT32), Field("error_code", INT16))),
                ),
            )
        ),
    ),
)
