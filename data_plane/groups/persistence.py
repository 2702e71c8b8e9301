"""Storing a group's record, coalesced: classic and consumer-protocol groups alike.

Every change bumps the group's ``version``; one writer task per group stores the record
as it is when it runs, again while changes keep coming, so a burst of changes costs one
or two writes, never a queue of them. Whoever must not answer before a change is stored
(a new generation, epoch or assignment) waits with :func:`wait_persisted`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from data_plane.groups.model import GroupRecord

logger = logging.getLogger("millrace.groups")

WRITE_ATTEMPTS = 5


class StoredGroup(Protocol):
    group_id: str
    version: int  # bumped by every change to persist
    persisted: int  # the version last stored
    writer: asyncio.Task[None] | None

    def record(self) -> GroupRecord: ...


async def write_group(
    group: StoredGroup,
    save: Callable[[GroupRecord], Awaitable[None]],
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Store ``group`` until its stored version catches up with its version; a failing
    store is retried with a growing pause, and given up after :data:`WRITE_ATTEMPTS`
    failures (the next change starts a writer again)."""
    failures = 0
    while group.persisted < group.version:
        version = group.version
        try:
            await save(group.record())
        except Exception:
            failures += 1
            logger.exception("storing group %s failed", group.group_id)
            if failures >= WRITE_ATTEMPTS:
                return
            await sleep(0.5 * failures)
            continue
        group.persisted = max(group.persisted, version)


async def wait_persisted(group: StoredGroup, changed: Callable[[StoredGroup], None]) -> bool:
    """Wait until the group as it is now is stored; False if the store keeps failing.
    ``changed`` starts a writer when none is running."""
    target = group.version
    for _ in range(3):
        if group.persisted >= target:
            return True
        if group.writer is None or group.writer.done():
            changed(group)
        assert group.writer is not None
        await asyncio.shield(group.writer)
    return group.persisted >= target
