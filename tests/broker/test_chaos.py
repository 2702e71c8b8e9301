"""Fault injection under load (Step 5): kill -9, pause, restart and network cuts of one
broker at a time while a producer writes with acks=all; then a full read and the checker
(see ``tests/broker/harness.py``).

Three brokers behind one proxy each, a topic with replication factor 3,
min.insync.replicas 2 and 3 partitions. ``CHAOS_FAULTS`` sets the number of faults
(default 8, the CI run: every kind at least once); ``CHAOS_SEED`` the schedule (default:
a fresh one, printed, and named in any failure). ``make chaos`` is the long run.
"""

from __future__ import annotations

import json
import os
import random
import signal

import pytest

from bench import perf
from tests.broker.conftest import _brokers, confluent_conf
from tests.broker.eos_harness import (
    Attempt,
    check_exactly_once,
    eos_schedule,
    run_exactly_once,
)
from tests.broker.harness import KINDS, Network, Outcome, check, make_schedule, run_chaos
from tests.broker.test_clients import topic_name

pytestmark = pytest.mark.django_db
LEASE_S = 4
BROKERS = 3
PARTITIONS = 3
SHORT_FAULTS = 8


@pytest.fixture(scope="module")
def chaos(django_db_setup, django_db_blocker, tmp_path_factory):
    network = Network()
    proxies = [network.proxy(i) for i in range(1, BROKERS + 1)]
    extra = {
        "MILLRACE_REPLICA_LAG_TIME_MAX_MS": "2000",
        "MILLRACE_REPLICA_FETCH_WAIT_MS": "100",
        "MILLRACE_BROKER_LEASE_SECONDS": str(LEASE_S),
        "MILLRACE_TRANSACTION_ABORT_CHECK_INTERVAL_MS": "1000",
    }
    ports = [p.port for p in proxies]
    try:
        for cluster in _brokers(django_db_blocker, tmp_path_factory, BROKERS, extra, ports):
            for proxy, env in zip(proxies, cluster, strict=True):
                proxy.upstream_port = env.port
            try:
                yield cluster, network
            finally:
                network.heal_all()
                for env in cluster:  # a paused broker would not hear SIGTERM
                    if env.process is not None and env.process.poll() is None:
                        env.process.send_signal(signal.SIGCONT)
    finally:
        network.close()


def create_topic(cluster, name):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_conf(cluster[0], cluster[0].admin_a))
    new = NewTopic(name, PARTITIONS, BROKERS, config={"min.insync.replicas": "2"})
    perf.create_topics(admin, [new])


def test_no_acknowledged_write_is_lost_under_faults(chaos, settings):
    settings.MILLRACE_BROKER_LEASE_SECONDS = LEASE_S  # the in-test controller agrees
    cluster, network = chaos
    count = int(os.environ.get("CHAOS_FAULTS") or SHORT_FAULTS)
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1_000_000))
    # The CI run keeps each fault within 5 s so that it ends within 90 s.
    longest = 6.0 if count > SHORT_FAULTS else 5.0
    faults = make_schedule(seed, count, BROKERS, PARTITIONS, max_seconds=longest)
    print(f"\nchaos: CHAOS_SEED={seed} CHAOS_FAULTS={count}")
    name = topic_name("chaos")
    create_topic(cluster, name)
    report, explanation = run_chaos(cluster, network, name, PARTITIONS, faults, seed=seed)
    print(json.dumps(report.summary, sort_keys=True))
    assert not report.violations, explanation
    assert report.summary["acked"] > 0
    if count >= len(KINDS):
        assert set(report.summary["faults_by_kind"]) == set(KINDS)


def test_exactly_once_under_faults(chaos, settings):
    """A consume-transform-produce job in transactions while the transaction
    coordinator, the group coordinator and partition leaders fail (see
    ``tests/broker/eos_harness.py``)."""
    settings.MILLRACE_BROKER_LEASE_SECONDS = LEASE_S
    cluster, network = chaos
    count = int(os.environ.get("CHAOS_FAULTS") or SHORT_FAULTS)
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1_000_000))
    longest = 6.0 if count > SHORT_FAULTS else 5.0
    faults = eos_schedule(seed, count, BROKERS, PARTITIONS, max_seconds=longest)
    print(f"\neos: CHAOS_SEED={seed} CHAOS_FAULTS={count}")
    source, sink = topic_name("eos-in"), topic_name("eos-out")
    create_topic(cluster, source)
    create_topic(cluster, sink)
    report, explanation = run_exactly_once(
        cluster, network, source, sink, PARTITIONS, faults, seed=seed
    )
    print(json.dumps(report.summary, sort_keys=True))
    assert not report.violations, explanation
    assert report.summary["transactions"].get("committed", 0) > 0
    assert report.summary["source_records"] > 0


def test_the_exactly_once_checker_finds_each_kind_of_violation():
    source = {0: [(0, None), (1, None), (2, None), (3, None)], 1: [(0, None)]}
    attempts = {
        1: Attempt(1, [(0, 0), (0, 1)], 0.0, "committed"),
        2: Attempt(2, [(0, 2), (0, 3)], 1.0, "aborted"),  # yet visible
        3: Attempt(3, [(0, 2), (0, 3)], 2.0, "committed"),  # 0@3 copied twice
        4: Attempt(4, [(1, 0), (0, 3)], 3.0, "committed"),  # only 0@3 visible
    }
    sink = {
        0: [
            *[(0, (0, 0, 1)), (1, (0, 1, 1)), (3, (0, 2, 2))],
            *[(5, (0, 2, 3)), (6, (0, 3, 3)), (8, (0, 3, 4))],
        ],
        1: [(1, None)],  # not a copy of anything
    }
    committed = {0: 4, 1: 0}  # partition 1's source record was never committed
    seen = [(0, 5, (0, 2, 3), 1.0), (0, 4, (0, 9, 9), 1.0)]  # the second is not in the log
    report = check_exactly_once(source, sink, sink, attempts, committed, seen)
    found = sorted({v.what.split(":")[0].split(" (")[0] for v in report.violations})
    assert found == [
        "a committed transaction is partly visible",
        "a sink record that copies no source record",
        "aborted output visible to read_committed",
        "duplicated",
        "lost",
        "out of source order in the sink",
        "read at read_committed during the faults, not in the final view",
        "the group's committed offset is not the end of the source",
    ], found
    assert report.summary["duplicated"] == 2
    assert report.summary["lost"] == 1


def test_a_hung_client_call_is_abandoned_and_the_job_restarts(monkeypatch):
    """The job's watchdog (librdkafka #5456): a call still running past its timeout is
    abandoned with its producer, which is kept, and the caller is told to restart."""
    import threading

    from tests.broker import eos_harness

    monkeypatch.setattr(eos_harness, "HUNG_AFTER_S", 0.1)
    job = eos_harness.ExactlyOnceJob({}, "in", "out", eos_harness.Clock())
    release = threading.Event()
    producer = object()

    def hangs(timeout):
        release.wait(10)

    with pytest.raises(eos_harness._Hung):
        job._call(producer, hangs, 0.1)
    assert job.abandoned == [producer]
    release.set()
    assert job._call(producer, lambda timeout: "done", 1) == "done"
    with pytest.raises(KeyError):
        job._call(producer, lambda timeout: {}["missing"], 1)  # errors reach the caller


def test_the_checker_finds_each_kind_of_violation():
    outcomes = {
        0: Outcome(0, 0.0, 0.1, acked_partition=0, offset=0),
        1: Outcome(0, 0.2, 0.3, acked_partition=0, offset=1),  # 99 took its place
        2: Outcome(0, 0.4, 0.5, error="_MSG_TIMED_OUT"),  # failed, yet written
        3: Outcome(0, 0.6, 0.7, acked_partition=0, offset=2),  # written twice (a retry)
        4: Outcome(1, 0.0, 0.1, acked_partition=1, offset=1),
        5: Outcome(1, 0.5, 0.6, acked_partition=1, offset=0),  # sent after 4's ack, before it
    }
    final = {0: [(0, 0), (1, 99), (2, 3), (3, 3), (4, 2)], 1: [(0, 5), (1, 4)]}
    seen = [(0, 0, 0, 1.0), (0, 1, 1, 1.0)]  # a read of a record the log no longer holds
    report = check(outcomes, final, seen, partitions=2)
    found = sorted(v.what.split(":")[0] for v in report.violations)
    assert found == [
        "a consumer read a record that is not in the final log at that offset",
        "a record that was never sent",
        "acknowledged before this value was sent, yet at a later offset",
        "lost",
    ], found
    assert report.summary["duplicates"] == 1
    assert report.summary["indeterminate_landed"] == 1
    assert report.summary["lost"] == 1
    assert report.summary["failed"] == 1
