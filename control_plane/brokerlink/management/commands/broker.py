"""``manage.py broker --id N``: one Kafka-protocol broker process (the data plane).

Serves the partitions assigned to it from ``<data dir>/broker-<id>``, registers with a
heartbeat lease, and shuts down gracefully on SIGTERM/SIGINT: a controlled shutdown that
first moves its leaderships to other in-sync replicas, then stop accepting, finish
in-flight requests, flush and close logs, deregister. Every flag defaults to a setting
(``MILLRACE_BROKER_*``, docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import logging
import re
import resource
import signal
import socket
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from control_plane.brokerlink.store import DjangoMetadataStore
from data_plane import internal_auth
from data_plane.broker.config import group_protocols
from data_plane.broker.server import Broker, BrokerConfig
from data_plane.groups.consumer_group import ConsumerConfig
from data_plane.groups.coordinator import CoordinatorConfig

logger = logging.getLogger("millrace.broker")


class Command(BaseCommand):
    help = "Run one Kafka-protocol broker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--id",
            default=settings.MILLRACE_BROKER_ID,
            dest="broker_id",
            help='a number, or "ordinal": the host name\'s last "-" number plus one',
        )
        parser.add_argument("--host", default=settings.MILLRACE_BROKER_HOST)
        parser.add_argument("--port", type=int, default=settings.MILLRACE_BROKER_PORT)
        parser.add_argument(
            "--advertised-host",
            default=settings.MILLRACE_BROKER_ADVERTISED_HOST,
            help="may contain {id}",
        )
        parser.add_argument(
            "--advertised-port",
            default=settings.MILLRACE_BROKER_ADVERTISED_PORT,
            help='a number, or "N+id"',
        )
        parser.add_argument("--metrics-host", default=settings.MILLRACE_BROKER_METRICS_HOST)
        parser.add_argument(
            "--metrics-port",
            default=settings.MILLRACE_BROKER_METRICS_PORT,
            help='/metrics, /healthz, /readyz; "off" for none, 0 for a free port',
        )
        parser.add_argument("--tls-port", default=settings.MILLRACE_BROKER_TLS_PORT)
        parser.add_argument("--tls-cert-file", default=settings.MILLRACE_BROKER_TLS_CERT_FILE)
        parser.add_argument("--tls-key-file", default=settings.MILLRACE_BROKER_TLS_KEY_FILE)
        parser.add_argument(
            "--tls-advertised-host", default=settings.MILLRACE_BROKER_TLS_ADVERTISED_HOST
        )
        parser.add_argument(
            "--tls-advertised-port", default=settings.MILLRACE_BROKER_TLS_ADVERTISED_PORT
        )
        parser.add_argument(
            "--controlled-shutdown-timeout",
            type=float,
            default=settings.MILLRACE_CONTROLLED_SHUTDOWN_TIMEOUT_SECONDS,
        )
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
        broker_id = broker_id_from(str(options["broker_id"]), socket.gethostname())
        data_dir = options["data_dir"] or settings.DATA_DIR / f"broker-{broker_id}"
        tls_port = _port("--tls-port", options["tls_port"])
        if tls_port is not None and not (options["tls_cert_file"] and options["tls_key_file"]):
            raise CommandError("--tls-port needs --tls-cert-file and --tls-key-file")
        config = BrokerConfig(
            broker_id=broker_id,
            default_partitions=settings.MILLRACE_DEFAULT_PARTITIONS,
            host=options["host"],
            port=options["port"],
            advertised_host=_with_id(options["advertised_host"], broker_id),
            advertised_port=port_for("--advertised-port", options["advertised_port"], broker_id),
            rack=options["rack"],
            metrics_host=options["metrics_host"],
            metrics_port=_port("--metrics-port", options["metrics_port"]),
            tls_port=tls_port,
            tls_cert_file=Path(options["tls_cert_file"]) if options["tls_cert_file"] else None,
            tls_key_file=Path(options["tls_key_file"]) if options["tls_key_file"] else None,
            tls_advertised_host=_with_id(options["tls_advertised_host"], broker_id),
            tls_advertised_port=port_for(
                "--tls-advertised-port", options["tls_advertised_port"], broker_id
            ),
            controlled_shutdown_timeout_seconds=options["controlled_shutdown_timeout"],
            data_dir=data_dir,
            allow_anonymous=options["allow_anonymous"],
            groups=CoordinatorConfig(
                min_session_timeout_ms=settings.MILLRACE_GROUP_MIN_SESSION_TIMEOUT_MS,
                max_session_timeout_ms=settings.MILLRACE_GROUP_MAX_SESSION_TIMEOUT_MS,
                initial_rebalance_delay_ms=settings.MILLRACE_GROUP_INITIAL_REBALANCE_DELAY_MS,
                max_group_size=settings.MILLRACE_GROUP_MAX_SIZE,
            ),
            group_protocols=group_protocols(settings.MILLRACE_GROUP_PROTOCOLS),
            consumer_groups=ConsumerConfig(
                heartbeat_interval_ms=settings.MILLRACE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
                session_timeout_ms=settings.MILLRACE_GROUP_CONSUMER_SESSION_TIMEOUT_MS,
                max_size=settings.MILLRACE_GROUP_MAX_SIZE,
            ),
            heartbeat_seconds=settings.MILLRACE_BROKER_LEASE_SECONDS / 4,
            replica_lag_time_max_ms=settings.MILLRACE_REPLICA_LAG_TIME_MAX_MS,
            replica_fetch_wait_ms=settings.MILLRACE_REPLICA_FETCH_WAIT_MS,
            internal_password=internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
            scram_iterations=settings.MILLRACE_SCRAM_ITERATIONS,
            auth_timeout_seconds=settings.MILLRACE_BROKER_AUTH_TIMEOUT_MS / 1000,
            failed_auth_max_delay_seconds=settings.MILLRACE_BROKER_FAILED_AUTH_MAX_DELAY_MS / 1000,
            idle_timeout_seconds=settings.MILLRACE_BROKER_CONNECTIONS_MAX_IDLE_MS / 1000,
            max_connections_per_ip=settings.MILLRACE_BROKER_MAX_CONNECTIONS_PER_IP,
            queued_max_request_bytes=settings.MILLRACE_BROKER_QUEUED_MAX_REQUEST_BYTES,
            max_connections_per_tenant=settings.MILLRACE_BROKER_MAX_CONNECTIONS_PER_TENANT,
            client_report_seconds=settings.MILLRACE_BROKER_CLIENT_REPORT_SECONDS,
            metering=settings.MILLRACE_BROKER_METERING,
            usage_report_seconds=settings.MILLRACE_BROKER_USAGE_REPORT_SECONDS,
            transaction_max_timeout_ms=settings.MILLRACE_TRANSACTION_MAX_TIMEOUT_MS,
            transaction_abort_check_seconds=(
                settings.MILLRACE_TRANSACTION_ABORT_CHECK_INTERVAL_MS / 1000
            ),
            transaction_version=settings.MILLRACE_TRANSACTION_VERSION,
        )
        store = DjangoMetadataStore(allow_anonymous=options["allow_anonymous"])
        raise_open_files_limit()
        asyncio.run(self._serve(Broker(config, store)))

    async def _serve(self, broker: Broker) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await broker.start()
        extras = []
        if broker.tls_port is not None:
            extras.append(f"TLS on {broker.tls_port}")
        if broker.metrics_port is not None:
            extras.append(f"metrics on {broker.metrics_port}")
        self.stdout.write(
            f"broker {broker.config.broker_id} ready on {broker.config.host}:{broker.port}"
            + (f" ({', '.join(extras)})" if extras else "")
        )
        self.stdout.flush()
        await stop.wait()
        await broker.stop()


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit, and log it.

    Every partition replica whose log is open holds three descriptors (the active
    segment, and its two index maps), and clients hold one each. Returns the limit now
    in force (docs/deploy.md: what to set it to)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open files limit from %s: %s", soft, exc)
    logger.info("open files limit %s (about %s open partition replicas)", soft, soft // 3)
    return soft


def broker_id_from(value: str, hostname: str) -> int:
    """``--id``: a positive number, or "ordinal" (a StatefulSet pod's index plus one)."""
    if value == "ordinal":
        found = re.search(r"-(\d+)$", hostname.split(".")[0])
        if found is None:
            raise CommandError(f'--id ordinal: host name {hostname!r} does not end in "-<number>"')
        return int(found.group(1)) + 1
    if not value.isdigit() or int(value) < 1:
        raise CommandError(f'--id must be a positive number or "ordinal", not {value!r}')
    return int(value)


def port_for(flag: str, value: str | None, broker_id: int) -> int | None:
    """A port given as a number, or as "N+id" (N plus the broker id)."""
    if value is None or value == "":
        return None
    found = re.fullmatch(r"(\d+)(\+id)?", value.strip())
    if found is None:
        raise CommandError(f'{flag} must be a number or "N+id", not {value!r}')
    port = int(found.group(1)) + (broker_id if found.group(2) else 0)
    if not 0 < port < 65536:
        raise CommandError(f"{flag}: {port} is not a TCP port")
    return port


def _port(flag: str, value: str | None) -> int | None:
    """A port to listen on: None (or "off") for none, 0 for a free one."""
    if value is None or value.strip().lower() in ("", "off"):
        return None
    if not value.strip().isdigit() or int(value) > 65535:
        raise CommandError(f'{flag} must be a TCP port, 0 or "off", not {value!r}')
    return int(value)


def _with_id(host: str | None, broker_id: int) -> str | None:
    return host.replace("{id}", str(broker_id)) if host else host
