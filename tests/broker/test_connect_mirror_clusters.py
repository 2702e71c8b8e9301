"""The mirror source between two clusters: a second, independent Millrace cluster (its
own broker process and metadata database, as ``make bench-*`` starts one) is the source;
the worker's cluster the target. A 3-partition topic with a committed and an aborted
transaction (so offsets differ) is copied record for record, and a group's committed
offsets arrive translated in the target, where a consumer of the group resumes after its
last record. tests/broker/test_connect_mirror.py covers the rest (bursts, restarts,
internal topics) between two tenants of one cluster."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from bench.common import sasl_broker
from bench.perf import create_topics
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_mirror import (
    CONSUMED,
    PARTITIONS,
    _check_translated,
    _content,
    _produce,
    _read_all,
)
from tests.broker.test_connect_standalone import Worker, _properties, _worker_config

pytestmark = pytest.mark.slow


def test_mirror_between_two_clusters_translates_group_offsets(kafka, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"millrace_mirror_src_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with sasl_broker(name, tmp_path / "source-cluster") as (_env, creds, port):
        source = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": creds["username"],
            "sasl.password": creds["password"],
        }
        target = confluent_conf(kafka, kafka.admin_a)
        topic = topic_name("xmirror")
        group = f"orders-{uuid.uuid4().hex[:6]}"
        source_admin, target_admin = AdminClient(source), AdminClient(target)
        create_topics(source_admin, [NewTopic(topic, PARTITIONS, 1)])
        # The topic does not exist in the target cluster: only its mirror will.
        assert topic not in target_admin.list_topics(timeout=10).topics

        producer = Producer(source | {"linger.ms": 5})
        _produce(producer, topic, 0, 30)
        assert producer.flush(20) == 0
        txn = Producer(source | {"transactional.id": f"x-{uuid.uuid4().hex[:6]}"})
        txn.init_transactions(20)
        txn.begin_transaction()
        _produce(txn, topic, 30, 15)
        txn.commit_transaction(20)
        txn.begin_transaction()
        _produce(txn, topic, 100, 6, prefix="aborted")
        txn.abort_transaction(20)
        _produce(producer, topic, 45, 15)
        assert producer.flush(20) == 0
        upstream = _read_all(source, topic, 60)
        committed = {p: upstream[p][CONSUMED[p] - 1][0] + 1 for p in range(PARTITIONS)}
        reader = Consumer(source | {"group.id": group, "enable.auto.commit": False})
        reader.commit(
            offsets=[TopicPartition(topic, p, committed[p]) for p in range(PARTITIONS)],
            asynchronous=False,
        )
        reader.close()

        worker_file = _properties(tmp_path / "worker.properties", _worker_config(kafka, tmp_path))
        connector = _properties(tmp_path / "mirror.properties", {
            "name": f"xmirror-{uuid.uuid4().hex[:6]}",
            "connector.class": "MirrorSourceConnector",
            "source.cluster.alias": "onprem",
            "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "source.cluster.bootstrap.servers": source["bootstrap.servers"],
            "source.cluster.security.protocol": "SASL_PLAINTEXT",
            "source.cluster.sasl.mechanism": "SCRAM-SHA-256",
            "source.cluster.sasl.username": creds["username"],
            "source.cluster.sasl.password": creds["password"],
            "emit.checkpoints.interval.seconds": "1",
            "sync.group.offsets.interval.seconds": "1",
            "refresh.topics.interval.seconds": "1",
        })  # fmt: skip
        worker = Worker(tmp_path, kafka.env, [worker_file, connector])
        try:
            mirrored = f"onprem.{topic}"
            downstream = _read_all(target, mirrored, 60)
            for p in range(PARTITIONS):
                assert _content(downstream[p]) == _content(upstream[p])
                assert [r[0] for r in downstream[p]] == list(range(20))  # no markers, gaps

            _check_translated(target, group, mirrored, upstream)
        finally:
            worker.stop()
