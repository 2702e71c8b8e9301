"""A standalone worker: one process, connector configs from files, source offsets in a
local file (``offset.storage.file.filename``), as Kafka's ``connect-standalone``."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from data_plane.connect.config import ConfigException
from data_plane.connect.offsets import FileOffsetStore
from data_plane.connect.tasks import Status
from data_plane.connect.worker import Worker

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
        what = f"task {connector}-{task}" if task >= 0 else f"connector {connector}"
        if status.trace:
            logger.error("%s is %s: %s", what, status.state.value, status.trace)
        else:
            logger.info("%s is %s", what, status.state.value)

    def start(self) -> None:
        for config in self.connectors:
            for task_id, task_config in enumerate(self.worker.start_connector(config)):
                self.worker.start_task(config["name"], task_id, config, task_config)
            logger.info("connector %s started", config["name"])

    def stop(self) -> None:
        """Stop every connector (their delivered offsets committed)."""
        self.worker.stop()
