"""OffsetFetch (key 9): read a group's committed positions (v8+ several groups). 0-9
(v9: a KIP-848 member names itself and its member epoch, which the coordinator checks)."""

from __future__ import annotations

from data_plane.protocol.schema import ALL as ALL_VERSIONS
from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT16, INT32, INT64, STRING

KEY = 9
VALID = (0, 9)
FLEXIBLE = (6, None)

_TOPICS = Struct(Field("name", STRING), Field("partition_indexes", Array(INT32)))

REQUEST = message(
    KEY,
    "OffsetFetch",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_id", STRING, versions=(0, 7)),
    Field("topics", Array(_TOPICS), versions=(0, 7), nullable=(2, 7)),
    Field(
        "groups",
        Array(
            Struct(
                Field("group_id", STRING),
                Field("member_id", STRING, versions=(9, None), nullable=(9, None)),
                Field("member_epoch", INT32, versions=(9, None), default=-1),
                Field("topics", Array(_TOPICS), nullable=(8, None)),
            )
        ),
        versions=(8, None),
    ),
    Field("require_stable", BOOL, versions=(7, None)),
)


def _partition(epoch_versions: tuple[int, int | None]) -> Struct:
    return Struct(
        Field("partition_index", INT32),
        Field("committed_offset", INT64),
        Field("committed_leader_epoch", INT32, versions=epoch_versions, default=-1),
        Field("metadata", STRING, nullable=ALL_VERSIONS),
        Field("error_code", INT16),
    )


RESPONSE = message(
    KEY,
    "OffsetFetch",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(3, None)),
    Field(
        "topics",
        Array(Struct(Field("name", STRING), Field("partitions", Array(_partition((5, 7)))))),
        versions=(0, 7),
    ),
    Field("error_code", INT16, versions=(2, 7)),
    Field(
        "groups",
        Array(
            Struct(
                Field("group_id", STRING),
                Field(
                    "topics",
                    Array(
                        Struct(
                            Field("name", STRING),
                            Field("partitions", Array(_partition(ALL_VERSIONS))),
                        )
                    ),
                ),
                Field("error_code", INT16),
            )
        ),
        versions=(8, None),
    ),
)
