"""The Kafka APIs a signed-in client may call, one module per API area.

Each module lists what it serves in ``HANDLERS`` (keyed by its message definitions'
``KEY``); :data:`DISPATCH` is their union. A handler takes the request's
:class:`~data_plane.broker.handlers.context.RequestContext` and the decoded request body
and returns the response body (None for a produce with acks=0). ApiVersions and SASL are
the connection's own (``data_plane.broker.connection``).
"""

from __future__ import annotations

from data_plane.broker.handlers import (
    acls,
    client_quotas,
    cluster,
    configs,
    consumer_groups,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    topics,
    transactions,
)
from data_plane.broker.handlers.context import Handler


def _dispatch() -> dict[int, Handler]:
    table: dict[int, Handler] = {}
    for module in (
        produce,
        fetch,
        offsets,
        metadata,
        topics,
        configs,
        acls,
        cluster,
        groups,
        consumer_groups,
        client_quotas,
        transactions,
    ):
        for key, handler in module.HANDLERS.items():
            if key in table:
                raise RuntimeError(f"API key {key} is served twice ({module.__name__})")
            table[key] = handler
    return table


DISPATCH: dict[int, Handler] = _dispatch()
