"""The 4-byte big-endian size prefix in front of every request and response.

:class:`FrameReader` is a sans-I/O buffer: feed it bytes as they arrive, take complete
frames out. The size is checked against ``max_frame_bytes`` as soon as its 4 bytes arrive,
before anything is reserved for the body, so an unauthenticated peer announcing a 2 GiB
frame costs nothing (Kafka's ``socket.request.max.bytes``; 512 KiB before SASL completes).
"""

from __future__ import annotations

import struct

from data_plane.protocol.types import ProtocolError

_SIZE = struct.Struct(">i")


class FrameTooLarge(ProtocolError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the {limit}-byte limit")
        self.size = size
        self.limit = limit


class FrameReader:
    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data
        if len(self._buf) >= 4:
            (size,) = _SIZE.unpack_from(self._buf, 0)
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)

    def next_frame(self) -> bytes | None:
        """The next complete frame's body, or None until more bytes arrive."""
        if len(self._buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf, 0)
        if size > self.max_frame_bytes:
            raise FrameTooLarge(size, self.max_frame_bytes)
        if len(self._buf) < 4 + size:
            return None
        with memoryview(self._buf) as view:
            frame = bytes(view[4 : 4 + size])  # one copy, not a slice and then a copy
        del self._buf[: 4 + size]
        if len(self._buf) >= 4:
            self.feed(b"")  # check the next frame's announced size right away
        return frame

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def pending_size(self) -> int:
        """The whole size (prefix included) of the frame being buffered; 0 if unknown."""
        if len(self._buf) < 4:
            return 0
        (size,) = _SIZE.unpack_from(self._buf, 0)
        return 4 + int(size)

    @property
    def missing(self) -> int:
        """Bytes still to come for the frame being buffered (0 if its size is unknown)."""
        if len(self._buf) < 4:
            return 0
        (size,) = _SIZE.unpack_from(self._buf, 0)
        return max(0, 4 + int(size) - len(self._buf))


def frame(*parts: bytes | bytearray | memoryview) -> bytes:
    body = b"".join(parts)
    return _SIZE.pack(len(body)) + body


def size_prefix(length: int) -> bytes:
    return _SIZE.pack(length)
