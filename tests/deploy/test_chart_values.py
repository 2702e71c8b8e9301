"""values.yaml against values.schema.json, bad values rejected, and every `.Values` path the
templates read exists in values.yaml (and every values section is read by some template)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.deploy.conftest import CHART, TEMPLATES, chart_values, load_yaml, merged
from tests.deploy.gotemplate import ValuesRef, lookup, values_references

TEMPLATE_SOURCES = sorted(
    [*TEMPLATES.glob("*.yaml"), *TEMPLATES.glob("*.tpl"), TEMPLATES / "NOTES.txt"]
)
# Objects whose contents are free-form (Kubernetes objects, the subcharts' own values).
OPEN_OBJECTS = {"global", "podSecurityContext", "containerSecurityContext", "postgresql", "redis"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(validator: jsonschema.Draft7Validator, values: dict[str, Any]) -> list[str]:
    return [e.message for e in validator.iter_errors(values)]


def test_values_yaml_is_valid(validator):
    assert errors(validator, chart_values()) == []


@pytest.mark.parametrize("path", sorted(CHART.glob("ci/*.yaml")), ids=lambda p: p.name)
def test_ci_values_files_are_valid(validator, path):
    assert errors(validator, merged(chart_values(), load_yaml(path))) == []


def test_the_schema_closes_the_top_level_and_every_main_object():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    values = chart_values()
    assert set(schema["properties"]) == set(values), "schema and values.yaml list other keys"
    for key, prop in schema["properties"].items():
        if prop.get("type") == "object" and key not in OPEN_OBJECTS:
            assert prop.get("additionalProperties") is False, key


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"web": {"replicas": "two"}}, "wrong type"),
        ({"webb": {"replicas": 2}}, "unknown top-level key"),
        ({"brokers": {"replica": 3}}, "unknown key in a main object"),
        ({"web": {"replicas": -1}}, "negative replicas"),
        ({"worker": {"replicas": -1}}, "negative replicas"),
        ({"brokers": {"replicas": 0}}, "brokers.replicas < 1"),
        ({"brokers": {"persistence": {"size": "50 GB"}}}, "not a Kubernetes quantity"),
        ({"brokers": {"podAntiAffinity": {"type": "sometimes"}}}, "not an enum value"),
        ({"brokers": {"externalAccess": {"advertisedPort": "9093+"}}}, "not an integer or N+id"),
        ({"tls": {"enabled": "yes"}}, "wrong type"),
        ({"externalDatabase": {"url": "mysql://db/millrace"}}, "not a Postgres URL"),
        ({"config": {"logFormat": "xml"}}, "not an enum value"),
    ],
)
def test_bad_values_are_rejected(validator, override, why):
    assert errors(validator, merged(chart_values(), override)), why


@pytest.mark.parametrize("port", [9093, "31090+id", ""])
def test_advertised_port_forms_are_accepted(validator, port):
    values = merged(chart_values(), {"brokers": {"externalAccess": {"advertisedPort": port}}})
    assert errors(validator, values) == []


def all_references() -> list[tuple[Path, ValuesRef]]:
    return [(path, ref) for path in TEMPLATE_SOURCES for ref in values_references(path.read_text())]


def test_templates_read_values():
    paths = {ref.path for _, ref in all_references()}
    assert ("brokers", "replicas") in paths
    assert ("web", "ingress", "enabled") in paths


@pytest.mark.parametrize("path", TEMPLATE_SOURCES, ids=lambda p: p.name)
def test_every_values_path_in_templates_exists(path):
    values = chart_values()
    missing = [
        f"{path.name}:{ref.line}: .Values.{'.'.join(ref.path)}"
        + (" (inside a `with` block)" if ref.resolved_from_with else "")
        for ref in values_references(path.read_text())
        if not lookup(values, ref.path)
    ]
    assert missing == []


def test_every_values_section_is_read():
    """A key in values.yaml (two levels deep) that no template reads is dead configuration."""
    read = {ref.path for _, ref in all_references()}
    values = chart_values()
    unread = []
    for key, value in values.items():
        if key == "global":
            continue  # Helm's, for subcharts
        whole = key in {"podSecurityContext", "containerSecurityContext"}  # used as a whole
        nested = isinstance(value, dict) and value and not whole
        candidates = [(key, sub) for sub in value] if nested else [(key,)]
        for candidate in candidates:
            if not any(r[: len(candidate)] == candidate for r in read):
                unread.append(".".join(candidate))
    assert unread == []


def test_the_reference_finder_resolves_with_blocks_and_catches_typos():
    template = (
        "{{- with .Values.brokers.persistence }}\n"
        "size: {{ .size }}\n"
        "class: {{ .storgeClass }}\n"
        "{{- if .Values.tls.enabled }}{{ .accessModes }}{{ end }}\n"
        "{{- range .Values.brokers.tolerations }}{{ .key }}{{ end }}\n"
        '{{ include "x" (dict "ctx" $ "path" "/a.yaml") }}\n'
        "{{- end }}\n"
        "{{ $.Values.web.replicaz }} {{ $ctx.Values.web.replicas }}\n"
    )
    refs = values_references(template)
    paths = {ref.path for ref in refs}
    assert ("brokers", "persistence", "size") in paths
    assert ("brokers", "persistence", "accessModes") in paths  # `if` keeps the dot
    assert ("brokers", "tolerations", "key") not in paths  # `range` changes it
    assert not any("yaml" in p for p in paths)  # string literals are not fields
    values = chart_values()
    missing = {ref.path for ref in refs if not lookup(values, ref.path)}
    assert missing == {("brokers", "persistence", "storgeClass"), ("web", "replicaz")}
