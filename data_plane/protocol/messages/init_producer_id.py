"""InitProducerId (key 22): a producer id and epoch for an idempotent producer. Versions 0-4."""

from __future__ import annotations

from data_plane.protocol.schema import Field, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 22
VALID = (0, 4)
FLEXIBLE = (2, None)

REQUEST = message(
    KEY,
    "InitProducerId",
    "request",
    VALID,
    FLEXIBLE,
    Field("transactional_id", STRING, nullable=(0, None)),
    Field("transaction_timeout_ms", INT32),
    Field("producer_id", INT64, versions=(3, None), default=-1),
    Field("producer_epoch", INT16, versions=(3, None), default=-1),
)

RESPONSE = message(
    KEY,
    "InitProducerId",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("producer_id", INT64, default=-1),
    Field("producer_epoch", INT16),
)
