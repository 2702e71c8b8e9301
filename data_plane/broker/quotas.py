"""Byte-rate quotas with Kafka's throttle semantics: per tenant and direction, and per
client-quota entity (KIP-546, ``data_plane.client_quotas``) within a tenant.

Each bucket (a tenant and direction, or a tenant, direction and resolved client-quota
entity) has a virtual clock (GCRA): every byte advances it by
``1 / rate`` seconds; a client may run up to ``burst_seconds`` ahead of real time, and
beyond that the answer is a throttle time in ms. The broker returns it as
``throttle_time_ms`` and holds the response that long, as Kafka does, so well-behaved and
misbehaving clients alike slow down to the quota.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable


class ByteRateQuotas:
    def __init__(
        self, *, burst_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst_seconds = burst_seconds
        self.clock = clock
        self._tat: dict[Hashable, float] = {}
        # Client ids are the client's choice, so buckets are pruned: a bucket whose clock
        # is behind real time holds nothing (a new one would start the same).
        self.prune_above = 10_000

    def record(self, tenant_id: int, direction: str, nbytes: int, rate: int) -> int:
        """Account ``nbytes`` to the tenant; return how long (ms) to throttle, 0 when
        within quota."""
        return self.record_bucket((tenant_id, direction), nbytes, rate)

    def record_bucket(self, key: Hashable, nbytes: int, rate: float) -> int:
        """Account ``nbytes`` to any bucket (e.g. a tenant's client-quota entity)."""
        if rate <= 0 or nbytes <= 0:
            return 0
        now = self.clock()
        tat = max(self._tat.get(key, now), now) + nbytes / rate
        self._tat[key] = tat
        if len(self._tat) > self.prune_above:
            self._tat = {k: t for k, t in self._tat.items() if t > now}
        ahead = tat - now - self.burst_seconds
        return int(ahead * 1000) if ahead > 0 else 0
