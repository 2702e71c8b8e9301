"""WriteTxnMarkers (key 27): a transaction coordinator has the leaders of a transaction's
partitions write its commit or abort marker. Between brokers only. Versions 1-2 (Kafka 4's;
v0, which Kafka 3.9 also served, differs only in not being flexible and no client sends
it)."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT8, INT16, INT32, INT64, STRING

KEY = 27
VALID = (1, 2)
FLEXIBLE = (1, None)

REQUEST = message(
    KEY,
    "WriteTxnMarkers",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "markers",
        Array(
            Struct(
                Field("producer_id", INT64),
                Field("producer_epoch", INT16),
                Field("transaction_result", BOOL),
                Field(
                    "topics",
                    Array(Struct(Field("name", STRING), Field("partition_indexes", Array(INT32)))),
                ),
                Field("coordinator_epoch", INT32),
                Field("transaction_version", INT8, versions=(2, None), default=0),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "WriteTxnMarkers",
    "response",
    VALID,
    FLEXIBLE,
    Field(
        "markers",
        Array(
            Struct(
                Field("producer_id", INT64),
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
