"""EndTxn (key 26): commit or abort the producer's transaction. Versions 0-5; v5
(KIP-890 part 2, transactions V2) answers with the producer id and epoch to use next."""

from __future__ import annotations

from data_plane.protocol.schema import Field, message
from data_plane.protocol.types import BOOL, INT16, INT32, INT64, STRING

KEY = 26
VALID = (0, 5)
FLEXIBLE = (3, None)
# v5 is transactions V2 (KIP-890 part 2), which clients send when the brokers finalize
# the transaction.version feature at 2 (MILLRACE_TRANSACTION_VERSION).

REQUEST = message(
    KEY,
    "EndTxn",
    "request",
    VALID,
    FLEXIBLE,
    Field("transactional_id", STRING),
    Field("producer_id", INT64),
    Field("producer_epoch", INT16),
    Field("committed", BOOL),
)

RESPONSE = message(
    KEY,
    "EndTxn",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("producer_id", INT64, versions=(5, None), default=-1),
    Field("producer_epoch", INT16, versions=(5, None), default=-1),
)
