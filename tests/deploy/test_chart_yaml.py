"""The chart's files parse as YAML (templates after stripping Go template directives), every
template document is a Kubernetes object, and the objects have the shape the deployment needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import CHART, TEMPLATES, load_yaml
from tests.deploy.gotemplate import PLACEHOLDER, strip_go_template

TEMPLATE_FILES = sorted(TEMPLATES.glob("*.yaml"))
PLAIN_YAML = [CHART / "Chart.yaml", CHART / "values.yaml", *sorted(CHART.glob("ci/*.yaml"))]


def documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(strip_go_template(path.read_text())) if d is not None]


def all_objects() -> list[dict[str, Any]]:
    return [doc for path in TEMPLATE_FILES for doc in documents(path)]


def objects(kind: str) -> list[dict[str, Any]]:
    return [o for o in all_objects() if o["kind"] == kind]


def named(kind: str, suffix: str) -> dict[str, Any]:
    """The object of `kind` whose templated name ends with `suffix` (e.g. "-beat")."""
    found = [o for o in objects(kind) if str(o["metadata"]["name"]).endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {[o['metadata']['name'] for o in objects(kind)]}"
    return found[0]


def test_the_chart_has_templates():
    assert len(TEMPLATE_FILES) >= 10
    assert (TEMPLATES / "_helpers.tpl").is_file()
    assert (TEMPLATES / "NOTES.txt").is_file()


@pytest.mark.parametrize("path", PLAIN_YAML, ids=lambda p: str(p.relative_to(CHART)))
def test_plain_chart_files_parse(path):
    assert isinstance(load_yaml(path), dict)


def test_chart_metadata_and_dependencies():
    chart = load_yaml(CHART / "Chart.yaml")
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "millrace"
    deps = {d["name"]: d for d in chart["dependencies"]}
    assert set(deps) == {"postgresql", "redis"}
    for name, dep in deps.items():
        assert dep["repository"] == "oci://registry-1.docker.io/bitnamicharts"
        assert dep["condition"] == f"{name}.enabled"


@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.name)
def test_every_template_document_is_a_kubernetes_object(path):
    docs = documents(path)
    assert docs, f"{path.name} yields no document after stripping"
    for doc in docs:
        assert isinstance(doc, dict), f"{path.name}: {doc!r}"
        assert doc.get("apiVersion"), f"{path.name}: a document without apiVersion"
        assert doc.get("kind"), f"{path.name}: a document without kind"
        assert doc.get("metadata", {}).get("name"), f"{path.name}: a {doc['kind']} without a name"


def test_the_stripper_drops_directive_lines_and_replaces_inline_actions():
    text = (
        "{{- /* a comment\n over lines */ -}}\n"
        "{{- if .Values.a }}\n"
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        '  name: {{ include "x.fullname" . }}-config\n'
        "  labels:\n"
        '    {{- include "x.labels" . | nindent 4 }}\n'
        '    extra: "yes"\n'
        "data:\n"
        "  {{- range $k, $v := .Values.data }}\n"
        "  {{ $k }}: {{ $v | quote }}\n"
        "  {{- end }}\n"
        "  port: {{ .Values.port\n"
        "    | int }}\n"
        "{{- end }}\n"
    )
    stripped = strip_go_template(text)
    assert "{{" not in stripped and "}}" not in stripped
    assert yaml.safe_load(stripped) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{PLACEHOLDER}-config", "labels": {"extra": "yes"}},
        "data": {PLACEHOLDER: PLACEHOLDER, "port": PLACEHOLDER},
    }


def test_the_objects_the_deployment_needs_are_there():
    kinds = {}
    for obj in all_objects():
        kinds[obj["kind"]] = kinds.get(obj["kind"], 0) + 1
    # web, worker, beat, the Connect fleet, connect (with connect.enabled)
    assert kinds["Deployment"] == 5
    assert kinds["StatefulSet"] == 1  # brokers
    assert kinds["Job"] == 1  # migrations
    assert kinds["ServiceMonitor"] == 4  # web, brokers, worker, connect
    for kind in (
        "Service",
        "Ingress",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Secret",
        "ConfigMap",
    ):
        assert kind in kinds, kind
    assert named("HorizontalPodAutoscaler", "-web")["apiVersion"] == "autoscaling/v2"
    assert named("ServiceMonitor", "-web")["apiVersion"] == "monitoring.coreos.com/v1"


def _container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_every_workload_runs_a_role_of_the_entrypoint():
    roles = {
        ("Deployment", "-web"): "web",
        ("Deployment", "-worker"): "worker",
        ("Deployment", "-beat"): "beat",
        ("StatefulSet", "-broker"): "broker",
        ("Job", "-migrate"): "migrate",
        ("Deployment", "-connect"): "connect",
        ("Deployment", "-connect-fleet"): "connect-fleet",
    }
    for (kind, suffix), role in roles.items():
        workload = named(kind, suffix)
        assert _container(workload, role)["args"][0] == role


def test_brokers_statefulset():
    sts = named("StatefulSet", "-broker")
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"].endswith("-broker-headless")
    claim = spec["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data"
    pod = spec["template"]["spec"]
    assert "terminationGracePeriodSeconds" in pod
    broker = _container(sts, "broker")
    mounts = {m["name"]: m["mountPath"] for m in broker["volumeMounts"]}
    assert mounts["data"] == "/var/lib/millrace"
    assert mounts["tls"] == "/etc/millrace/tls"
    env = _env(broker)
    assert env["MILLRACE_BROKER_ID"] == "ordinal"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["MILLRACE_BROKER_ADVERTISED_HOST"].startswith("$(POD_NAME).")
    assert ".$(POD_NAMESPACE).svc." in env["MILLRACE_BROKER_ADVERTISED_HOST"]
    assert env["MILLRACE_BROKER_TLS_CERT_FILE"] == "/etc/millrace/tls/tls.crt"
    assert env["MILLRACE_BROKER_TLS_KEY_FILE"] == "/etc/millrace/tls/tls.key"
    assert "MILLRACE_CONTROLLED_SHUTDOWN_TIMEOUT_SECONDS" in env
    ports = {p["name"]: p["containerPort"] for p in broker["ports"]}
    assert ports == {"kafka": 9092, "kafka-tls": 9093, "metrics": 9644}
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        assert broker[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe


def test_broker_services():
    headless = named("Service", "-broker-headless")["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is True
    bootstrap = named("Service", "-broker")["spec"]
    assert bootstrap["type"] == "ClusterIP"
    external = named("Service", "-external")
    assert "statefulset.kubernetes.io/pod-name" in external["spec"]["selector"]
    assert external["spec"]["ports"][0]["targetPort"] == "kafka-tls"
    pdb = named("PodDisruptionBudget", "-broker")
    assert pdb["spec"]["maxUnavailable"] == 1


def test_beat_is_a_single_pod_replaced_with_recreate():
    beat = named("Deployment", "-beat")["spec"]
    assert beat["replicas"] == 1
    assert beat["strategy"] == {"type": "Recreate"}


def test_web_probes_send_the_https_header():
    web = _container(named("Deployment", "-web"), "web")
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        get = web[probe]["httpGet"]
        assert get["path"] == path and get["port"] == "http", probe
        assert {"name": "X-Forwarded-Proto", "value": "https"} in get["httpHeaders"], probe
    # Probes and scrapes address the pod by IP: the web tier answers those paths before its
    # host check (control_plane/core/probes.py), so ALLOWED_HOSTS names only real hosts.
    helpers = (TEMPLATES / "_helpers.tpl").read_text()
    allowed = helpers.split('define "millrace.allowedHosts"', 1)[1].split("{{- define", 1)[0]
    assert "POD_IP" not in allowed


def test_migrations_are_a_hook_that_runs_after_its_secret():
    job = named("Job", "-migrate")["metadata"]["annotations"]
    assert set(job["helm.sh/hook"].split(",")) in (
        {"pre-install", "pre-upgrade"},
        {"post-install", "pre-upgrade"},
    )
    assert job["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    secret = named("Secret", "-secrets")["metadata"]["annotations"]
    assert "pre-install" in secret["helm.sh/hook"]
    assert int(secret["helm.sh/hook-weight"]) < int(job["helm.sh/hook-weight"])


def test_every_pod_runs_as_the_image_user():
    values = load_yaml(CHART / "values.yaml")
    assert values["podSecurityContext"]["runAsUser"] == 10001
    assert values["podSecurityContext"]["fsGroup"] == 10001
    assert values["podSecurityContext"]["runAsNonRoot"] is True
    for kind in ("Deployment", "StatefulSet", "Job"):
        for obj in objects(kind):
            assert "securityContext" in obj["spec"]["template"]["spec"], obj["metadata"]["name"]


def test_the_dashboard_configmap_ships_the_dashboard_file():
    text = (TEMPLATES / "dashboard-configmap.yaml").read_text()
    assert '.Files.Get "dashboards/millrace.json"' in text
    assert (CHART / "dashboards" / "millrace.json").is_file()
    assert load_yaml(CHART / "values.yaml")["dashboards"]["labels"] == {"grafana_dashboard": "1"}


def test_enclosing_blocks_tells_branches_apart():
    from tests.deploy.gotemplate import enclosing_blocks

    text = (
        "{{- /* {{ if nothing }} */}}\n"
        "{{- if .Values.a }}\n"
        "A\n"
        "{{- with .Values.b }}B{{ end }}\n"
        "{{- else if .Values.c }}\n"
        "C\n"
        "{{- else }}\n"
        "D\n"
        "{{- end }}\n"
        "E\n"
    )
    assert enclosing_blocks(text, text.index("A")) == ["if .Values.a"]
    assert enclosing_blocks(text, text.index("B")) == ["if .Values.a", "with .Values.b"]
    assert enclosing_blocks(text, text.index("C")) == ["if .Values.a / else if .Values.c"]
    assert enclosing_blocks(text, text.index("D")) == ["if .Values.a / else"]
    assert enclosing_blocks(text, text.index("E")) == []
