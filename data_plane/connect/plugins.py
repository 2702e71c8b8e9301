"""The connector plugins a worker can run, by class name or alias.

Names are Kafka Connect's where Kafka ships the connector (``org.apache.kafka.connect.
file.FileStreamSourceConnector``), so configs written for Kafka Connect work as they are;
each also answers to its short name (``FileStreamSource`` and ``FileStreamSourceConnector``).
"""

from __future__ import annotations

from typing import Any

from data_plane.connect.api import Connector
from data_plane.connect.config import ConfigException
from data_plane.connect.connectors.file import FileStreamSinkConnector, FileStreamSourceConnector
from data_plane.connect.connectors.http_sink import HttpSinkConnector
from data_plane.connect.connectors.mirror import MirrorSourceConnector
from data_plane.connect.connectors.postgres_cdc import PostgresCdcSourceConnector
from data_plane.connect.connectors.postgres_sink import PostgresSinkConnector

PLUGINS: dict[str, type[Connector]] = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector": FileStreamSourceConnector,
    "org.apache.kafka.connect.file.FileStreamSinkConnector": FileStreamSinkConnector,
    "io.millrace.connect.postgres.PostgresCdcSourceConnector": PostgresCdcSourceConnector,
    "io.millrace.connect.postgres.PostgresSinkConnector": PostgresSinkConnector,
    "io.millrace.connect.mirror.MirrorSourceConnector": MirrorSourceConnector,
    "io.millrace.connect.http.HttpSinkConnector": HttpSinkConnector,
}


def _aliases() -> dict[str, str]:
    found = {}
    for name in PLUGINS:
        simple = name.rsplit(".", 1)[-1]
        found[simple] = name
        found[simple.removesuffix("Connector")] = name
    return found


def plugin_name(name: str) -> str:
    """The full class name of a plugin named by class name or alias."""
    name = name.strip()
    if name in PLUGINS:
        return name
    full = _aliases().get(name)
    if full is None:
        known = ", ".join(sorted(PLUGINS))
        raise ConfigException("connector.class", f"unknown connector {name!r} (known: {known})")
    return full


def connector_class(name: str) -> type[Connector]:
    return PLUGINS[plugin_name(name)]


def plugins_json() -> list[dict[str, Any]]:
    """Kafka Connect's ``GET /connector-plugins`` body."""
    return [
        {"class": name, "type": kind.kind, "version": kind.version}
        for name, kind in sorted(PLUGINS.items())
    ]
