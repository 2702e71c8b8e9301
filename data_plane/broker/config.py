"""A broker's settings (``manage.py broker`` builds them from the environment)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_plane.groups.consumer_group import ConsumerConfig
from data_plane.groups.coordinator import CoordinatorConfig
from data_plane.replication.manager import ReplicationConfig


@dataclass
class BrokerConfig:
    broker_id: int = 1
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    rack: str | None = None
    data_dir: Path = Path("data/broker-1")
    allow_anonymous: bool = False
    max_request_bytes: int = 100 * 2**20
    metadata_refresh_seconds: float = 1.0
    # A whole snapshot now and then, whatever the version says (writes that bypassed the
    # services); deltas otherwise.
    metadata_full_refresh_seconds: float | None = 300.0
    heartbeat_seconds: float = 2.0
    default_partitions: int = 1
    revocation_check_seconds: float = 1.0
    maintenance_seconds: float = 30.0
    # How often the client software and request versions seen are reported to the store.
    client_report_seconds: float = 60.0
    # Usage metering (``usage.py``): on, and how often the counts are reported.
    metering: bool = True
    usage_report_seconds: float = 60.0
    # Transactions (Kafka's transaction.max.timeout.ms and
    # transaction.abort.timed.out.transaction.cleanup.interval.ms).
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_check_seconds: float = 10.0
    # The finalized transaction.version feature (2: transactions V2, KIP-890 part 2).
    transaction_version: int = 2
    extra_log_settings: dict[str, Any] = field(default_factory=dict)
    groups: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    # Kafka's group.coordinator.rebalance.protocols: "consumer" serves KIP-848 groups.
    group_protocols: frozenset[str] = frozenset({"classic", "consumer"})
    consumer_groups: ConsumerConfig = field(default_factory=ConsumerConfig)
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_ms: int = 500
    # What this broker proves to the others when it fetches from them (internal_auth).
    internal_password: str = field(default="", repr=False)
    # /metrics, /healthz, /readyz (None: no HTTP endpoint; 0: any free port).
    metrics_host: str | None = None
    metrics_port: int | None = None
    # The SASL_SSL listener (None: none). PEM certificate chain and key.
    tls_port: int | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_advertised_host: str | None = None
    tls_advertised_port: int | None = None
    # How long a SIGTERM waits for the controller to move this broker's leaderships.
    controlled_shutdown_timeout_seconds: float = 30.0
    # Connection limits. A connection must finish SASL within auth_timeout_seconds (Kafka
    # closes unauthenticated ones after about 10 s); any connection that sends nothing
    # for idle_timeout_seconds is closed (Kafka's connections.max.idle.ms, 10 min); one
    # address may hold max_connections_per_ip (Kafka's max.connections.per.ip) and one
    # tenant max_connections_per_tenant. 0 turns a limit off.
    # SCRAM iteration count of new keys: unknown users are answered with the same one.
    scram_iterations: int = 4096
    auth_timeout_seconds: float = 10.0
    failed_auth_max_delay_seconds: float = 5.0  # the back-off's ceiling (limits.py)
    # Bytes of requests in flight on this broker, all connections together (Kafka's
    # queued.max.request.bytes; limits.MemoryPool).
    queued_max_request_bytes: int = 500 * 2**20
    idle_timeout_seconds: float = 600.0
    max_connections_per_ip: int = 1000
    max_connections_per_tenant: int = 10_000

    def replication(self) -> ReplicationConfig:
        return ReplicationConfig(
            broker_id=self.broker_id,
            data_dir=self.data_dir,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            replica_fetch_wait_ms=self.replica_fetch_wait_ms,
            internal_password=self.internal_password,
        )


PROTOCOLS = ("classic", "consumer")


def group_protocols(names: list[str]) -> frozenset[str]:
    """The rebalance protocols named in a setting; "classic" is always served."""
    chosen = {n.strip().lower() for n in names if n.strip()}
    unknown = chosen - set(PROTOCOLS)
    if unknown:
        raise ValueError(
            f"unknown group protocol(s) {', '.join(sorted(unknown))}: "
            f"choose from {', '.join(PROTOCOLS)}"
        )
    return frozenset(chosen | {"classic"})
