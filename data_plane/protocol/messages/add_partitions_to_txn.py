"""AddPartitionsToTxn (key 24): a transactional producer names the partitions it is about
to write to. Versions 0-5; from v4 (KIP-890) a request may carry several transactions
(brokers verifying a partition's transaction, ``verify_only``), up to v3 one."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT16, INT32, INT64, STRING

KEY = 24
VALID = (0, 5)
FLEXIBLE = (3, None)
# v0-3 are the clients'; v4-5 are brokers only: here a partition leader of transactions
# V2 adding a producer's partition to its transaction (``verify_only`` false), with ids and
# topics named as ``data_plane.broker.txn_router`` names them between brokers.

_TOPIC = Struct(Field("name", STRING), Field("partitions", Array(INT32)))

REQUEST = message(
    KEY,
    "AddPartitionsToTxn",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "transactions",
        Array(
            Struct(
                Field("transactional_id", STRING),
                Field("producer_id", INT64),
                Field("producer_epoch", INT16),
                Field("verify_only", BOOL),
                Field("topics", Array(_TOPIC)),
            )
        ),
        versions=(4, None),
    ),
    Field("v3_and_below_transactional_id", STRING, versions=(0, 3)),
    Field("v3_and_below_producer_id", INT64, versions=(0, 3)),
    Field("v3_and_below_producer_epoch", INT16, versions=(0, 3)),
    Field("v3_and_below_topics", Array(_TOPIC), versions=(0, 3)),
)

_TOPIC_RESULT = Struct(
    Field("name", STRING),
    Field(
        "results_by_partition",
        Array(Struct(Field("partition_index", INT32), Field("partition_error_code", INT16))),
    ),
)

RESPONSE = message(
    KEY,
    "AddPartitionsToTxn",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16, versions=(4, None)),
    Field(
        "results_by_transaction",
        Array(
            Struct(Field("transactional_id", STRING), Field("topic_results", Array(_TOPIC_RESULT)))
        ),
        versions=(4, None),
    ),
    Field("results_by_topic_v3_and_below", Array(_TOPIC_RESULT), versions=(0, 3)),
)
