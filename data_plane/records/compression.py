"""Record-batch compression codecs with the framing Kafka clients use.

* gzip: a gzip member (RFC 1952);
* snappy: Java clients write xerial framing (magic ``\\x82SNAPPY\\x00``, version and
  compatible-version ints, then length-prefixed raw snappy blocks); librdkafka may write a
  single raw snappy block. We write xerial framing and read both;
* lz4: the LZ4 frame format;
* zstd: a zstd frame.

The compression libraries are C/Rust-backed (cramjam); decompression errors surface as
:class:`CompressionError`. The decompressed size is checked against the caller's limit
(the libraries offer no streaming bound, so the check follows decompression).
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam


class CompressionError(ValueError):
    """The payload cannot be decompressed with the codec the batch names."""


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _xerial_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out += struct.pack(">i", len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CompressionError("truncated xerial snappy block length")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CompressionError("xerial snappy block runs past the payload")
        out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + size]))
        pos += size
    return bytes(out)


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        return _xerial_compress(data)
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def decompress(codec: Compression, data: bytes, *, max_size: int) -> bytes:
    """Decompress ``data``; fail if the result would exceed ``max_size`` bytes."""
    try:
        if codec is Compression.NONE:
            out = data
        elif codec is Compression.GZIP:
            out = bytes(cramjam.gzip.decompress(data))
        elif codec is Compression.SNAPPY:
            out = _snappy_decompress(data)
        elif codec is Compression.LZ4:
            out = bytes(cramjam.lz4.decompress(data))
        else:
            out = bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, ValueError) as exc:
        if isinstance(exc, CompressionError):
            raise
        raise CompressionError(f"{codec.name.lower()} payload is corrupt: {exc}") from None
    if len(out) > max_size:
        raise CompressionError(f"decompressed batch exceeds {max_size} bytes")
    return out
