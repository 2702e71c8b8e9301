"""The console's record filter: "key contains" and "value or header contains".

Both are plain, case-sensitive byte substrings: ``key`` must occur in the record's key,
``text`` in its value, a header's name (UTF-8) or a header's value. A record with a null
key never matches a key filter; an empty needle filters nothing.

Every field of a record lies whole inside its batch's records section, so a needle that
does not occur in that section cannot match any record of the batch
(:meth:`RecordFilter.may_match`). That is what lets a scan skip a batch unread; a needle
that does occur may still straddle two fields, so candidates are checked record by record
with :meth:`RecordFilter.matches`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from data_plane.records.batch import RecordHeader


@dataclass(frozen=True)
class RecordFilter:
    key: bytes = b""
    text: bytes = b""

    @classmethod
    def of(cls, key: str = "", text: str = "") -> RecordFilter:
        return cls(key.encode(), text.encode())

    def __bool__(self) -> bool:
        return bool(self.key or self.text)

    @property
    def needles(self) -> tuple[bytes, ...]:
        """The non-empty needles, the one worth searching for first (the longer) first."""
        return tuple(sorted(filter(None, (self.key, self.text)), key=len, reverse=True))

    def may_match(self, section: bytes) -> bool:
        """False when no record of a batch whose records section is ``section`` matches."""
        return all(needle in section for needle in self.needles)

    def matches(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[RecordHeader | tuple[str, bytes | None]],
    ) -> bool:
        if self.key and self.key not in (key or b""):
            return False
        if self.text:
            needle = self.text
            if needle in (value or b""):
                return True
            for header in headers:
                name, data = (
                    (header.key, header.value) if isinstance(header, RecordHeader) else header
                )
                if needle in name.encode() or needle in (data or b""):
                    return True
            return False
        return True
