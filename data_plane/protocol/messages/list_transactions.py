"""ListTransactions (key 66, KIP-664): transactional ids by state, producer id, age
(v1, KIP-994) and pattern (v2, KIP-1152). Versions 0-2."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 66
VALID = (0, 2)
FLEXIBLE = (0, None)

REQUEST = message(
    KEY,
    "ListTransactions",
    "request",
    VALID,
    FLEXIBLE,
    Field("state_filters", Array(STRING)),
    Field("producer_id_filters", Array(INT64)),
    Field("duration_filter", INT64, versions=(1, None), default=-1),
    Field("transactional_id_pattern", STRING, versions=(2, None), nullable=(2, None), default=None),
)

RESPONSE = message(
    KEY,
    "ListTransactions",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("unknown_state_filters", Array(STRING)),
    Field(
        "transaction_states",
        Array(
            Struct(
                Field("transactional_id", STRING),
                Field("producer_id", INT64),
                Field("transaction_state", STRING),
            )
        ),
    ),
)
