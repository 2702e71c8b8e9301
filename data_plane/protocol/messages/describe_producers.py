"""DescribeProducers (key 61, KIP-664): the active idempotent producers of partitions, as
their leader's log remembers them. Version 0."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 61
VALID = (0, 0)
FLEXIBLE = (0, None)

REQUEST = message(
    KEY,
    "DescribeProducers",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "topics",
        Array(Struct(Field("name", STRING), Field("partition_indexes", Array(INT32)))),
    ),
)

RESPONSE = message(
    KEY,
    "DescribeProducers",
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
                    Array(
                        Struct(
                            Field("partition_index", INT32),
                            Field("error_code", INT16),
                            Field("error_message", STRING, nullable=(0, None)),
                            Field(
                                "active_producers",
                                Array(
                                    Struct(
                                        Field("producer_id", INT64),
                                        Field("producer_epoch", INT32),
                                        Field("last_sequence", INT32, default=-1),
                                        Field("last_timestamp", INT64, default=-1),
                                        Field("coordinator_epoch", INT32),
                                        Field("current_txn_start_offset", INT64, default=-1),
                                    )
                                ),
                            ),
                        )
                    ),
                ),
            )
        ),
    ),
)
