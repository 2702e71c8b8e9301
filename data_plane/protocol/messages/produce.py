"""Produce (key 0): write record batches to partitions. Versions 0-12.

Versions 0-2 carry message formats v0 and v1, which the broker up-converts to RecordBatch
v2 before appending (``data_plane.records.legacy``), as Kafka 3.9 did. (Kafka 4 still
advertises v0, KAFKA-18659, because librdkafka before 2.11.1 turns compression off
unless the broker's lowest Produce version is 0, but refuses v0-2.)

v10 (KIP-951) adds answers only: a partition refused NOT_LEADER_OR_FOLLOWER or
FENCED_LEADER_EPOCH carries the tagged ``current_leader``, and that leader's address is in
the tagged ``node_endpoints``. v11 (KIP-890 part 1) changes no field: a client sending it
understands TRANSACTION_ABORTABLE, which a leader answers when a transactional batch's
partition is not in its producer's transaction (INVALID_TXN_STATE below v11). v12 changes
no field either: it is transactions V2 (KIP-890 part 2), the leader adds a producer's
partition to its transaction itself (the client sends no AddPartitionsToTxn).
"""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, RECORDS, STRING

KEY = 0
VALID = (0, 12)
RECORD_BATCH_FROM = 3  # v0-2 carry message formats v0/v1, up-converted on the broker
FLEXIBLE = (9, None)

REQUEST = message(
    KEY,
    "Produce",
    "request",
    VALID,
    FLEXIBLE,
    Field("transactional_id", STRING, versions=(3, None), nullable=(3, None)),
    Field("acks", INT16),
    Field("timeout_ms", INT32),
    Field(
        "topic_data",
        Array(
            Struct(
                Field("name", STRING, versions=(0, 12)),
                Field(
                    "partition_data",
                    Array(
                        Struct(
                            Field("index", INT32),
                            Field("records", RECORDS, nullable=(0, None)),
                        )
                    ),
                ),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "Produce",
    "response",
    VALID,
    FLEXIBLE,
    Field(
        "responses",
        Array(
            Struct(
                Field("name", STRING, versions=(0, 12)),
                Field(
                    "partition_responses",
                    Array(
                        Struct(
                            Field("index", INT32),
                            Field("error_code", INT16),
                            Field("base_offset", INT64),
                            Field("log_append_time_ms", INT64, versions=(2, None), default=-1),
                            Field("log_start_offset", INT64, versions=(5, None), default=-1),
                            Field(
                                "record_errors",
                                Array(
                                    Struct(
                                        Field("batch_index", INT32, versions=(8, None)),
                                        Field(
                                            "batch_index_error_message",
                                            STRING,
                                            versions=(8, None),
                                            nullable=(8, None),
                                        ),
                                    )
                                ),
                                versions=(8, None),
                            ),
                            Field("error_message", STRING, versions=(8, None), nullable=(8, None)),
                            Field(
                                "current_leader",
                                Struct(
                                    Field("leader_id", INT32, versions=(10, None), default=-1),
                                    Field("leader_epoch", INT32, versions=(10, None), default=-1),
                                ),
                                versions=(10, None),
                                tag=0,
                                tagged=(10, None),
                            ),
                        )
                    ),
                ),
            )
        ),
    ),
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field(
        "node_endpoints",
        Array(
            Struct(
                Field("node_id", INT32, versions=(10, None)),
                Field("host", STRING, versions=(10, None)),
                Field("port", INT32, versions=(10, None)),
                Field("rack", STRING, versions=(10, None), nullable=(10, None)),
            )
        ),
        versions=(10, None),
        tag=0,
        tagged=(10, None),
    ),
)
