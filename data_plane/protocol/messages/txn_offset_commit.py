"""TxnOffsetCommit (key 28): a group's offsets committed inside a transaction, visible to
the group only once the transaction commits. Versions 0-5; v3 (KIP-447) adds the group
generation and member, which fence a zombie consumer-producer; v5 changes no field: it
is transactions V2 (KIP-890 part 2), the group coordinator adds the group to the
producer's transaction itself (the client sends no AddOffsetsToTxn)."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 28
VALID = (0, 5)
FLEXIBLE = (3, None)

REQUEST = message(
    KEY,
    "TxnOffsetCommit",
    "request",
    VALID,
    FLEXIBLE,
    Field("transactional_id", STRING),
    Field("group_id", STRING),
    Field("producer_id", INT64),
    Field("producer_epoch", INT16),
    Field("generation_id", INT32, versions=(3, None), default=-1),
    Field("member_id", STRING, versions=(3, None), default=""),
    Field("group_instance_id", STRING, versions=(3, None), nullable=(3, None), default=None),
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
                            Field("committed_leader_epoch", INT32, versions=(2, None), default=-1),
                            Field("committed_metadata", STRING, nullable=(0, None)),
                        )
                    ),
                ),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "TxnOffsetCommit",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
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
