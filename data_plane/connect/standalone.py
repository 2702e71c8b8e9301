"""A standalone worker: one process, connector configs from files, source offsets in a
local file (``offset.storage.file.filename``), as Kafka's ``connect-standalone``."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from data_plane.connect.config import ConfigException
from data_plane.connect.offsets import FileOffsetStore
from data_plane.connect.worker import Status, Worker

logger = logging.getLogger(__name__)


class StandaloneWorker:
    def __init__(
        self, worker_config: Mapping[str, str], connectors: Sequence[Mapping[str, str]]
    ) -> None:
        path = (worker_config.get("offset.storage.file.filename") or "").strip()
        if not path:
            raise ConfigException(
                "offset.storage.file.filename", "a standalone worker needs an offsets file"
            )
        names = [c.get("name", "") for c in connectors]
        if len(set(names)) != len(names):
            raise ConfigException("name", "two connector configs have the same name")
        self.offsets = FileOffsetStore(Path(path))
        self.worker = Worker(
            worker_config,
            self.offsets,
            worker_id=f"{socket.gethostname()}:standalone",
            on_status=self._report,
        )
        self.connectors = [dict(c) for c in connectors]

    @staticmethod
    def _report(connector: str, task: int, status: Status) -> None:
        if status.trace:
            logger.error("task %s-%d is %s: %s", connector, task, status.state.value, status.trace)
        else:
            logger.info("task %s-%d is %s", connector, task, status.state.value)

    def start(self) -> None:
        for config in self.connectors:
            self.worker.start_connector(config)
            logger.info("connector %s started", config["name"])

    def stop(self) -> None:
        """Stop every connector (their delivered offsets committed)."""
        self.worker.stop()
