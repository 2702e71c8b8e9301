"""`helm lint` and `helm template` on the chart, when helm is on PATH (it is not on the
development machines, where these tests skip).

The chart is copied to a temporary directory and `helm dependency build` fetches the Bitnami
subcharts. Without network access that fails; the tests then put minimal stand-in charts named
postgresql and redis in its charts/ folder. The chart never renders the subcharts' templates
into its own objects (it only derives their Service and Secret names), so its own templates are
still fully rendered and checked.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import CHART

HELM = shutil.which("helm")
CI_VALUES = sorted(CHART.glob("ci/*.yaml"))


def helm(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    assert HELM is not None
    result = subprocess.run(
        [HELM, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    if check and result.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if HELM is None:
        pytest.skip("helm is not installed on this machine")
    copy = tmp_path_factory.mktemp("chart") / "millrace"
    shutil.copytree(CHART, copy)
    if helm("dependency", "build", ".", cwd=copy, check=False).returncode != 0:
        metadata = yaml.safe_load((copy / "Chart.yaml").read_text())
        for dep in metadata["dependencies"]:
            stub = copy / "charts" / dep["name"]
            stub.mkdir(parents=True, exist_ok=True)
            # The lowest version the constraint ("16.x.x") allows.
            version = dep["version"].replace("x", "0")
            (stub / "Chart.yaml").write_text(
                f"apiVersion: v2\nname: {dep['name']}\nversion: {version}\n"
            )
    return copy


def render(
    chart: Path, values: Path, release: str = "millrace", extra: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    out = helm(
        "template", release, ".", "--namespace", "streaming", "-f", str(values), *extra, cwd=chart
    )
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), doc
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}"
    return matches[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint(chart, values):
    helm("lint", ".", "--strict", "-f", str(values), cwd=chart)


def test_external_services_rendering(chart):
    docs = render(chart, chart / "ci" / "external-values.yaml")
    job = find(docs, "Job", "millrace-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    secret = find(docs, "Secret", "millrace-secrets")
    assert set(secret["data"]) == {"secret-key", "internal-secret", "metrics-token", "database-url"}
    web = find(docs, "Deployment", "millrace-web")
    assert "replicas" not in web["spec"]  # the HPA owns it
    assert "initContainers" not in pod_spec(web)
    web_env = env(pod_spec(web)["containers"][0])
    assert web_env["ALLOWED_HOSTS"] == "millrace.example.com"
    assert web_env["REDIS_URL"] == {"secretKeyRef": {"name": "millrace-redis-url", "key": "url"}}
    worker = pod_spec(find(docs, "Deployment", "millrace-worker"))["containers"][0]
    assert worker["args"] == ["worker", "--concurrency=2"]
    broker = find(docs, "StatefulSet", "millrace-broker")
    broker_env = env(pod_spec(broker)["containers"][0])
    assert broker_env["MILLRACE_BROKER_ADVERTISED_HOST"] == (
        "$(POD_NAME).millrace-broker-headless.$(POD_NAMESPACE).svc.cluster.local"
    )
    assert broker_env["MILLRACE_BROKER_TLS_ADVERTISED_HOST"] == "broker-{id}.kafka.example.com"
    assert broker_env["MILLRACE_BROKER_TLS_ADVERTISED_PORT"] == "9093"
    affinity = pod_spec(broker)["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in affinity
    for ordinal in range(3):
        svc = find(docs, "Service", f"millrace-broker-{ordinal}-external")
        assert svc["spec"]["type"] == "LoadBalancer"
        assert svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == (
            f"millrace-broker-{ordinal}"
        )
        hostname = svc["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"]
        assert hostname == f"broker-{ordinal + 1}.kafka.example.com"
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == 3
    web_monitor = find(docs, "ServiceMonitor", "millrace-web")
    credentials = web_monitor["spec"]["endpoints"][0]["authorization"]["credentials"]
    assert credentials == {"name": "millrace-secrets", "key": "metrics-token"}
    dashboard = find(docs, "ConfigMap", "millrace-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert '"schemaVersion"' in dashboard["data"]["millrace.json"]
    ingress = find(docs, "Ingress", "millrace-web")
    assert ingress["spec"]["tls"][0]["secretName"] == "millrace-web-tls"


def test_bundled_services_rendering(chart):
    docs = render(chart, chart / "ci" / "bundled-values.yaml")
    job = find(docs, "Job", "millrace-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    for kind, name in (
        ("Deployment", "millrace-web"),
        ("Deployment", "millrace-worker"),
        ("Deployment", "millrace-beat"),
        ("StatefulSet", "millrace-broker"),
    ):
        init = pod_spec(find(docs, kind, name))["initContainers"]
        assert [c["name"] for c in init] == ["wait-for-migrations"], name
    web_env = env(pod_spec(find(docs, "Deployment", "millrace-web"))["containers"][0])
    assert web_env["DATABASE_URL"] == (
        "postgres://millrace:$(MILLRACE_POSTGRES_PASSWORD)@millrace-postgresql:5432/millrace"
    )
    assert web_env["MILLRACE_POSTGRES_PASSWORD"] == {
        "secretKeyRef": {"name": "millrace-postgresql", "key": "password"}
    }
    assert (
        web_env["REDIS_URL"] == "redis://:$(MILLRACE_REDIS_PASSWORD)@millrace-redis-master:6379/0"
    )
    assert web_env["SECRET_KEY"] == {
        "secretKeyRef": {"name": "millrace-django", "key": "secret-key"}
    }
    node_ports = sorted(
        d["spec"]["ports"][0]["nodePort"]
        for d in docs
        if d["kind"] == "Service" and d["metadata"]["name"].endswith("-external")
    )
    assert node_ports == [31091, 31092, 31093, 31094, 31095]
    broker_env = env(pod_spec(find(docs, "StatefulSet", "millrace-broker"))["containers"][0])
    assert broker_env["MILLRACE_BROKER_TLS_ADVERTISED_PORT"] == "31090+id"
    tls = find(docs, "Secret", "millrace-broker-tls")
    assert set(tls["data"]) == {"tls.crt", "tls.key", "ca.crt"}


def test_values_without_a_database_are_refused(chart):
    result = helm("template", "millrace", ".", cwd=chart, check=False)
    assert result.returncode != 0
    assert "externalDatabase" in result.stderr


@pytest.mark.parametrize(
    "bad",
    ["brokers.replicas=0", "web.replicas=-1", "typo=1", "brokers.terminationGracePeriodSeconds=30"],
)
def test_bad_values_are_refused(chart, bad):
    values = chart / "ci" / "external-values.yaml"
    result = helm(
        "template", "millrace", ".", "-f", str(values), "--set", bad, cwd=chart, check=False
    )
    assert result.returncode != 0, bad


def is_connect(doc: dict[str, Any]) -> bool:
    labels = doc["metadata"].get("labels", {})
    return "connect" in doc["metadata"]["name"] or (
        labels.get("app.kubernetes.io/component") == "connect"
    )


@pytest.mark.parametrize("values", ["external-values.yaml", "bundled-values.yaml"])
def test_connect_is_off_by_default(chart, values):
    docs = render(chart, chart / "ci" / values)
    assert [d["metadata"]["name"] for d in docs if is_connect(d)] == []


def test_connect_with_an_existing_secret(chart):
    docs = render(chart, chart / "ci" / "connect-values.yaml")
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs if is_connect(d)) == [
        ("Deployment", "millrace-connect"),
        ("Service", "millrace-connect-metrics"),
        ("ServiceMonitor", "millrace-connect"),
    ]
    deployment = find(docs, "Deployment", "millrace-connect")
    assert deployment["spec"]["replicas"] == 3
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == "connect"
    pod = pod_spec(deployment)
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"pool": "connect"}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["example.com/team"] == "data"
    assert "checksum/secrets" in annotations
    (container,) = pod["containers"]
    assert container["args"] == ["connect"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    connect_env = env(container)
    assert connect_env["MILLRACE_CONNECT_CONFIG"] == "/etc/millrace/connect/worker.properties"
    assert connect_env["MILLRACE_CONNECT_METRICS_PORT"] == "9810"
    assert connect_env["MILLRACE_CONNECT_METRICS_HOST"] == "0.0.0.0"
    assert "MILLRACE_CONNECT_PASSWORD" not in connect_env
    assert connect_env["SECRET_KEY"] == {
        "secretKeyRef": {"name": "millrace-secrets", "key": "secret-key"}
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["worker-config"]["secret"] == {
        "secretName": "acme-connect",
        "defaultMode": 0o440,
        "items": [{"key": "worker.properties", "path": "worker.properties"}],
    }
    assert volumes["tmp"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["worker-config"]["mountPath"] == "/etc/millrace/connect"
    assert mounts["worker-config"]["readOnly"] is True
    assert container["ports"] == [{"name": "metrics", "containerPort": 9810, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, probe
    monitor = find(docs, "ServiceMonitor", "millrace-connect")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == selector
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    service = find(docs, "Service", "millrace-connect-metrics")
    assert service["spec"]["selector"] == selector
    assert "checksum/connect" not in deployment["spec"]["template"]["metadata"]["annotations"]


def test_connect_with_credentials(chart):
    docs = render(
        chart,
        chart / "ci" / "bundled-values.yaml",
        extra=(
            "--set",
            "connect.enabled=true,connect.credentials.username=mk_1,connect.credentials.password=s3cret",
        ),
    )
    secret = find(docs, "Secret", "millrace-connect")
    assert secret["data"] == {
        "username": base64.b64encode(b"mk_1").decode(),
        "password": base64.b64encode(b"s3cret").decode(),
    }
    deployment = find(docs, "Deployment", "millrace-connect")
    pod = pod_spec(deployment)
    connect_env = env(pod["containers"][0])
    assert connect_env["MILLRACE_CONNECT_BOOTSTRAP_SERVERS"] == (
        "millrace-broker.streaming.svc.cluster.local:9092"
    )
    for name, key in (("USERNAME", "username"), ("PASSWORD", "password")):
        assert connect_env[f"MILLRACE_CONNECT_{name}"] == {
            "secretKeyRef": {"name": "millrace-connect", "key": key}
        }
    assert "worker-config" not in {v["name"] for v in pod["volumes"]}
    # The bundled Postgres: like every other pod, it waits for the migrations.
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-migrations"]
    assert "checksum/connect" in deployment["spec"]["template"]["metadata"]["annotations"]
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]  # off in these values


@pytest.mark.parametrize(
    "bad",
    [
        "connect.enabled=true",
        "connect.enabled=true,connect.credentials.username=mk_1",
        "connect.enabled=true,connect.existingSecret=x,connect.credentials.password=y",
        "connect.enabled=true,connect.existingSecret=x,connect.replicas=-1",
    ],
)
def test_bad_connect_values_are_refused(chart, bad):
    values = chart / "ci" / "external-values.yaml"
    result = helm(
        "template", "millrace", ".", "-f", str(values), "--set", bad, cwd=chart, check=False
    )
    assert result.returncode != 0, bad
    assert "connect" in result.stderr, result.stderr
