"""The APIs Millrace speaks: one module per API, each defining ``REQUEST`` and ``RESPONSE``.

:data:`APIS` maps an API key to its :class:`Api`; ``docs/compatibility.md`` is generated from
it (``python -m data_plane.protocol.compat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from data_plane.protocol.messages import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from data_plane.protocol.schema import Message


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    request: Message
    response: Message
    # The versions served: the message's whole range unless its module says ``SERVED``
    # (versions defined for the schema's sake but not answered, as EndTxn v5 until
    # transactions V2 are served).
    served: tuple[int, int | None]

    @property
    def min_version(self) -> int:
        return self.served[0]

    @property
    def max_version(self) -> int:
        hi = self.served[1]
        assert hi is not None, f"{self.name} needs a bounded version range"
        return hi


def _api(module: ModuleType) -> Api:
    request: Message = module.REQUEST
    response: Message = module.RESPONSE
    assert request.api_key == response.api_key and request.valid == response.valid
    served: tuple[int, int | None] = getattr(module, "SERVED", request.valid)
    return Api(request.api_key, request.name, request, response, served)


_MODULES = (
    produce,
    fetch,
    list_offsets,
    metadata,
    sasl_handshake,
    api_versions,
    create_topics,
    delete_topics,
    delete_records,
    describe_acls,
    create_acls,
    delete_acls,
    describe_configs,
    describe_log_dirs,
    sasl_authenticate,
    create_partitions,
    incremental_alter_configs,
    describe_cluster,
    init_producer_id,
    alter_configs,
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    list_groups,
    describe_groups,
    delete_groups,
    elect_leaders,
    alter_partition_reassignments,
    list_partition_reassignments,
    offset_delete,
    offset_for_leader_epoch,
    describe_topic_partitions,
    describe_client_quotas,
    alter_client_quotas,
    describe_producers,
    consumer_group_heartbeat,
    consumer_group_describe,
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    write_txn_markers,
    txn_offset_commit,
    describe_transactions,
    list_transactions,
)

APIS: dict[int, Api] = {api.key: api for api in (_api(m) for m in _MODULES)}
