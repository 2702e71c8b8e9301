"""A broker's operations surface against real clients: Prometheus counters that move with
produce and fetch, the health endpoints, and the SASL_SSL listener with a self-signed CA
(confluent-kafka as the client)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from bench import perf
from tests.broker.conftest import _brokers, confluent_conf, free_port
from tests.broker.test_clients import topic_name

pytestmark = pytest.mark.django_db


def make_ca_and_certificate(directory: Path, name: str = "ca") -> dict[str, Path]:
    """A self-signed CA and a server certificate it signed for 127.0.0.1 and localhost."""
    paths = {k: directory / f"{name}-{k}.pem" for k in ("ca", "ca-key", "cert", "key", "csr")}
    ext = directory / f"{name}-ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN=Millrace test CA {name}",
        "-keyout", str(paths["ca-key"]), "-out", str(paths["ca"]),
    )  # fmt: skip
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", str(paths["key"]), "-out", str(paths["csr"]),
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", str(paths["csr"]), "-days", "2",
        "-CA", str(paths["ca"]), "-CAkey", str(paths["ca-key"]), "-CAcreateserial",
        "-extfile", str(ext), "-out", str(paths["cert"]),
    )  # fmt: skip
    return paths


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    return directory, make_ca_and_certificate(directory)


@pytest.fixture(scope="module")
def broker(django_db_setup, django_db_blocker, tmp_path_factory, tls_dir):
    _, pem = tls_dir
    tls_port = free_port()
    extra = {
        "MILLRACE_BROKER_TLS_PORT": str(tls_port),
        "MILLRACE_BROKER_TLS_CERT_FILE": str(pem["cert"]),
        "MILLRACE_BROKER_TLS_KEY_FILE": str(pem["key"]),
    }
    for envs in _brokers(django_db_blocker, tmp_path_factory, 1, extra):
        envs[0].tls_port = tls_port  # type: ignore[attr-defined]
        yield envs[0]


def tls_conf(env, key, ca: Path, **extra):
    return confluent_conf(
        env,
        key,
        **{
            "bootstrap.servers": f"127.0.0.1:{env.tls_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca),
            **extra,
        },
    )


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of a Prometheus text exposition."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            found[series] = float(value)
    return found


def value(text: str, name: str, **labels: str) -> float:
    """The sample of ``name`` with exactly these labels (0 if absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for series, v in samples(text).items():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?", series)
        if m is None or m.group(1) != name:
            continue
        got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
        if got == wanted:
            return v
    return 0.0


def metrics(env) -> str:
    status, body = env.http("/metrics")
    assert status == 200
    return body


def produce_and_consume(conf: dict, name: str, count: int) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(count):
        producer.produce(
            name,
            value=b"v%05d" % i,
            partition=0,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and errors == []
    consumer = Consumer({**conf, "group.id": f"g-{name}", "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    got: list[bytes] = []
    for _ in range(200):
        if len(got) >= count:
            break
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def create(conf: dict, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    perf.create_topics(AdminClient(conf), [NewTopic(name, 1, 1)])


def test_health_endpoints_answer(broker):
    assert broker.http("/healthz") == (200, "ok\n")
    assert broker.http("/readyz") == (200, "ready\n")
    status, body = broker.http("/nope")
    assert status == 404 and "/metrics" in body


def test_traffic_counters_move_with_produce_and_fetch(broker):
    conf = confluent_conf(broker, broker.admin_a)
    name = topic_name("metered")
    create(conf, name)
    labels = {"tenant": broker.tenant_a, "topic": name}
    before = metrics(broker)
    got = produce_and_consume(conf, name, 50)
    assert len(got) == 50
    from confluent_kafka import Producer

    # A client connected while scraping: the ones above are closed by now, and whether the
    # broker has noticed yet would make the open-connections gauge a race.
    held = Producer(conf)
    held.list_topics(timeout=10)
    after = metrics(broker)

    def moved(metric: str, **extra: str) -> float:
        return value(after, metric, **extra) - value(before, metric, **extra)

    assert moved("millrace_broker_records_in_total", **labels) == 50
    assert moved("millrace_broker_bytes_in_total", **labels) > 50 * 6  # batches with headers
    assert moved("millrace_broker_records_out_total", **labels) == 50
    assert moved("millrace_broker_bytes_out_total", **labels) > 50 * 6
    assert moved("millrace_broker_requests_total", api="Produce") >= 1
    assert moved("millrace_broker_requests_total", api="Fetch") >= 1
    assert moved("millrace_broker_request_duration_seconds_count", api="Produce") >= 1
    assert value(after, "millrace_broker_log_size_bytes", **labels) > 0
    assert value(after, "millrace_broker_leader_partitions") >= 1
    assert value(after, "millrace_broker_connections") >= 1
    assert value(after, "millrace_broker_info", broker_id="1") == 1
    # The other tenant's topic is counted under its own labels only.
    assert value(after, "millrace_broker_records_in_total", tenant=broker.tenant_b, topic=name) == 0
    del held


def test_a_failed_sign_in_and_an_unknown_topic_are_counted(broker):
    from confluent_kafka import Producer

    before = metrics(broker)
    wrong = confluent_conf(broker, broker.admin_a)
    wrong["sasl.password"] = "not-the-secret"
    producer = Producer({**wrong, "message.timeout.ms": 1500})
    producer.produce("whatever", b"x")
    producer.flush(5)
    after = metrics(broker)
    failures = "millrace_broker_authentication_failures_total"
    assert value(after, failures, mechanism="SCRAM-SHA-256") > value(
        before, failures, mechanism="SCRAM-SHA-256"
    )


def test_sasl_ssl_listener_with_a_self_signed_ca(broker, tls_dir):
    pem = tls_dir[1]
    conf = tls_conf(broker, broker.admin_a, pem["ca"])
    name = topic_name("tls")
    create(conf, name)
    before = metrics(broker)
    # Metadata over TLS names the TLS listener: librdkafka connects there for produce and
    # fetch, and a plain-listener address would fail the TLS handshake.
    assert produce_and_consume(conf, name, 20) == [b"v%05d" % i for i in range(20)]
    after = metrics(broker)
    created = "millrace_broker_connections_created_total"
    assert value(after, created, listener="tls") > value(before, created, listener="tls")


def test_kcat_over_sasl_ssl(broker, tls_dir):
    """Debian's kcat (librdkafka 2.0.2) produces and consumes on the TLS listener."""
    pem = tls_dir[1]
    name = topic_name("tls-kcat")
    create(tls_conf(broker, broker.admin_a, pem["ca"]), name)
    common = [
        "kcat",
        "-b",
        f"127.0.0.1:{broker.tls_port}",
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        "sasl.mechanism=SCRAM-SHA-512",
        "-X",
        f"sasl.username={broker.admin_a.key_id}",
        "-X",
        f"sasl.password={broker.admin_a.secret}",
        "-X",
        f"ssl.ca.location={pem['ca']}",
        "-t",
        name,
    ]
    lines = "".join(f"line-{i}\n" for i in range(10))
    subprocess.run([*common, "-P"], input=lines.encode(), check=True, timeout=60)
    out = subprocess.run(
        [*common, "-C", "-o", "beginning", "-e", "-q"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.decode() == lines


def test_tls_listener_refuses_clients_that_do_not_trust_its_ca(broker, tmp_path):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    other = make_ca_and_certificate(tmp_path, "other")
    admin = AdminClient(tls_conf(broker, broker.admin_a, other["ca"]))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    # Plaintext spoken to the TLS port gets nowhere either.
    plain = confluent_conf(broker, broker.admin_a)
    plain["bootstrap.servers"] = f"127.0.0.1:{broker.tls_port}"
    with pytest.raises(KafkaException):
        AdminClient(plain).list_topics(timeout=3)
