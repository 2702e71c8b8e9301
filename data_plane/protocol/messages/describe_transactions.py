"""DescribeTransactions (key 65, KIP-664): the state of transactional ids. Version 0."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 65
VALID = (0, 0)
FLEXIBLE = (0, None)

REQUEST = message(
    KEY,
    "DescribeTransactions",
    "request",
    VALID,
    FLEXIBLE,
    Field("transactional_ids", Array(STRING)),
)

RESPONSE = message(
    KEY,
    "DescribeTransactions",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "transaction_states",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("transactional_id", STRING),
                Field("transaction_state", STRING),
                Field("transaction_timeout_ms", INT32),
                Field("transaction_start_time_ms", INT64),
                Field("producer_id", INT64),
                Field("producer_epoch", INT16),
                Field(
                    "topics",
                    Array(Struct(Field("topic", STRING), Field("partitions", Array(INT32)))),
                ),
            )
        ),
    ),
)
