"""Ready-to-copy client settings for this deployment: kcat, confluent-kafka (Python), Java
client properties, Spark options, REST (curl) and a WebSocket URL.

The Kafka addresses are the live brokers' own (as they registered): the TLS listener
(SASL_SSL) when the brokers have one, else the plain one (SASL_PLAINTEXT). Every snippet
authenticates with an API key over SCRAM-SHA-256 — never over the development listener,
which takes no credentials and only exists under ``manage.py up``. With a key and secret
(the page that shows a new key's secret once) the snippets are complete; without (a
topic's page) they hold ``<API key id>`` and ``<API secret>`` for the reader to fill in.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest

from control_plane.catalog.models import Broker

MECHANISM = "SCRAM-SHA-256"
KEY_PLACEHOLDER = "<API key id>"
SECRET_PLACEHOLDER = "<API secret>"
TOPIC_PLACEHOLDER = "<topic>"
CA_PLACEHOLDER = "<path to the deployment's CA certificate>"


@dataclass(frozen=True)
class Snippet:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Listener:
    bootstrap: str  # host:port,host:port (empty: no broker has registered)
    protocol: str  # SASL_PLAINTEXT or SASL_SSL
    plain: str  # the plain (SASL_PLAINTEXT) listeners, for the Spark source (no TLS option)

    @property
    def tls(self) -> bool:
        return self.protocol == "SASL_SSL"


def listener() -> Listener:
    """Where clients with an API key connect: the live brokers (any registered if none is
    live), over TLS when the brokers have a TLS listener."""
    brokers = list(Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).order_by("id"))
    if not brokers:
        brokers = list(Broker.objects.order_by("id"))
    plain = ",".join(f"{b.host}:{b.port}" for b in brokers)
    tls = [b for b in brokers if b.tls_host and b.tls_port]
    if tls:
        return Listener(",".join(f"{b.tls_host}:{b.tls_port}" for b in tls), "SASL_SSL", plain)
    return Listener(plain, "SASL_PLAINTEXT", plain)


def client_snippets(
    request: HttpRequest,
    tenant_slug: str,
    *,
    topic: str | None = None,
    key_id: str | None = None,
    secret: str | None = None,
) -> tuple[Listener, list[Snippet]]:
    where = listener()
    bootstrap = where.bootstrap or "<bootstrap servers>"
    user = key_id or KEY_PLACEHOLDER
    password = secret or SECRET_PLACEHOLDER
    name = topic or TOPIC_PLACEHOLDER
    base = request.build_absolute_uri("/").rstrip("/")
    ws_base = ("wss://" if base.startswith("https://") else "ws://") + base.split("://", 1)[1]
    q = shlex.quote

    kcat_conf = [
        "-b",
        bootstrap,
        "-X",
        f"security.protocol={where.protocol}",
        "-X",
        f"sasl.mechanisms={MECHANISM}",
        "-X",
        f"sasl.username={user}",
        "-X",
        f"sasl.password={password}",
    ]
    if where.tls:
        kcat_conf += ["-X", f"ssl.ca.location={CA_PLACEHOLDER}"]
    kcat = " ".join(q(a) for a in ["kcat", *kcat_conf])
    kcat_text = (
        f"# the brokers and the topics this key may see\n{kcat} -L\n"
        f"# produce lines typed on stdin (Ctrl-D ends)\n{kcat} -t {q(name)} -P\n"
        f"# read the topic from the start, then exit\n{kcat} -t {q(name)} -C -o beginning -e\n"
    )

    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": where.protocol,
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
    }
    if where.tls:
        conf["ssl.ca.location"] = CA_PLACEHOLDER
    conf_text = json.dumps(conf, indent=4)
    if topic:
        python_body = (
            f"producer = Producer(conf)\n"
            f'producer.produce({json.dumps(topic)}, key=b"hello", value=b"first record")\n'
            'assert producer.flush(30) == 0, "not delivered"\n'
            'print("delivered")\n'
        )
    else:
        python_body = (
            "producer = Producer(conf)\n"
            "# the topics this key may see\n"
            "print(sorted(producer.list_topics(timeout=10).topics))\n"
            f'# producer.produce("{TOPIC_PLACEHOLDER}", b"hello"); producer.flush(30)\n'
        )
    python_text = (
        "# pip install confluent-kafka\n"
        "from confluent_kafka import Producer\n\n"
        f"conf = {conf_text}\n{python_body}"
    )

    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )
    java_text = (
        f"bootstrap.servers={bootstrap}\n"
        f"security.protocol={where.protocol}\n"
        f"sasl.mechanism={MECHANISM}\n"
        f"sasl.jaas.config={jaas}\n"
    )
    if where.tls:
        java_text += f"ssl.truststore.location={CA_PLACEHOLDER}\nssl.truststore.type=PEM\n"

    spark_text = (
        "df = (\n"
        '    spark.read.format("millrace")\n'
        f'    .option("bootstrap.servers", {json.dumps(where.plain or bootstrap)})\n'
        f'    .option("sasl.mechanism", "{MECHANISM}")\n'
        f'    .option("api.key", {json.dumps(user)})\n'
        f'    .option("api.secret", {json.dumps(password)})\n'
        f'    .option("subscribe", {json.dumps(name)})\n'
        "    .load()\n"
        ")\n"
    )

    records = f"{base}/api/v1/tenants/{tenant_slug}/topics/{name}/records/"
    partition_0 = (
        f"{base}/api/v1/tenants/{tenant_slug}/topics/{name}/partitions/0/records/?position=earliest"
    )
    auth = q(f"{user}:{password}")
    rest_text = (
        f"# produce one record\n"
        f"curl -u {auth} -H 'Content-Type: application/json' \\\n"
        f'  {q(records)} -d \'{{"key": "hello", "value": {{"note": "first record"}}}}\'\n'
        f"# read partition 0 from the start\n"
        f"curl -u {auth} \\\n"
        f"  {q(partition_0)}\n"
    )
    ws_text = (
        f"{ws_base}/ws/v1/tenants/{tenant_slug}/stream\n"
        f"# authenticate with a header (Authorization: Bearer {user}.{password}), or, from a\n"
        f"# browser, with a first frame:\n"
        + json.dumps({"type": "auth", "key_id": user, "secret": password})
        + "\n"
        + json.dumps({"type": "subscribe", "topics": [name], "from": "earliest"})
        + "\n"
    )
    return where, [
        Snippet("kcat", "kcat", kcat_text),
        Snippet("python", "Python (confluent-kafka)", python_text),
        Snippet("java", "Java client properties", java_text),
        Snippet("spark", "Spark (PySpark)", spark_text),
        Snippet("rest", "REST (curl)", rest_text),
        Snippet("websocket", "WebSocket", ws_text),
    ]
