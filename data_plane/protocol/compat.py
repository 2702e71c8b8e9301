"""Generate docs/compatibility.md from the schemas: ``python -m data_plane.protocol.compat``.

``--check`` exits non-zero if the file on disk differs (CI keeps it in sync).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_plane.protocol.messages import APIS

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"

# The lowest version Kafka 4 serves, for APIs where it is above 0: KIP-896 removed the
# versions Kafka 2.1 and older clients send. Millrace serves what Kafka 3.9 served (Step
# 12b), so an older client keeps working here. Checked against kafka-python's classes,
# which are generated from Kafka 4's message definitions (tests/protocol/test_requests.py).
KAFKA4_MIN_VERSION = {
    0: 3,  # Produce
    1: 4,  # Fetch
    2: 1,  # ListOffsets
    8: 2,  # OffsetCommit
    9: 1,  # OffsetFetch
    19: 2,  # CreateTopics
    20: 1,  # DeleteTopics
    23: 2,  # OffsetForLeaderEpoch
    29: 1,  # DescribeAcls
    30: 1,  # CreateAcls
    31: 1,  # DeleteAcls
    32: 1,  # DescribeConfigs
    35: 1,  # DescribeLogDirs
}

HEADER = """# Kafka protocol compatibility

Generated from `data_plane/protocol/messages` by `python -m data_plane.protocol.compat`;
do not edit by hand. A client and the broker use the highest version both support
(negotiated with ApiVersions). "Flexible from" is the first version with compact encodings
and tagged fields.

"Kafka 4 from" is the lowest version Kafka 4 serves where it dropped older ones (KIP-896);
Millrace serves the versions Kafka 3.9 served, so clients that still send them keep
working.

| API | key | versions | flexible from | Kafka 4 from |
| --- | --- | --- | --- | --- |
"""

FOOTER = """
## Requests outside these ranges

- **ApiVersions** at a version the broker does not know is answered as Kafka does: a v0
  response with `UNSUPPORTED_VERSION` (35) and the supported ranges, so the client retries
  at a version both sides know.
- **Any other unknown API key or version** gets response header v0 (the correlation id),
  then int16 `error_code` 35 and an empty int32 array. After authentication the connection
  stays open (the request was well framed, only not served); before authentication the
  connection is closed after the answer. Clients that negotiate with ApiVersions never see it.
  Every such request is counted in
  `millrace_broker_unserved_requests_total{api, version}`, and each connection says so
  once per API and version in the broker's log at INFO, with its client id, address and
  tenant: who must upgrade. Each tenant's console page Client versions (and the API's
  `client-versions/`) lists the client software and request versions its applications
  use, with the versions refused here and those Kafka 4 refuses marked.
- **Produce v0-2** carry message formats v0 and v1 (clients older than Kafka 0.11). Each
  partition's message set is up-converted to one RecordBatch v2, as Kafka's log validator
  does: the log assigns the offsets, keys and values are kept, v1's timestamps are kept
  (a wrapper in log append time gives its own to every record), v0's messages get no
  timestamp (-1), and the producer's codec (gzip, snappy, lz4) is kept. A message set
  with a bad CRC, a bad length or a nested compressed message is refused whole with
  `CORRUPT_MESSAGE` (2). Conversions are counted in
  `millrace_broker_format_conversions_total{direction="up"}`. LZ4 in format v0 is read as
  Kafka 0.8 and 0.9 clients wrote it, with the frame's header checksum taken over the
  magic number too (KAFKA-3160; Kafka's brokers ignore it for magic 0): the checksum is
  put right before decoding, so such frames and standard ones both decode.
- **Fetch v0-3** answer in message format v0 (v0-1) or v1 (v2-3), down-converted from the
  stored batches as Kafka's down-conversion does: one uncompressed message per record at
  its absolute offset, none below the offset asked for (a fetch may start inside a
  batch), v1 with the record's timestamp (or the batch's, flagged, in log append time),
  record headers dropped (the old formats have none), control batches left out. The
  conversion holds at most what the fetch asked for in memory, and is counted in
  `millrace_broker_format_conversions_total{direction="down"}`. What it costs: Sarama
  reading format v1 gets about a third of what it reads from record batches, and the
  broker alone sends 8-14% of its zero-copy rate down-converted
  ([performance.md](performance.md#old-clients-message-format-conversion-step-12b)).
- **Frames** over `max_request_bytes` (or 512 KiB before authentication) and malformed
  frames close only their connection, with a log line.

## Answers worth knowing

- **SaslHandshake v0** (clients before Kafka 1.0, KIP-152) is followed by the SASL
  tokens as bare length-prefixed frames, answered the same way (empty for PLAIN); a
  failure closes the connection, as Kafka 3.9 did. v1 uses SaslAuthenticate.
- **Versions Kafka 4 dropped** answer as Kafka 3.9 did. ListOffsets v0 returns
  `old_style_offsets`: each segment's first offset paired with its file's last change,
  and the log end paired with now; from the last pair at or before the timestamp (-1: the
  log end, -2: the log start), up to `max_num_offsets` offsets, newest first, any past
  the high watermark replaced by it. OffsetCommit v0 (no generation or member) commits
  from outside the group, into the group's offsets (Kafka 3.9 kept v0 commits in
  ZooKeeper); v1's `commit_timestamp` is not used: offsets are stamped with the broker's
  time, like every other version's. OffsetFetch v0 reads the group's offsets like v1.
  ACL requests v0 know literal patterns only: a v0 filter matches literal bindings, a v0
  creation is literal.
  DescribeConfigs v0 says `is_default` instead of `config_source`. CreateTopics v0 has no
  `validate_only`; DeleteTopics v0 and OffsetForLeaderEpoch v0-1 differ from the next
  version only in fields the answer leaves out.

- **Auto-creation** (Metadata with `allow_auto_topic_creation`) of a name Kafka would
  refuse (characters outside `[a-zA-Z0-9._-]`, over 249 characters, `.`/`..`, a leading
  `__`) answers `INVALID_TOPIC_EXCEPTION` (17), so a producer fails at once instead of
  retrying until its message timeout. A refused creation (a tenant limit, say) answers
  the refusal's code and is logged.
- **Compacted topics** (`cleanup.policy` with `compact`) refuse a batch holding a record
  without a key: `INVALID_RECORD` (87), with the record's index in `record_errors`
  (Produce v8+). Nothing of the batch is stored; the next batch is accepted.
- **Authorized operations** (KIP-430): Metadata (`include_topic_authorized_operations`,
  and `include_cluster_authorized_operations` in v8-10), DescribeCluster and DescribeGroups
  (v3+) answer, when asked, the operations the caller's ACLs allow as Kafka's bit field
  (topics: Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs;
  groups: Read, Delete, Describe; the cluster: Create, Alter, Describe, DescribeConfigs,
  AlterConfigs, IdempotentWrite), and Kafka's "not asked" value otherwise.
- **DescribeLogDirs** is tenant-relative: one logical directory, `/millrace/<tenant>`
  (never the broker's path), holding only the tenant's partitions on that broker;
  `total_bytes` is the tenant's storage limit and `usable_bytes` what is left of it there
  (not the disk's totals).
- **Replica assignments** in CreateTopics and CreatePartitions are refused for tenants
  with `POLICY_VIOLATION` (44) and a message saying that Millrace places replicas
  (evenly, racks apart). An operator's principal (`manage.py operator_credentials <staff
  user> <tenant>`, see docs/deploy.md) may place them, as in Kafka: the assignment gives
  the partition count and replication factor (sending those too is `INVALID_REQUEST`),
  names partitions 0..n-1 once each, no broker twice in a partition, the same number of
  replicas everywhere, and only live brokers that are not being decommissioned
  (`INVALID_REPLICA_ASSIGNMENT` (39) with the reason otherwise). Operators also move
  replicas with the REST reassignment API (`/api/v1/cluster/reassignments/`) or
  AlterPartitionReassignments (below).
- **DeleteRecords**: offset -1 means "up to the high watermark"; any other negative offset
  answers `OFFSET_OUT_OF_RANGE` (1).
- **Fetch** v13+ names topics by id. An id that is unknown, of a deleted topic (a
  recreated topic has a new id) or of another tenant's topic answers `UNKNOWN_TOPIC_ID`
  (100), alike; then `TOPIC_AUTHORIZATION_FAILED` (29) without Read. From v16 a partition
  answered `NOT_LEADER_OR_FOLLOWER` (6) or `FENCED_LEADER_EPOCH` (74) carries
  `current_leader`, and `node_endpoints` lists those leaders at the addresses of the
  listener the client used (KIP-951). v17's `replica_directory_id` is ignored (KRaft
  voters only). There are no fetch sessions: every answer has `session_id` 0, so clients
  keep sending full fetches (librdkafka 2.16 fetches at v16).
- **ListOffsets** special timestamps, as Kafka answers a topic without tiered storage:
  -1 latest (the high watermark), -2 earliest (the log start), -3 the first record with
  the largest timestamp (v7+, KIP-734), -4 earliest local (v8+, KIP-405: the log start,
  the whole log being local), -5 latest tiered (v9+, KIP-1005: offset -1, nothing is
  tiered). Any other negative timestamp, or one below its version, answers
  `UNSUPPORTED_VERSION` (35) for its partition. From v4 the answer's `leader_epoch` is
  Kafka's: the leader's current epoch for latest, the log's first epoch for earliest, the
  found batch's epoch for a timestamp. A new leader whose high watermark is still behind
  the start of its epoch answers latest, and a timestamp found nowhere below it,
  `OFFSET_NOT_AVAILABLE` (78, retriable), as Kafka does. v10's `timeout_ms` (KIP-1075,
  for remote reads) is accepted; nothing waits.
- **Metadata** v0 with an empty topic list lists every topic (v0 cannot send null); from
  v1 an empty list asks for none and null for all. v13's top-level `error_code`
  (KIP-1102) is always `NONE`: nothing here calls for `REBOOTSTRAP_REQUIRED`.
- **DescribeCluster** v2's `include_fenced_brokers` (KIP-1073) adds the registered
  brokers that are not live (fenced by the controller, stopped, or with a lapsed lease)
  with `is_fenced` true; live brokers are never fenced.
- **ApiVersions** advertises one feature, `transaction.version` (Kafka 4's):
  finalized at `MILLRACE_TRANSACTION_VERSION` (2 by default: transactions V2) from v3,
  and supported 0-2 from v4 only, since a feature with a minimum version 0 is left out
  below v4 (KAFKA-17011).
- **FindCoordinator** key type 2 (share groups, KIP-932): there are no share groups, so
  it answers as Kafka without a share coordinator: `INVALID_REQUEST` (42) below v6 and
  to brokers, `CLUSTER_AUTHORIZATION_FAILED` (31) to tenants from v6 (Kafka checks
  ClusterAction first). An unknown key type answers `INVALID_REQUEST`.
- **Produce** v10 (KIP-951): a partition answered `NOT_LEADER_OR_FOLLOWER` (6) carries
  `current_leader`, and `node_endpoints` lists those leaders at the addresses of the
  listener the client used, as Fetch v16 does, so a producer moves without a Metadata
  round trip. v11 (KIP-890 part 1): a transactional batch whose partition is not in its
  producer's transaction in progress is answered `TRANSACTION_ABORTABLE` (120; before v11
  `INVALID_TXN_STATE`, 48), and one whose transaction is being completed
  `NOT_ENOUGH_REPLICAS` (19, retriable), as Kafka's leaders answer after verification.
  v12 is transactions V2: the leader adds the partition to the producer's transaction
  (see Transactions below).
- **DescribeGroups** v6 (KIP-1043): a group that does not exist answers
  `GROUP_ID_NOT_FOUND` (69), "Group <id> not found.", still Dead with no members (before
  v6 it is an empty Dead group without an error, as in Kafka); every error a group is
  answered with carries an `error_message` from v6.
- **Metadata** v10+ topics asked for by id alone (KIP-848 consumers learn their
  assignments as ids) answer like topics asked for by name, or `UNKNOWN_TOPIC_ID` (100)
  for an id of no topic of the caller's tenant, and `TOPIC_AUTHORIZATION_FAILED` (29)
  without a name when the caller may not describe it.
- **ConsumerGroupHeartbeat** and **ConsumerGroupDescribe** (KIP-848): the consumer group
  protocol (`group.protocol=consumer` in librdkafka 2.12+ and the Java client), as Kafka
  4.1 serves it: client-generated member ids (v1), member epochs, static members,
  regular-expression subscriptions evaluated on the broker (v1; Python's `re` in
  full-match mode where Kafka uses RE2/J, the common syntax being the same, over the
  tenant's topics the member may describe), server-side assignors `uniform` (the default)
  and `range`, incremental reconciliation, and the heartbeat interval and session timeout
  set by the broker (`MILLRACE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS`, 5000, and
  `..._SESSION_TIMEOUT_MS`, 45000). A topic named in a subscription that the member may
  not describe answers `TOPIC_AUTHORIZATION_FAILED` (29). Brokers started with
  `MILLRACE_GROUP_PROTOCOLS=classic` (Kafka's `group.coordinator.rebalance.protocols`)
  neither advertise nor serve them (`UNSUPPORTED_VERSION` (35)).
- **Online upgrade and downgrade** (Kafka 4.0's bidirectional migration): a
  consumer-protocol member joining a classic group of protocol type `consumer` turns it
  into a consumer group with the classic members in it (their JoinGroup answered at once
  with their member epoch as the generation, no leader; SyncGroup with the coordinator's
  assignment; Heartbeat `REBALANCE_IN_PROGRESS` (27) when they must rejoin), and when the
  last consumer-protocol member leaves, the group is classic again and rebalances. A
  classic group of another protocol type (Connect, say) is not upgraded
  (`GROUP_ID_NOT_FOUND` (69) to the heartbeat); DescribeGroups answers a consumer group as
  Kafka does, `GROUP_ID_NOT_FOUND` from v6 (Dead before), and ConsumerGroupDescribe a
  classic group the same way.
- **OffsetCommit** v9 and **OffsetFetch** v9: a consumer-protocol member's commits and
  fetches are checked against its member epoch (`STALE_MEMBER_EPOCH` (113)), and it must
  commit with v9 or later (`UNSUPPORTED_VERSION` (35) below, as in Kafka).
- **DescribeTopicPartitions** (KIP-966) pages through the tenant's topics as Kafka does:
  named topics (none: every topic the caller may describe) from the cursor on, by name,
  at most `response_partition_limit` partitions (capped at 2000); a cursor topic missing
  from the named ones or a negative cursor partition answers `INVALID_REQUEST` (42) for
  each topic. Names the caller may not describe answer `TOPIC_AUTHORIZATION_FAILED` (29)
  whether or not they exist; eligible leader replicas are not kept (both ELR lists null).
- **DescribeProducers** answers, from the partition leader's log, the idempotent producers
  it remembers (id, epoch, last sequence, the newest batch's max timestamp;
  `coordinator_epoch` and `current_txn_start_offset` -1: no transactions). As in Kafka a
  topic is checked for a valid name, then Read (`TOPIC_AUTHORIZATION_FAILED`), then
  existence in the tenant (`UNKNOWN_TOPIC_OR_PARTITION`), with Kafka's messages; a
  partition this broker does not lead answers `NOT_LEADER_OR_FOLLOWER` (6).
- **DescribeClientQuotas** and **AlterClientQuotas** (KIP-546) work on the caller's
  tenant's quotas only: `user` names are the tenant's service accounts (another tenant's
  are simply not there), `client-id`s are the tenant's clients, a null name is the
  default entity. Kafka's authorizer rules apply on the tenant's cluster resource:
  DescribeConfigs to describe, AlterConfigs to alter, else `CLUSTER_AUTHORIZATION_FAILED`
  (31); an operator's principal acts in its tenant. Describe's exact, default and any
  matches and `strict` are Kafka's. `producer_byte_rate` and `consumer_byte_rate` are
  served and enforced (Kafka's user/client-id precedence, on top of the tenant's own
  byte rates); a value above the tenant's limit answers `POLICY_VIOLATION` (44) naming
  the limit. `request_percentage`, `controller_mutation_rate`, unknown keys, the `ip`
  entity and unknown entity types answer `INVALID_REQUEST` (42) for that entry (Millrace
  does not enforce them, so it does not store them).
- **ElectLeaders** is for operators (their principal acts in one tenant, over its topics;
  null `topic_partitions` is every partition of that tenant): a tenant's key is answered
  `CLUSTER_AUTHORIZATION_FAILED` (31), top-level from v1 and for every partition asked.
  As Kafka's controller: preferred (type 0) answers `ELECTION_NOT_NEEDED` (84) where the
  first replica leads, `PREFERRED_LEADER_NOT_AVAILABLE` (80) where it is not live and in
  sync; unclean (type 1) elects only where no live replica leads, an in-sync one first,
  else any live one whatever `unclean.leader.election.enable` says (KIP-460; audited),
  else `ELIGIBLE_LEADERS_NOT_AVAILABLE` (83).
- **AlterPartitionReassignments** and **ListPartitionReassignments** (KIP-455) are for
  operators too (a tenant's key: `CLUSTER_AUTHORIZATION_FAILED` (31), top-level), over the
  tenant's topics, and start, cancel (null replicas) and list the controller's
  reassignments (the new replicas copy the log; the controller switches once they are in
  sync). Unlike Kafka, the target must keep the topic's replication factor, name live
  brokers (or current replicas), and a partition already moving must be cancelled before
  it gets another target: `INVALID_REPLICA_ASSIGNMENT` (39) and `REASSIGNMENT_IN_PROGRESS`
  (60) otherwise; cancelling where nothing moves is `NO_REASSIGNMENT_IN_PROGRESS` (85).
- **DeleteTopics** v6 by topic id: an id that is unknown, of a deleted topic or of another
  tenant's topic answers `UNKNOWN_TOPIC_ID` (100) with a null name, as Kafka does; an entry
  with neither name nor id is `INVALID_REQUEST` (42).
- **Fetch** v4+ at `isolation_level` 1 (read_committed, librdkafka's default) reads up to
  the partition's last stable offset and returns the aborted transactions overlapping
  what it read; at 0 it reads up to the high watermark with `aborted_transactions` null.
  ListOffsets v2+ at read_committed answers LATEST with the last stable offset. Without
  transactions in a partition the two are the same.
- **Transactions** (KIP-98) are served: FindCoordinator key type 1, InitProducerId with
  a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
  WriteTxnMarkers (brokers only), DescribeTransactions and ListTransactions, and
  transactions V2 (KIP-890 part 2, with `transaction.version` finalized at 2): EndTxn v5
  bumps the producer epoch with every decision, writes the markers at the new epoch and
  answers the producer id and epoch of the next transaction (a new producer id at epoch
  0 once the epoch runs out; retries at the old epoch answered as Kafka answers them);
  Produce v12's leader adds the partition of a producer's first batch to its transaction
  and TxnOffsetCommit v5's group coordinator adds the group, so the client sends neither
  AddPartitionsToTxn nor AddOffsetsToTxn. Between brokers these adds are
  AddPartitionsToTxn v5 (brokers only, `verify_only` false) and AddOffsetsToTxn, with a
  transactional id named `<tenant>/<id>` and topics by id; a coordinator still writing
  the previous transaction's markers is asked again every 20 ms for 100 ms, as Kafka's
  leaders do. Transactions V2 is tested over raw sockets as Kafka 4's Java client speaks
  it (no client in the test suite implements it). A Produce with transactional batches
  needs the request's transactional id with Write on it (else
  `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, 53), and before v12 the producer's first batch
  in a partition in each transaction is checked against the coordinator's stored state
  (KIP-890 part 1): a partition not in a transaction in progress is refused with
  `TRANSACTION_ABORTABLE` (120, Produce v11) or `INVALID_TXN_STATE` (48, before v11),
  another epoch with `INVALID_PRODUCER_EPOCH` (47), and nothing is stored. A control
  batch from a client is refused with `INVALID_RECORD` (87), as Kafka refuses it: only
  markers from a transaction coordinator are written. OffsetFetch v7+ with
  `require_stable` answers `UNSTABLE_OFFSET_COMMIT` (88) for a partition whose offsets a
  transaction not yet decided holds.

## Clients tested

Real clients against real broker processes on loopback; every claim below is a test in
`tests/` (files under `tests/broker/` unless a folder is given). Versions as installed in
the test environment, checked on 2026-11-26.

| Client | Version | Scenarios | Tests |
| --- | --- | --- | --- |
"""


# The clients the suite drives against real brokers: (client, version, scenarios, tests).
# Versions are literal (checked on the date the section gives), so the doc is the same
# on every machine; update them with the test environment.
CLIENTS: tuple[tuple[str, str, str, str], ...] = (
    (
        "confluent-kafka (Python)",
        "2.16.1 on librdkafka 2.16.0",
        (
            "produce with every codec (none, gzip, snappy, lz4, zstd), idempotent, "
            "acks=all and acks=1; consume by assign; groups with range, roundrobin and "
            "cooperative-sticky: rebalance on join/leave/kill, at-least-once across "
            "rebalances, commits that survive a broker restart; admin: create/delete "
            "topics, create partitions, describe/alter/incremental-alter configs, offsets"
            " by time, describe groups and cluster, elect leaders, operator replica "
            "placement; SCRAM-SHA-256/512, wrong secrets refused; SASL_SSL with a "
            "self-signed CA; kill -9 failover, chaos (kill -9, pause, restart, network "
            "cuts); transactions: commit and abort across topics and partitions read at "
            "both isolation levels, `send_offsets_to_transaction`, a zombie fenced, a "
            "timed-out transaction aborted, a broker killed inside a transaction, a key "
            "without Write on the transactional id refused; a producer over its principal's "
            "client quota sees `throttle_cb` (client quotas themselves are set over raw "
            "sockets: neither client's admin API has the calls); `group.protocol=consumer` "
            "(KIP-848): join, clean leave, kill -9, commits with member epochs, static "
            "members, a regex subscription picking up a topic created later, "
            "describe/list groups by type, and an online upgrade from a cooperative-sticky "
            "classic group and back with nothing lost"
        ),
        (
            "test_clients.py, test_lifecycle.py, test_groups.py, "
            "test_groups_at_least_once.py, test_admin_offsets.py, "
            "test_client_suite_findings.py, test_fetch_topic_ids.py, "
            "test_elect_leaders.py, test_operator_principal.py, test_operations.py, "
            "test_replication.py, test_bench_replication.py, test_chaos.py, "
            "test_client_quotas.py, test_consumer_protocol.py, test_transactions.py"
        ),
    ),
    (
        "kafka-python",
        "3.0.12",
        (
            "produce with every codec, idempotent (its default); consume by assign; a "
            "group subscribes and commits; admin: describe/alter configs, offsets by "
            "time, DescribeTopicPartitions, DescribeProducers, "
            "Alter/ListPartitionReassignments, DescribeLogDirs, operator replica "
            "placement (a tenant's refused); SCRAM-SHA-256, PLAIN; kill -9 failover; "
            "a transactional producer (commit and abort) and a read_committed consumer"
        ),
        (
            "test_clients.py, test_groups.py, test_admin_offsets.py, "
            "test_admin_describe.py, test_partition_reassignments.py, "
            "test_describe_log_dirs.py, test_operator_principal.py, "
            "test_bench_replication.py, test_transactions.py"
        ),
    ),
    (
        "kafka-python, `api_version` pinned",
        "3.0.12 at (0, 10) and (1, 0)",
        (
            "create a topic (at 0.10 the client itself refuses CreateTopics, which came "
            "with 0.10.1: created pinned at 0.10.1, CreateTopics v0), list topics, produce "
            "(0.10: Produce v2 in message format v1), consume in a group with commits "
            "(Fetch v2 down-converted to format v1, JoinGroup v0, OffsetCommit v2, "
            "OffsetFetch v1), committed offsets and records read back with confluent-kafka;"
            " SASL/PLAIN (bare tokens after SaslHandshake v0 at 0.10)"
        ),
        "test_kafka_python_pinned.py",
    ),
    (
        "aiokafka",
        "0.14.0",
        (
            "produce with every codec; consume by assign; a group subscribes and commits;"
            " admin: describe/alter configs, offsets by time; SCRAM-SHA-256/512; kill -9 "
            "failover; a transactional producer with offsets sent to the transaction "
            "(commit and abort)"
        ),
        (
            "test_clients.py, test_groups.py, test_admin_offsets.py, "
            "test_bench_replication.py, test_transactions.py"
        ),
    ),
    (
        "kcat (Debian)",
        "1.7.1 on librdkafka 2.0.2",
        (
            "produce (`-P`) and consume (`-C`) with every codec; offsets (`-Q`), by time "
            "too; PLAIN, SCRAM-SHA-256/512; SASL_SSL with a self-signed CA"
        ),
        "test_clients.py, test_admin_offsets.py, test_operations.py",
    ),
    (
        "Sarama (Debian's golang-github-shopify-sarama-dev)",
        "1.22.1, Go 1.19",
        (
            "pinned at Kafka 0.10.2 (Produce v2, Fetch v3: format v1), 0.11, 1.0 and its "
            "highest (2.2): create a topic, produce (acks=all), list topics (DescribeConfigs "
            "v0, from 0.11), consume in a group with commits (OffsetCommit v1-2), read the "
            "committed offsets; SASL/PLAIN (bare tokens after SaslHandshake v0 below 1.0). "
            "At its default (Kafka 0.8.2), 0.9 and 0.10.0, which have no admin client and "
            "no groups in Sarama: list topics (Metadata v0, empty list = all), produce "
            "(Produce v0-2: formats v0/v1), partition consumers from the oldest offset "
            "(ListOffsets v0, Fetch v0-2 down-converted), an offset manager's commits "
            "(FindCoordinator v0, OffsetCommit v1 with no member, OffsetFetch v1), records"
            " and commits read back with confluent-kafka"
        ),
        "test_sarama.py",
    ),
    (
        "Spark, `millrace` data source",
        "pyspark 4.3.0 (on the internal client)",
        (
            "batch read (subscribe, offsets and timestamps bound a read), checkpointed "
            "streaming read that restarts where it stopped, batch and streaming writes "
            "(keys, headers, partitions), a wrong secret, a missing ACL or another "
            "tenant's topic fails clearly; refused writes say why"
        ),
        "tests/spark/test_batch.py, test_stream.py, test_write.py, test_example.py",
    ),
    (
        "Millrace internal client (`data_plane.client`)",
        "this tree (millrace 0.1.0)",
        (
            "list offsets (earliest, latest, by time), DescribeLogDirs; the internal "
            "principal (SCRAM-SHA-512) reads only and needs the secret"
        ),
        "test_internal_client.py, test_describe_log_dirs.py",
    ),
)

CLIENT_NOTES = """
librdkafka 2.16 fetches at Fetch v16 (see Fetch above) and, with `group.protocol=consumer`,
heartbeats at ConsumerGroupHeartbeat v1 (client-generated member ids) and looks its assigned
topic ids up with Metadata requests by topic id. No other client in the matrix speaks the
KIP-848 protocol, so the in-process tests (`tests/groups/test_consumer_group.py`,
`tests/broker_unit/test_consumer_group_handlers.py`) and the schema cross-check against kio
(Kafka's JSON definitions) are its second opinion.
Older clients whose request versions Kafka 4 dropped (Step 12b): every API serves Kafka
3.9's ranges, Produce v0-2 and Fetch v0-3 converting between the old message formats and
record batches (the "Kafka 4 from" column above shows what Kafka 4 refuses). Sarama at
its default version and kafka-python pinned at 0.10 are the clients in the matrix that
send them.

librdkafka before 2.6.1 (kcat's 2.0.2 among them) sends a SCRAM client-final nonce with
its own nonce prepended once more. The broker accepts exactly that form, as Kafka 3.x did
(Kafka 4 refuses it); the proof still covers the message as sent.
"""


def render() -> str:
    rows = []
    for api in sorted(APIS.values(), key=lambda a: a.key):
        lo, _ = api.request.flexible
        flexible = f"v{lo}" if lo >= 0 and lo <= api.max_version else "—"
        kafka4 = KAFKA4_MIN_VERSION.get(api.key, 0)
        dropped = f"v{kafka4}" if kafka4 > api.min_version else "—"
        rows.append(
            f"| {api.name} | {api.key} | {api.min_version}-{api.max_version} | {flexible} "
            f"| {dropped} |"
        )
    clients = [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in CLIENTS]
    return HEADER + "\n".join(rows) + "\n" + FOOTER + "\n".join(clients) + "\n" + CLIENT_NOTES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the doc is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(
                f"{DOC} is out of date: run python -m data_plane.protocol.compat", file=sys.stderr
            )
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
