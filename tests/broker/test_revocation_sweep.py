"""The revocation sweep closes a connection only when metadata read after the connection
authenticated lacks its key: a key newer than the broker's snapshot is not "revoked".

(Under ``manage.py up`` on SQLite, metadata is re-read about once a second; a client that
signed in with a key made a moment earlier was cut off as revoked by the older snapshot.)
"""

from __future__ import annotations

import asyncio
import dataclasses

from data_plane.broker.server import Broker, BrokerConfig
from data_plane.metadata.model import MetadataSnapshot, Principal


@dataclasses.dataclass(eq=False)
class FakeConnection:
    principal: Principal
    authenticated_at: float
    aborted: bool = False

    def abort(self) -> None:
        self.aborted = True


def sweep_once(broker: Broker) -> None:
    async def run() -> None:
        task = asyncio.ensure_future(broker._sweep_revoked())
        await asyncio.sleep(broker.config.revocation_check_seconds * 3)
        task.cancel()

    asyncio.run(run())


def test_only_metadata_read_after_sign_in_can_revoke(tmp_path):
    broker = Broker(BrokerConfig(data_dir=tmp_path, revocation_check_seconds=0.01), object())  # type: ignore[arg-type]
    broker.snapshot = MetadataSnapshot(active_keys=frozenset({"MRKOLD"}))
    broker.snapshot_read_at = 100.0
    newer = FakeConnection(Principal(1, "acme", "User:app", "MRKNEW"), authenticated_at=101.0)
    revoked = FakeConnection(Principal(1, "acme", "User:app", "MRKGONE"), authenticated_at=99.0)
    kept = FakeConnection(Principal(1, "acme", "User:app", "MRKOLD"), authenticated_at=50.0)
    broker._connections.update([newer, revoked, kept])  # type: ignore[list-item]
    sweep_once(broker)
    assert not newer.aborted  # its key is newer than the snapshot
    assert revoked.aborted  # the snapshot was read after it signed in, without its key
    assert not kept.aborted
    # Once metadata read after its sign-in lacks the key, it goes too.
    broker.snapshot_read_at = 102.0
    sweep_once(broker)
    assert newer.aborted
