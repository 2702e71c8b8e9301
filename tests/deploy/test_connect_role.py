"""The Connect worker role everywhere the other roles are: `docker/entrypoint.sh connect` (its
worker config, from a mounted file or from MILLRACE_CONNECT_* variables, and
`healthcheck connect`), the compose service under its profile, the chart's objects (read
without Helm here: which template blocks guard what; test_helm.py renders them with Helm),
the values schema, and the docs.

The entrypoint runs under bash as in the image, except that `python /app/manage.py ...` (the
image's path) goes to a stand-in that records what it was given, or, in the last test, to
this checkout's manage.py against a real broker (slow: needs Postgres, like tests/broker)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from data_plane.connect.metrics import ConnectMetrics
from data_plane.connect.properties import parse_properties
from tests.broker.conftest import free_port, kafka  # noqa: F401 (the fixture)
from tests.deploy.conftest import CHART, DOCKER, ROOT, TEMPLATES, chart_values, load_yaml, merged
from tests.deploy.gotemplate import PLACEHOLDER, enclosing_blocks, strip_go_template

ENTRYPOINT = DOCKER / "entrypoint.sh"
CONNECT_TEMPLATE = TEMPLATES / "connect.yaml"
MOUNTED = "/etc/millrace/connect/worker.properties"
METRICS_PORT = 9810
# The other roles' ports (docs/deploy.md's role table): web, Kafka, Kafka TLS, broker
# metrics, worker metrics.
OTHER_PORTS = {8000, 9092, 9093, 9644, 9809}
TENANT_CLUSTER = {
    "group.id": "connect-cluster",
    "config.storage.topic": "connect-configs",
    "offset.storage.topic": "connect-offsets",
    "status.storage.topic": "connect-status",
}

# --- the entrypoint ------------------------------------------------------------------------

# Stands in for `python /app/manage.py ...`: records the arguments, and the worker config the
# entrypoint chose (its text and mode), in $RECORD.
RECORDER = """\
import json, os, stat, sys
config = sys.argv[2]
mode = stat.S_IMODE(os.stat(config).st_mode)
with open(os.environ["RECORD"], "w") as out:
    json.dump({"argv": sys.argv[1:], "config": config, "mode": mode,
               "text": open(config, encoding="utf-8").read()}, out)
"""


def python_wrapper(directory: Path, manage: str) -> Path:
    """A `python` for PATH that runs `manage` (a script) for /app/manage.py, else this
    interpreter. Returns the directory to put first on PATH."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = /app/manage.py ]; then shift; exec "{sys.executable}" "{manage}" "$@"; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return bin_dir


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any MILLRACE_CONNECT_* of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_CONNECT_")}
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **extra}


def run(
    *args: str, env: dict[str, str], cwd: Path, bin_dir: Path | None = None
) -> subprocess.CompletedProcess:
    path = os.pathsep.join(
        [str(bin_dir or Path(sys.executable).parent), env.get("PATH", os.environ["PATH"])]
    )
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**env, "PATH": path},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def recorded(tmp_path: Path):
    """Run the connect role with the recording stand-in: (result, record or None)."""
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    bin_dir = python_wrapper(tmp_path, str(recorder))
    record = tmp_path / "record.json"

    def go(*args: str, **env: str) -> tuple[subprocess.CompletedProcess, dict[str, Any] | None]:
        env.setdefault("MILLRACE_CONNECT_CONFIG", str(tmp_path / "absent.properties"))
        result = run(
            "connect",
            *args,
            env=clean_env(RECORD=str(record), TMPDIR=str(tmp_path), **env),
            cwd=tmp_path,
            bin_dir=bin_dir,
        )
        found = json.loads(record.read_text()) if record.exists() else None
        if record.exists():
            record.unlink()
        return result, found

    return go


KEY = {
    "MILLRACE_CONNECT_BOOTSTRAP_SERVERS": "broker-1:9092,broker-2:9092",
    "MILLRACE_CONNECT_USERNAME": "mk_0123456789abcdef",
    # Characters a properties file treats specially, and a non-ASCII one.
    "MILLRACE_CONNECT_PASSWORD": "#s3cr=t:\\x ü",
}


def test_connect_without_a_config_or_a_key_exits_with_a_message(recorded, tmp_path):
    result, record = recorded()
    assert result.returncode == 2
    assert record is None, "the worker must not start"
    message = result.stderr
    assert message.startswith("connect: no worker config:")
    assert str(tmp_path / "absent.properties") in message
    for name in KEY:
        assert name in message
    assert result.stdout == ""


def test_the_default_config_path_is_where_the_chart_mounts_it(recorded):
    result, _ = recorded(MILLRACE_CONNECT_CONFIG="")
    assert result.returncode == 2
    assert f"{MOUNTED} does not exist" in result.stderr


@pytest.mark.parametrize("missing", sorted(KEY))
def test_connect_names_the_missing_part_of_the_key(recorded, missing):
    given = {k: v for k, v in KEY.items() if k != missing}
    result, record = recorded(**given)
    assert result.returncode == 2 and record is None
    first_sentence = result.stderr.split(". ", 1)[0]
    assert f"and {missing} is not set" in first_sentence
    assert KEY["MILLRACE_CONNECT_PASSWORD"] not in result.stderr + result.stdout


def test_connect_writes_a_private_worker_config_from_the_environment(recorded, tmp_path):
    result, record = recorded("--verbosity", "2", **KEY)
    assert result.returncode == 0, result.stderr
    assert record is not None
    config = Path(record["config"])
    assert config.parent == tmp_path, "a temporary file ($TMPDIR)"
    assert record["argv"] == ["connect", str(config), "--verbosity", "2"]
    assert record["mode"] == 0o600
    assert parse_properties(record["text"]) == {
        "bootstrap.servers": "broker-1:9092,broker-2:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "mk_0123456789abcdef",
        "sasl.password": KEY["MILLRACE_CONNECT_PASSWORD"],  # read back exactly
        **TENANT_CLUSTER,
        "metrics.port": str(METRICS_PORT),
        "metrics.host": "0.0.0.0",
    }
    assert KEY["MILLRACE_CONNECT_PASSWORD"] not in result.stdout + result.stderr


def test_connect_settings_from_the_environment_win_over_the_defaults(recorded):
    result, record = recorded(
        **KEY,
        MILLRACE_CONNECT_SECURITY_PROTOCOL="SASL_SSL",
        MILLRACE_CONNECT_SASL_MECHANISM="SCRAM-SHA-512",
        MILLRACE_CONNECT_GROUP_ID="etl",
        MILLRACE_CONNECT_CONFIG_STORAGE_TOPIC="etl-configs",
        MILLRACE_CONNECT_OFFSET_STORAGE_TOPIC="etl-offsets",
        MILLRACE_CONNECT_STATUS_STORAGE_TOPIC="etl-status",
        MILLRACE_CONNECT_METRICS_PORT="19810",
        MILLRACE_CONNECT_METRICS_HOST="127.0.0.1",
    )
    assert result.returncode == 0, result.stderr
    written = parse_properties(record["text"])
    assert written["security.protocol"] == "SASL_SSL"
    assert written["sasl.mechanism"] == "SCRAM-SHA-512"
    assert [written[k] for k in TENANT_CLUSTER] == [
        "etl",
        "etl-configs",
        "etl-offsets",
        "etl-status",
    ]
    assert (written["metrics.port"], written["metrics.host"]) == ("19810", "127.0.0.1")


def test_connect_runs_a_mounted_config_as_it_is(recorded, tmp_path):
    mounted = tmp_path / "worker.properties"
    mounted.write_text(
        "bootstrap.servers=b:9092\ngroup.id=connect-cluster\n"
        f"metrics.port={METRICS_PORT}\nmetrics.host=0.0.0.0\n"
    )
    mounted.chmod(0o640)
    result, record = recorded(MILLRACE_CONNECT_CONFIG=str(mounted))
    assert result.returncode == 0, result.stderr
    assert record["config"] == str(mounted)
    assert result.stderr == ""


def test_connect_adds_the_metrics_endpoint_to_a_mounted_config(recorded, tmp_path):
    mounted = tmp_path / "worker.properties"
    original = "bootstrap.servers=b:9092\nsasl.password=from-the-file\nmetrics.port=1234\n"
    mounted.write_text(original)
    # The chart sets both variables; with a file, the key variables are ignored (and said so).
    result, record = recorded(
        MILLRACE_CONNECT_CONFIG=str(mounted),
        MILLRACE_CONNECT_METRICS_PORT=str(METRICS_PORT),
        MILLRACE_CONNECT_USERNAME="ignored",
    )
    assert result.returncode == 0, result.stderr
    assert record["config"] != str(mounted)
    assert record["mode"] == 0o600  # it holds the file's secrets too
    assert parse_properties(record["text"]) == {
        "bootstrap.servers": "b:9092",
        "sasl.password": "from-the-file",
        "metrics.port": str(METRICS_PORT),
        "metrics.host": "0.0.0.0",
    }
    assert mounted.read_text() == original
    assert "ignored" in result.stderr and "from-the-file" not in result.stderr


def test_connect_refuses_an_unreadable_config(recorded, tmp_path):
    result, record = recorded(MILLRACE_CONNECT_CONFIG=str(tmp_path))  # a directory
    assert result.returncode == 2 and record is None
    assert "cannot read the worker config" in result.stderr


def test_healthcheck_connect_asks_the_metrics_port(tmp_path):
    server = ConnectMetrics().serve("127.0.0.1", 0)
    port = server.server_address[1]
    try:
        env = clean_env(MILLRACE_CONNECT_METRICS_PORT=str(port))
        assert run("healthcheck", "connect", env=env, cwd=tmp_path).returncode == 0
        # Without the variable: the mounted config's metrics.port.
        config = tmp_path / "worker.properties"
        config.write_text(f"metrics.port = {port}\n")
        env = clean_env(MILLRACE_CONNECT_CONFIG=str(config))
        assert run("healthcheck", "connect", env=env, cwd=tmp_path).returncode == 0
    finally:
        server.shutdown()
        server.server_close()
    result = run("healthcheck", "connect", env=env, cwd=tmp_path)
    assert result.returncode == 1  # nothing listens
    assert f"no answer from /metrics on port {port}" in result.stderr


def test_healthcheck_connect_needs_a_fixed_metrics_port(tmp_path):
    env = clean_env(MILLRACE_CONNECT_METRICS_PORT="0")
    result = run("healthcheck", "connect", env=env, cwd=tmp_path)
    assert result.returncode != 0
    assert "no fixed connect metrics port" in result.stderr


def test_the_metrics_port_is_the_connect_roles_own():
    assert METRICS_PORT not in OTHER_PORTS
    assert f'DEFAULT_METRICS_PORT = "{METRICS_PORT}"' in ENTRYPOINT.read_text()
    assert "connect    a distributed Connect worker" in ENTRYPOINT.read_text()
    template = CONNECT_TEMPLATE.read_text()
    assert f"containerPort: {METRICS_PORT}" in template
    assert f"port: {METRICS_PORT}" in template
    for doc in (ROOT / "docs" / "deploy.md", DOCKER / "README.md"):
        assert str(METRICS_PORT) in doc.read_text(), doc


# --- compose -------------------------------------------------------------------------------


def compose_services() -> dict[str, dict]:
    return load_yaml(DOCKER / "compose.yaml")["services"]


def test_compose_runs_connect_only_under_its_profile():
    services = compose_services()
    connect = services["connect"]
    assert connect["command"] == ["connect"]
    assert connect["profiles"] == ["connect"]
    others = [name for name, svc in services.items() if name != "connect" and "profiles" in svc]
    assert others == [], "the rest of the stack starts without a profile"
    brokers = sorted(n for n, s in services.items() if s.get("command") == ["broker"])
    assert connect["depends_on"] == {b: {"condition": "service_healthy"} for b in brokers}
    assert connect["healthcheck"]["test"] == [
        "CMD",
        "/app/docker/entrypoint.sh",
        "healthcheck",
        "connect",
    ]
    assert "ports" not in connect, "--scale connect=N must work"
    grace = re.fullmatch(r"(\d+)s", connect["stop_grace_period"])
    assert grace and int(grace.group(1)) >= 60


def test_compose_connect_environment():
    services = compose_services()
    env = services["connect"]["environment"]
    # The shared environment (x-millrace), as every service of the image has it.
    for key, value in services["web"]["environment"].items():
        assert env[key] == value, key
    bootstrap = env["MILLRACE_CONNECT_BOOTSTRAP_SERVERS"]
    brokers = sorted(n for n, s in services.items() if s.get("command") == ["broker"])
    listed = ",".join(f"{b}:9092" for b in brokers)
    assert bootstrap == f"${{MILLRACE_CONNECT_BOOTSTRAP_SERVERS:-{listed}}}"
    # Compose interpolates every service, profile or not: a required-variable form (":?")
    # here would stop `docker compose up` of the rest of the stack.
    for name in ("MILLRACE_CONNECT_USERNAME", "MILLRACE_CONNECT_PASSWORD"):
        assert env[name] == f"${{{name}:-}}"
    assert not any(":?" in str(v) for k, v in env.items() if k.startswith("MILLRACE_CONNECT_"))


# --- docs ----------------------------------------------------------------------------------


def variables(text: str) -> set[str]:
    return set(re.findall(r"\bMILLRACE_CONNECT_[A-Z_]*[A-Z]\b", text))


def test_every_connect_variable_is_documented():
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    readme = (DOCKER / "README.md").read_text()
    used = variables(ENTRYPOINT.read_text())
    assert {"MILLRACE_CONNECT_CONFIG", "MILLRACE_CONNECT_PASSWORD"} <= used
    assert used - variables(deploy) == set(), "docs/deploy.md"
    compose = variables((DOCKER / "compose.yaml").read_text())
    assert compose - variables(readme) == set(), "docker/README.md"
    assert "--profile connect" in readme and "--profile connect" in deploy


# --- the chart, without Helm ---------------------------------------------------------------


def outside_actions(text: str) -> list[int]:
    """Positions of the non-blank characters that are not inside a template action."""
    spans = [m.span() for m in re.finditer(r"\{\{.*?\}\}", text, re.S)]
    inside = set()
    for start, end in spans:
        inside.update(range(start, end))
    return [i for i, ch in enumerate(text) if not ch.isspace() and i not in inside]


def test_connect_objects_exist_only_when_enabled():
    values = chart_values()["connect"]
    assert values["enabled"] is False
    assert values["replicas"] == 2
    text = CONNECT_TEMPLATE.read_text()
    for i in outside_actions(text):
        blocks = enclosing_blocks(text, i)
        assert blocks[:1] == ["if .Values.connect.enabled"], text[i : i + 40]
    monitors = (TEMPLATES / "servicemonitors.yaml").read_text()
    at = monitors.index('"component" "connect"')
    assert enclosing_blocks(monitors, at) == [
        "if .Values.metrics.serviceMonitor.enabled",
        "if .Values.connect.enabled",
    ]
    # Nothing else names the component.
    for path in TEMPLATES.glob("*.yaml"):
        if path not in (CONNECT_TEMPLATE, TEMPLATES / "servicemonitors.yaml"):
            assert '"connect"' not in path.read_text(), path.name


def connect_objects() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all(strip_go_template(CONNECT_TEMPLATE.read_text()))
    return {d["kind"]: d for d in docs if d}


def test_connect_deployment_shape():
    objects = connect_objects()
    assert set(objects) == {"Secret", "Deployment", "Service"}
    deployment = objects["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == PLACEHOLDER
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == PLACEHOLDER
    assert "securityContext" in pod
    (container,) = pod["containers"]
    assert container["name"] == "connect"
    assert container["args"] == ["connect"]
    assert container["ports"] == [
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}
    ]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, probe
    budget = (
        container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"]
    )
    assert budget >= 120, "joining the cluster (and creating its topics) takes a while"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MILLRACE_CONNECT_CONFIG"] == MOUNTED
    assert env["MILLRACE_CONNECT_METRICS_PORT"] == str(METRICS_PORT)
    assert env["MILLRACE_CONNECT_METRICS_HOST"] == "0.0.0.0"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["worker-config"] == {
        "name": "worker-config",
        "mountPath": os.path.dirname(MOUNTED),
        "readOnly": True,
    }
    assert mounts["tmp"]["mountPath"] == "/tmp"
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The written worker config holds the key's secret: memory, never the node's disk.
    assert volumes["tmp"]["emptyDir"]["medium"] == "Memory"
    secret = volumes["worker-config"]["secret"]
    assert secret["items"] == [{"key": PLACEHOLDER, "path": os.path.basename(MOUNTED)}]
    service = objects["Service"]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}
    ]
    assert objects["Secret"]["data"] == {"username": PLACEHOLDER, "password": PLACEHOLDER}


def test_connect_secret_choice():
    """existingSecret: its worker.properties mounted; else the chart's Secret and the key's
    variables. The chart refuses neither and both."""
    text = CONNECT_TEMPLATE.read_text()

    def blocks(needle: str) -> list[str]:
        return enclosing_blocks(text, text.index(needle))

    given = ["if .Values.connect.enabled", "if .Values.connect.existingSecret"]
    made = ["if .Values.connect.enabled", "if not .Values.connect.existingSecret"]
    assert blocks("kind: Secret") == made
    assert blocks("checksum/connect") == made
    assert blocks("name: MILLRACE_CONNECT_BOOTSTRAP_SERVERS") == made
    assert blocks('"name" "MILLRACE_CONNECT_USERNAME"') == made
    assert blocks('"name" "MILLRACE_CONNECT_PASSWORD"') == made
    assert blocks("- name: worker-config") == given
    assert blocks("mountPath: /etc/millrace/connect") == given
    assert blocks("name: MILLRACE_CONNECT_METRICS_PORT") == given[:1]
    helpers = (TEMPLATES / "_helpers.tpl").read_text()
    for message in (
        "connect.existingSecret and connect.credentials are both set",
        "set connect.existingSecret (a Secret with worker.properties), or connect.credentials",
    ):
        assert 'define "millrace.validate"' in enclosing_blocks(helpers, helpers.index(message))[0]
        assert "if .Values.connect.enabled" in enclosing_blocks(helpers, helpers.index(message))


def test_connect_workers_get_time_for_a_clean_stop():
    values = chart_values()["connect"]
    # A stop waits for each task (task.shutdown.graceful.timeout.ms, 5 s) and for the records
    # in flight (offset.flush.timeout.ms, 5 s), commits, then leaves the group.
    assert values["terminationGracePeriodSeconds"] >= 60
    assert load_yaml(DOCKER / "compose.yaml")["services"]["connect"]["stop_grace_period"] == "60s"


# --- the schema ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads((CHART / "values.schema.json").read_text()))


@pytest.mark.parametrize(
    "connect",
    [
        {"enabled": "yes"},
        {"replicas": -1},
        {"replicas": "two"},
        {"existingSecretKey": ""},
        {"credentials": {"password": 123}},
        {"credentials": {"token": "x"}},
        {"credentials": {"bootstrapServers": "broker-1:9092 broker-2:9092"}},
        {"credentials": {"bootstrapServers": "broker-1"}},
        {"terminationGracePeriodSeconds": 0},
        {"resources": {"limit": {"memory": "1Gi"}}},
        {"nodeSelector": {"disk": 1}},
        {"replica": 2},
    ],
    ids=lambda c: json.dumps(c),
)
def test_bad_connect_values_are_rejected(validator, connect):
    values = merged(chart_values(), {"connect": connect})
    assert list(validator.iter_errors(values)), connect


@pytest.mark.parametrize(
    "connect",
    [
        {"enabled": True, "existingSecret": "my-connect", "replicas": 0},
        {
            "enabled": True,
            "credentials": {
                "bootstrapServers": "b-1.example.com:9092,b-2.example.com:9092",
                "username": "mk_1",
                "password": "s",
            },
        },
    ],
)
def test_connect_values_are_accepted(validator, connect):
    values = merged(chart_values(), {"connect": connect})
    assert [e.message for e in validator.iter_errors(values)] == []


# --- end to end ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_connect_role_joins_the_tenants_connect_cluster(kafka, tmp_path):  # noqa: F811
    """`entrypoint.sh connect` with a key in the environment: the worker joins the tenant's
    cluster (connect-cluster), `healthcheck connect` passes, and SIGTERM stops it cleanly."""
    bin_dir = python_wrapper(tmp_path, str(ROOT / "manage.py"))
    key = kafka.admin_a
    port = free_port()
    env = {
        **{k: v for k, v in kafka.env.items() if not k.startswith("MILLRACE_CONNECT_")},
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmp_path),
        "MILLRACE_CONNECT_CONFIG": str(tmp_path / "absent.properties"),
        "MILLRACE_CONNECT_BOOTSTRAP_SERVERS": kafka.bootstrap,
        "MILLRACE_CONNECT_USERNAME": key.key_id,
        "MILLRACE_CONNECT_PASSWORD": key.secret,
        "MILLRACE_CONNECT_METRICS_PORT": str(port),
        "PATH": os.pathsep.join([str(bin_dir), kafka.env.get("PATH", os.environ["PATH"])]),
    }
    log = tmp_path / "connect.log"
    worker = subprocess.Popen(
        ["bash", str(ENTRYPOINT), "connect"],
        env=env,
        cwd=ROOT,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while "ready in cluster" not in log.read_text():
            assert worker.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert re.search(r"connect worker \S+ ready in cluster connect-cluster", log.read_text())
        (written,) = tmp_path.glob("millrace-connect-*.properties")
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
        health = run("healthcheck", "connect", env=env, cwd=tmp_path, bin_dir=bin_dir)
        assert health.returncode == 0, health.stderr
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert "millrace_connect_task_state" in response.read().decode()
        worker.send_signal(signal.SIGTERM)  # the entrypoint exec'd: the worker gets it
        assert worker.wait(timeout=45) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    output = log.read_text()
    assert "connect worker stopped" in output
    assert key.secret not in output
    assert run("healthcheck", "connect", env=env, cwd=tmp_path, bin_dir=bin_dir).returncode != 0
