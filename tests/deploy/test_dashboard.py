"""The Grafana dashboard: valid JSON, one datasource variable used by every panel, and only
metric names that Millrace exports (brokers' and Connect workers' read from their registries;
web and worker names from the deploy interface, written out here)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.metrics_core import Metric

from data_plane.broker.metrics import BrokerMetrics, BrokerState
from data_plane.connect.metrics import ConnectMetrics
from tests.deploy.conftest import CHART

DASHBOARD = CHART / "dashboards" / "millrace.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Web (port 8000) and worker (port 9809) metrics, as the deploy interface names them. Kept
# here rather than read from the code on purpose: the dashboard is written against this list.
WEB_AND_WORKER = {
    "millrace_http_requests_total",
    "millrace_http_request_duration_seconds_bucket",
    "millrace_http_request_duration_seconds_sum",
    "millrace_http_request_duration_seconds_count",
    "millrace_celery_tasks_total",
    "millrace_celery_task_duration_seconds_bucket",
    "millrace_celery_task_duration_seconds_sum",
    "millrace_celery_task_duration_seconds_count",
}
# What the brief asks the dashboard to show, by the series it needs.
REQUIRED = {
    "millrace_broker_bytes_in_total",
    "millrace_broker_bytes_out_total",
    "millrace_broker_records_in_total",
    "millrace_broker_records_out_total",
    "millrace_broker_requests_total",
    "millrace_broker_request_duration_seconds_bucket",
    "millrace_broker_under_replicated_partitions",
    "millrace_broker_under_min_isr_partitions",
    "millrace_broker_isr_shrinks_total",
    "millrace_broker_isr_expands_total",
    "millrace_broker_log_size_bytes",
    "millrace_broker_connections",
    "millrace_broker_throttle_seconds_total",
    "millrace_http_requests_total",
    "millrace_http_request_duration_seconds_bucket",
    "millrace_celery_tasks_total",
    "millrace_connect_source_records_written_total",
    "millrace_connect_sink_records_put_total",
    "millrace_connect_task_state",
    "millrace_connect_deadletterqueue_produce_total",
}
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
}


def series_names(family: Metric) -> set[str]:
    return {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}


def broker_series() -> set[str]:
    metrics = BrokerMetrics()
    # The gauges are collected from the broker's state when scraped; give them one.
    metrics.watch(
        lambda: BrokerState(
            connections=0,
            partitions=0,
            leader_partitions=0,
            under_replicated=0,
            under_min_isr=0,
            log_sizes=[("t", "topic", 0)],
        )
    )
    names: set[str] = set()
    for family in metrics.registry.collect():
        names |= series_names(family)
    return names


def connect_series() -> set[str]:
    """A Connect worker's metrics (port 9810), read from its registry."""
    names: set[str] = set()
    for family in ConnectMetrics().registry.collect():
        names |= series_names(family)
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # inside collapsed rows


def expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", []) if "expr" in t]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bmillrace_[a-z0-9_]+\b", expr))


def test_dashboard_shape(dashboard):
    assert dashboard["title"] and dashboard["uid"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids repeat"


def test_every_query_uses_the_datasource_variable(dashboard):
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert metric_names(target["expr"]), f"{panel['title']}: no Millrace metric"


def test_broker_names_come_from_the_registry():
    names = broker_series()
    # The scrape-time gauges and a labelled counter are both seen.
    assert "millrace_broker_log_size_bytes" in names
    assert "millrace_broker_bytes_in_total" in names
    assert "millrace_broker_request_duration_seconds_bucket" in names


def test_every_metric_in_the_dashboard_is_exported(dashboard):
    known = broker_series() | WEB_AND_WORKER | connect_series()
    used = set().union(*(metric_names(e) for e in expressions(dashboard)))
    assert used - known == set()


def test_connect_names_come_from_the_registry():
    names = connect_series()
    assert "millrace_connect_source_records_polled_total" in names
    assert "millrace_connect_task_state" in names
    assert "millrace_connect_source_records_polled" not in names  # a counter's series end _total


def test_the_dashboard_covers_what_operators_watch(dashboard):
    used = set().union(*(metric_names(e) for e in expressions(dashboard)))
    assert REQUIRED - used == set()


def test_the_metric_name_check_can_fail():
    assert metric_names('rate(millrace_broker_bytes_inn_total{topic="x"}[5m])') == {
        "millrace_broker_bytes_inn_total"
    }
    assert "millrace_broker_bytes_inn_total" not in broker_series()
