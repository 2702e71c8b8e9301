"""Which client software, at which request versions, each tenant's connections use.

Operators moving tenants off old clients need to know who sends what: Kafka 4 refuses
versions Kafka 3.9 served, and a version this broker does not serve fails outright. Each
connection counts its requests by (client id, API, version) in a plain dict (one lookup
per request) and remembers the client software it named in ApiVersions v3+ (KIP-511).
:class:`ClientVersions` folds those counts in, per principal, when the connection ends
and on every report; the broker hands the folded rows to the store
(``ClientReports.report_clients``) every ``client_report_seconds``, and the control plane
keeps them for the console (``catalog.ClientVersion``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from data_plane.metadata.model import Principal

logger = logging.getLogger(__name__)

# Bounds: what one broker keeps between reports, and the lengths stored (a client id or
# software name is the client's to choose).
MAX_ENTRIES = 10_000
MAX_CLIENT_ID = 255
MAX_SOFTWARE = 64


# (tenant id, principal, client id, software name, software version, API, version, served)
_Key = tuple[int, str, str, str, str, int, int, bool]


@dataclass(frozen=True)
class ClientUse:
    """Requests one client identity sent at one (API, version) between two reports."""

    tenant_id: int
    principal: str  # "User:<service account>"
    client_id: str
    software_name: str  # "" when the client never said (before ApiVersions v3)
    software_version: str
    api_key: int
    api_version: int
    served: bool  # False: answered UNSUPPORTED_VERSION
    requests: int
    first_seen: float  # seconds since the epoch
    last_seen: float

    @property
    def identity(self) -> _Key:
        """What a store sums on: everything but the counts and times."""
        return (
            self.tenant_id,
            self.principal,
            self.client_id,
            self.software_name,
            self.software_version,
            self.api_key,
            self.api_version,
            self.served,
        )


class ClientVersions:
    """The broker's fold of its connections' counts until the next report."""

    def __init__(
        self, clock: Callable[[], float] = time.time, max_entries: int = MAX_ENTRIES
    ) -> None:
        self._clock = clock
        self._max = max_entries
        self._rows: dict[_Key, list[float]] = {}  # -> [requests, first seen, last seen]
        self.dropped = 0  # uses not kept because the fold was full

    def add(
        self,
        principal: Principal,
        software: tuple[str, str],
        counts: Mapping[tuple[str, int, int, bool], int],
        first_seen: float,
    ) -> None:
        """Fold one connection's counts ((client id, API, version, served) -> requests)
        in; ``first_seen`` is when the connection counted its first request."""
        if principal.internal or principal.broker or not counts:
            return  # Millrace's own clients and other brokers are not tenants' software
        now = self._clock()
        name = software[0][:MAX_SOFTWARE]
        version = software[1][:MAX_SOFTWARE]
        for (client_id, api_key, api_version, served), n in counts.items():
            key = (
                principal.tenant_id,
                principal.name,
                client_id[:MAX_CLIENT_ID],
                name,
                version,
                api_key,
                api_version,
                served,
            )
            row = self._rows.get(key)
            if row is not None:
                row[0] += n
                row[1] = min(row[1], first_seen)
                row[2] = now
            elif len(self._rows) < self._max:
                self._rows[key] = [n, first_seen, now]
            else:
                if not self.dropped:
                    logger.warning(
                        "client version report full (%s entries): uses left out until the "
                        "next report",
                        self._max,
                    )
                self.dropped += n

    def drain(self) -> list[ClientUse]:
        """Everything folded since the last drain, and start again."""
        rows, self._rows, self.dropped = self._rows, {}, 0
        return [
            ClientUse(*key[:7], served=key[7], requests=int(r[0]), first_seen=r[1], last_seen=r[2])
            for key, r in rows.items()
        ]

    def restore(self, uses: Iterable[ClientUse]) -> None:
        """Put back rows a report could not deliver (the store was down): folded in again,
        so the next report carries them (bounded like any other)."""
        for use in uses:
            key = use.identity
            row = self._rows.get(key)
            if row is not None:
                row[0] += use.requests
                row[1] = min(row[1], use.first_seen)
                row[2] = max(row[2], use.last_seen)
            elif len(self._rows) < self._max:
                self._rows[key] = [use.requests, use.first_seen, use.last_seen]
