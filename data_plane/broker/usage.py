"""Usage metering on a broker (docs/usage.md): what each tenant's principals produced,
fetched and asked, per topic and hour, and the storage and partitions it kept.

The produce and fetch paths add to a counter row per (hour, tenant, topic, principal);
requests are counted per (hour, tenant, principal). Every ``report`` the broker also
samples the partitions it leads: their log bytes times the seconds since the last
sample (storage byte-seconds) and their number times those seconds (partition-seconds),
per topic. Counting is a dict lookup and two additions, on the event loop, no locks.

Reports are idempotent. A row's values are its totals so far in this broker process
(its *incarnation*), not the change since the last report, and each report has a higher
sequence number; the store keeps a row's values from the highest sequence it has seen.
A report sent twice, or one that failed after the store took it, changes nothing, and a
failed report's rows go with the next one. A restarted broker is a new incarnation: its
rows are new rows beside the old ones, which keep what was reported before. A broker
that is killed loses what it counted since its last report (a clean shutdown reports
first); it never counts anything twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

NO_TOPIC = uuid.UUID(int=0)  # requests are per principal, not per topic
HOUR = 3600

# Counter columns of a row, in order.
FIELDS = (
    "produce_bytes",
    "produce_records",
    "fetch_bytes",
    "fetch_records",
    "requests",
    "storage_byte_seconds",
    "partition_seconds",
)
PRODUCE_BYTES, PRODUCE_RECORDS, FETCH_BYTES, FETCH_RECORDS, REQUESTS, STORAGE, PARTITIONS = range(
    len(FIELDS)
)

Key = tuple[int, int, uuid.UUID, str]  # (hour start, tenant id, topic id, principal)


@dataclass(frozen=True)
class UsageRow:
    """One key's totals in this incarnation (what a report carries)."""

    hour: int  # Unix seconds of the hour's start
    tenant_id: int
    topic_id: uuid.UUID  # NO_TOPIC for a principal's requests
    topic_name: str  # "" with NO_TOPIC
    principal: str  # "" for storage and partitions (a topic's, not a principal's)
    values: tuple[int, ...]  # in FIELDS order


@dataclass(frozen=True)
class UsageReport:
    incarnation: str
    seq: int
    rows: tuple[UsageRow, ...]


@dataclass(frozen=True)
class LedPartition:
    """A partition this broker leads, as the storage sample sees it."""

    tenant_id: int
    topic_id: uuid.UUID
    topic_name: str
    size_bytes: int


class Meter:
    """The broker's usage counters; ``enabled`` False counts nothing (a benchmark's
    baseline)."""

    def __init__(self, *, enabled: bool = True, clock: Callable[[], float] = time.time) -> None:
        self.enabled = enabled
        self.clock = clock
        self.incarnation = uuid.uuid4().hex
        self._rows: dict[Key, list[int]] = {}
        self._names: dict[uuid.UUID, str] = {}
        self._dirty: set[Key] = set()
        self._seq = 0
        self._sampled_at: float | None = None
        # Since start, per tenant id: produce bytes, fetch bytes (the reconciliation's
        # oracle: what the hourly rows must add up to).
        self.totals: dict[int, list[int]] = {}

    def _row(self, tenant_id: int, topic_id: uuid.UUID, principal: str) -> list[int]:
        key = (int(self.clock()) // HOUR * HOUR, tenant_id, topic_id, principal)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = [0] * len(FIELDS)
        self._dirty.add(key)
        return row

    def produced(
        self,
        tenant_id: int,
        topic_id: uuid.UUID,
        topic: str,
        principal: str,
        nbytes: int,
        records: int,
    ) -> None:
        """Records appended by a producer (as stored; not a retried duplicate)."""
        self._records(0, tenant_id, topic_id, topic, principal, nbytes, records)

    def fetched(
        self,
        tenant_id: int,
        topic_id: uuid.UUID,
        topic: str,
        principal: str,
        nbytes: int,
        records: int,
    ) -> None:
        """Records sent to a consumer (not to a follower broker)."""
        self._records(1, tenant_id, topic_id, topic, principal, nbytes, records)

    def _records(
        self,
        direction: int,  # 0: produced, 1: fetched
        tenant_id: int,
        topic_id: uuid.UUID,
        topic: str,
        principal: str,
        nbytes: int,
        records: int,
    ) -> None:
        if not self.enabled:
            return
        self._names[topic_id] = topic
        row = self._row(tenant_id, topic_id, principal)
        column = FETCH_BYTES if direction else PRODUCE_BYTES
        row[column] += nbytes
        row[column + 1] += records  # the records column follows the bytes column
        self.totals.setdefault(tenant_id, [0, 0])[direction] += nbytes

    def request(self, tenant_id: int, principal: str) -> None:
        if self.enabled:
            self._row(tenant_id, NO_TOPIC, principal)[REQUESTS] += 1

    def sample(self, led: Iterable[LedPartition]) -> None:
        """Add the led partitions' storage and count for the time since the last sample
        (the first sample only starts the clock)."""
        now = self.clock()
        since, self._sampled_at = self._sampled_at, now
        if not self.enabled or since is None:
            return
        seconds = max(0.0, now - since)
        if not seconds:
            return
        for p in led:
            self._names[p.topic_id] = p.topic_name
            row = self._row(p.tenant_id, p.topic_id, "")
            row[STORAGE] += round(p.size_bytes * seconds)
            row[PARTITIONS] += round(seconds)

    def report(self) -> UsageReport | None:
        """The rows changed since the last acknowledged report (None: nothing changed).
        Call :meth:`acknowledge` once the store took it; until then the same rows (with
        newer totals) go with the next report."""
        if not self._dirty:
            return None
        self._seq += 1
        rows = tuple(
            UsageRow(
                key[0],
                key[1],
                key[2],
                "" if key[2] == NO_TOPIC else self._names.get(key[2], ""),
                key[3],
                tuple(self._rows[key]),
            )
            for key in sorted(self._dirty, key=_sort_key)
        )
        return UsageReport(self.incarnation, self._seq, rows)

    def acknowledge(self, report: UsageReport) -> None:
        """The store took ``report``: its rows are clean unless counted again since, and
        rows of hours before the last one are forgotten (they cannot change any more)."""
        for row in report.rows:
            key = (row.hour, row.tenant_id, row.topic_id, row.principal)
            if tuple(self._rows.get(key, ())) == row.values:
                self._dirty.discard(key)
        current = int(self.clock()) // HOUR * HOUR
        old = [k for k in self._rows if k[0] < current - HOUR and k not in self._dirty]
        for key in old:
            del self._rows[key]
        if old:  # names of topics no row counts any more (deleted topics among them)
            counted = {k[2] for k in self._rows}
            self._names = {t: n for t, n in self._names.items() if t in counted}

    def forget_tenants(self, keep: Iterable[int]) -> None:
        """Drop a deleted tenant's counters (its usage rows go with it in the store)."""
        kept = set(keep)
        for key in [k for k in self._rows if k[1] not in kept]:
            del self._rows[key]
            self._dirty.discard(key)
        for tenant_id in [t for t in self.totals if t not in kept]:
            del self.totals[tenant_id]


def _sort_key(key: Key) -> tuple[int, int, str, str]:
    return (key[0], key[1], str(key[2]), key[3])
