"""Kafka's RecordBatch v2 (magic 2): the on-wire and on-disk record format.

Plain Python with C-backed CRC32C and compression; no Django, no I/O beyond bytes. A batch
produced by a client is validated here and stored byte for byte (only its base offset and
partition leader epoch are rewritten, which the CRC does not cover).
"""

from data_plane.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    Record,
    RecordBatch,
    RecordHeader,
    TimestampType,
    iter_batches,
    read_header,
    set_base_offset,
    validate_batch,
)
from data_plane.records.compression import Compression

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "InvalidRecordBatch",
    "Record",
    "RecordBatch",
    "RecordHeader",
    "TimestampType",
    "iter_batches",
    "read_header",
    "set_base_offset",
    "validate_batch",
]
