"""A broker whose metrics port another program holds says so in one line and serves Kafka
without /metrics, /healthz and /readyz (Step 10b: start-up with a busy port)."""

from __future__ import annotations

import dataclasses
import socket

import pytest

from control_plane.catalog.models import Broker
from tests.broker.conftest import free_port, start_broker, stop_broker
from tests.broker.test_wire import RawClient

pytestmark = pytest.mark.django_db


def test_a_busy_metrics_port_is_one_warning_and_kafka_still_served(kafka, tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        busy = other.getsockname()[1]
        second = dataclasses.replace(
            kafka,
            broker_id=7,
            port=free_port(),
            metrics_port=busy,
            data_dir=tmp_path / "broker-7",
            log_path=tmp_path / "broker-7.log",
            process=None,
        )
        try:
            start_broker(second)  # waits for "ready on"
            log = second.log_tail()
            warnings = [line for line in log.splitlines() if "is not free" in line]
            assert len(warnings) == 1, log
            assert f"127.0.0.1:{busy} is not free" in warnings[0]
            assert "Traceback" not in log
            client = RawClient(second)
            try:
                assert client.request(18, 3, {})["api_keys"]  # the Kafka listener answers
            finally:
                client.close()
        finally:
            if second.process is not None:
                stop_broker(second)
            Broker.objects.filter(id=7).delete()
