"""A broker's own life in the metadata store (registration, heartbeat lease, controlled
shutdown) and the controller questions it asks: AlterPartition, producer-id blocks, and
placing partitions created before enough brokers were up.

Registering and deregistering change the broker list every broker sees, so they are
recorded in the change log (``notify_metadata_changed``); a heartbeat only renews the
lease (brokers re-read the live list on every refresh: a lapsed lease commits nothing).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from control_plane.brokerlink.connections import fresh_connection
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker, BrokerState, ProducerIdBlock
from control_plane.controller import services as controller_services
from control_plane.core.liveness import LivenessLock
from control_plane.core.notify import notify_metadata_changed


class DjangoBrokerRegistry:
    """:class:`data_plane.broker.ports.BrokerRegistry` over the ``Broker`` rows and the
    controller's services."""

    def __init__(self, *, dev_listener: bool = False) -> None:
        self.dev_listener = dev_listener
        self._liveness = LivenessLock()

    def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None,
        tls_host: str | None = None,
        tls_port: int | None = None,
    ) -> None:
        fresh_connection()
        held = self._liveness.ensure(broker_id)  # before the row says so (liveness.py)
        with transaction.atomic():
            Broker.objects.update_or_create(
                id=broker_id,
                defaults={
                    "host": host,
                    "port": port,
                    "rack": rack or "",
                    "tls_host": tls_host or "",
                    "tls_port": tls_port,
                    "dev_listener": self.dev_listener,
                    "state": BrokerState.RUNNING,
                    "last_heartbeat": timezone.now(),
                    "liveness_lock": held,
                },
            )
            notify_metadata_changed("broker.registered", brokers=[broker_id])

    def heartbeat(self, broker_id: int, metadata_version: int = 0) -> None:
        fresh_connection()
        held = self._liveness.ensure(broker_id)
        Broker.objects.filter(id=broker_id).update(
            last_heartbeat=timezone.now(),
            state=BrokerState.RUNNING,
            liveness_lock=held,
            metadata_version=metadata_version,
        )

    def controlled_shutdown(self, broker_id: int) -> int:
        fresh_connection()
        return controller_services.controlled_shutdown(broker_id)

    def deregister_broker(self, broker_id: int) -> None:
        fresh_connection()
        with transaction.atomic():
            Broker.objects.filter(id=broker_id).update(state=BrokerState.SHUTTING_DOWN)
            notify_metadata_changed("broker.deregistered", brokers=[broker_id])
        self._liveness.release()

    def allocate_producer_ids(self, count: int) -> int:
        fresh_connection()
        with transaction.atomic():
            block, _ = ProducerIdBlock.objects.select_for_update().get_or_create(pk=1)
            first = block.next_id
            block.next_id = first + count
            block.save(update_fields=["next_id"])
        return first

    def alter_partition(
        self,
        topic_id: str,
        index: int,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
    ) -> tuple[int, int, int, tuple[int, ...]]:
        fresh_connection()
        result = controller_services.alter_partition(
            topic_id,
            index,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            new_isr=isr,
        )
        return result.error, result.leader_epoch, result.partition_epoch, result.isr

    def assign_unassigned_partitions(self) -> int:
        """Place partitions created before enough brokers were up, over the live brokers."""
        fresh_connection()
        with transaction.atomic():
            return catalog_services.assign_unassigned_partitions()
