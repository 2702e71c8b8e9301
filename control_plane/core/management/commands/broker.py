"""``manage.py broker --id N``: one Kafka-protocol broker process (the data plane).

Serves the partitions assigned to it from ``<data dir>/broker-<id>``, registers with a
heartbeat lease, and shuts down gracefully on SIGTERM/SIGINT (stop accepting, finish
in-flight requests, flush and close logs, deregister).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from control_plane.core.broker_store import DjangoMetadataStore
from data_plane import internal_auth
from data_plane.broker.server import Broker, BrokerConfig
from data_plane.groups.coordinator import CoordinatorConfig


class Command(BaseCommand):
    help = "Run one Kafka-protocol broker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--id", type=int, default=1, dest="broker_id")
        parser.add_argument("--host", default=settings.MILLRACE_BROKER_HOST)
        parser.add_argument("--port", type=int, default=settings.MILLRACE_BROKER_PORT)
        parser.add_argument("--advertised-host", default=settings.MILLRACE_BROKER_ADVERTISED_HOST)
        parser.add_argument("--advertised-port", type=int, default=None)
        parser.add_argument("--rack", default=None)
        parser.add_argument("--data-dir", type=Path, default=None)
        parser.add_argument(
            "--allow-anonymous",
            action="store_true",
            default=settings.MILLRACE_BROKER_ALLOW_ANONYMOUS,
            help="also accept unauthenticated clients, as the 'default' tenant (development)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["allow_anonymous"] and settings.PRODUCTION:
            raise CommandError("the unauthenticated listener is not allowed in production")
        logging.basicConfig(level=settings.LOGGING["root"]["level"])
        data_dir = options["data_dir"] or settings.DATA_DIR / f"broker-{options['broker_id']}"
        config = BrokerConfig(
            broker_id=options["broker_id"],
            host=options["host"],
            port=options["port"],
            advertised_host=options["advertised_host"],
            advertised_port=options["advertised_port"],
            rack=options["rack"],
            data_dir=data_dir,
            allow_anonymous=options["allow_anonymous"],
            groups=CoordinatorConfig(
                min_session_timeout_ms=settings.MILLRACE_GROUP_MIN_SESSION_TIMEOUT_MS,
                max_session_timeout_ms=settings.MILLRACE_GROUP_MAX_SESSION_TIMEOUT_MS,
                initial_rebalance_delay_ms=settings.MILLRACE_GROUP_INITIAL_REBALANCE_DELAY_MS,
                max_group_size=settings.MILLRACE_GROUP_MAX_SIZE,
            ),
            heartbeat_seconds=settings.MILLRACE_BROKER_LEASE_SECONDS / 4,
            replica_lag_time_max_ms=settings.MILLRACE_REPLICA_LAG_TIME_MAX_MS,
            replica_fetch_wait_ms=settings.MILLRACE_REPLICA_FETCH_WAIT_MS,
            internal_password=internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
        )
        store = DjangoMetadataStore(allow_anonymous=options["allow_anonymous"])
        asyncio.run(self._serve(Broker(config, store)))

    async def _serve(self, broker: Broker) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await broker.start()
        self.stdout.write(
            f"broker {broker.config.broker_id} ready on {broker.config.host}:{broker.port}"
        )
        self.stdout.flush()
        await stop.wait()
        await broker.stop()
