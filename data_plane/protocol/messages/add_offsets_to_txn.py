"""AddOffsetsToTxn (key 25): a transactional producer will commit a group's offsets in
its transaction (``send_offsets_to_transaction``). Versions 0-4."""

from __future__ import annotations

from data_plane.protocol.schema import Field, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 25
VALID = (0, 4)
FLEXIBLE = (3, None)

REQUEST = message(
    KEY,
    "AddOffsetsToTxn",
    "request",
    VALID,
    FLEXIBLE,
    Field("transactional_id", STRING),
    Field("producer_id", INT64),
    Field("producer_epoch", INT16),
    Field("group_id", STRING),
)

RESPONSE = message(
    KEY,
    "AddOffsetsToTxn",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
)
