"""Usage metering in process: the broker's meter, reports stored idempotently (twice,
late, out of order, after a restart), the hourly aggregation (idempotent, late data
summed in), and the numbers reconciling: hourly rows = stored reports = the meters'
own totals. The same with real brokers and clients: tests/broker/test_metering.py."""

from __future__ import annotations

import uuid

import pytest

from control_plane.catalog import services as catalog_services
from control_plane.usage import services as usage
from control_plane.usage.models import UsageHour, UsageRaw
from data_plane.broker.usage import FIELDS, HOUR, NO_TOPIC, LedPartition, Meter
from tests.conftest import SYSTEM

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000 // HOUR * HOUR  # an hour's start


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_meter_counts_per_hour_topic_and_principal_and_reports_totals():
    clock = Clock(T0 + 10)
    meter = Meter(clock=clock)
    orders = uuid.uuid4()
    meter.produced(1, orders, "orders", "User:app", 100, 2)
    meter.produced(1, orders, "orders", "User:app", 50, 1)
    meter.fetched(1, orders, "orders", "User:bi", 70, 3)
    meter.request(1, "User:app")
    first = meter.report()
    assert first is not None and first.seq == 1
    by_key = {(r.topic_name, r.principal): r.values for r in first.rows}
    assert by_key[("orders", "User:app")][:2] == (150, 3)
    assert by_key[("orders", "User:bi")][2:4] == (70, 3)
    assert by_key[("", "User:app")][FIELDS.index("requests")] == 1
    # Nothing acknowledged: the next report carries the same rows again, newer.
    meter.produced(1, orders, "orders", "User:app", 10, 1)
    second = meter.report()
    assert second is not None and second.seq == 2 and len(second.rows) == 3
    meter.acknowledge(second)
    assert meter.report() is None  # nothing changed since
    # Storage: led partitions' bytes times the seconds since the last sample.
    meter.sample([])
    clock.now += 30
    meter.sample([LedPartition(1, orders, "orders", 1000)] * 2)
    third = meter.report()
    assert third is not None
    (storage,) = [r for r in third.rows if r.principal == ""]
    assert storage.values[FIELDS.index("storage_byte_seconds")] == 2 * 1000 * 30
    assert storage.values[FIELDS.index("partition_seconds")] == 2 * 30
    meter.acknowledge(third)
    # A new hour is a new row; totals since start are the meter's own.
    clock.now = T0 + HOUR + 5
    meter.produced(1, orders, "orders", "User:app", 5, 1)
    fourth = meter.report()
    assert fourth is not None and {r.hour for r in fourth.rows} == {T0 + HOUR}
    assert meter.totals[1] == [165, 70]
    meter.acknowledge(fourth)
    # Hours that cannot change any more are forgotten (memory stays bounded).
    clock.now = T0 + 3 * HOUR
    meter.acknowledge(fourth)
    assert meter._rows == {} and meter._names == {} and meter.report() is None
    off = Meter(enabled=False)
    off.produced(1, orders, "orders", "User:app", 5, 1)
    off.request(1, "User:app")
    assert off.report() is None and off.totals == {}


def _report(meter: Meter, broker: int) -> None:
    report = meter.report()
    assert report is not None
    usage.ingest(broker, report)
    meter.acknowledge(report)


def test_reports_are_stored_idempotently_and_the_hours_reconcile(tenant_a, tenant_b):
    topic = catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
    tid = topic.topic_id
    clock = Clock(T0 + 60)
    one, two = Meter(clock=clock), Meter(clock=clock)
    one.produced(tenant_a.pk, tid, "orders", "User:app", 1000, 10)
    two.produced(tenant_a.pk, tid, "orders", "User:app", 500, 5)
    two.fetched(tenant_a.pk, tid, "orders", "User:bi", 300, 3)
    one.request(tenant_a.pk, "User:app")
    one.produced(999_999, uuid.uuid4(), "gone", "User:x", 7, 1)  # a tenant that is gone
    report = one.report()
    assert report is not None
    assert usage.ingest(1, report) == 2  # the unknown tenant's row is left out
    assert usage.ingest(1, report) == 2  # the same report again: no change
    one.acknowledge(report)
    _report(two, 2)
    # An older report arriving after a newer one changes nothing.
    one.produced(tenant_a.pk, tid, "orders", "User:app", 1000, 10)
    newer = one.report()
    assert newer is not None
    usage.ingest(1, newer)
    usage.ingest(1, report)
    one.acknowledge(newer)
    # Broker 2 restarts: a new incarnation, new rows beside the old ones.
    restarted = Meter(clock=clock)
    restarted.produced(tenant_a.pk, tid, "orders", "User:app", 250, 2)
    _report(restarted, 2)
    mine = UsageRaw.objects.filter(broker_id=2, tenant_id=tenant_a.pk)
    assert mine.values("incarnation").distinct().count() == 2
    run = usage.aggregate()
    assert run.hours >= 1  # (other tests' committed reports may add hours of their own)
    expected = 1000 + 1000 + 500 + 250
    assert usage.raw_totals(tenant_a.pk)["produce_bytes"] == expected
    meters = one.totals[tenant_a.pk][0] + two.totals[tenant_a.pk][0]
    assert meters + restarted.totals[tenant_a.pk][0] == expected
    rows = usage.usage([tenant_a], *usage.period(None, None), "topic")  # now: not T0
    assert rows == []
    start, end = usage._hour(T0), usage._hour(T0 + HOUR)
    (orders,) = usage.usage([tenant_a], start, end, "topic")
    assert orders["topic"] == "orders" and orders["produce_bytes"] == expected
    assert orders["fetch_bytes"] == 300
    chargeback = {r["principal"]: r for r in usage.usage([tenant_a], start, end, "principal")}
    assert chargeback["User:app"]["produce_bytes"] == expected
    assert chargeback["User:app"]["requests"] == 1
    assert chargeback["User:bi"]["fetch_bytes"] == 300
    # Idempotent: running again changes nothing; late data is summed into its hour.
    ours = UsageHour.objects.filter(tenant=tenant_a).order_by("pk")
    before = list(ours.values_list("produce_bytes", "fetch_bytes"))
    usage.aggregate()
    assert list(ours.values_list("produce_bytes", "fetch_bytes")) == before
    late = Meter(clock=Clock(T0 + 120))
    late.produced(tenant_a.pk, tid, "orders", "User:app", 40, 1)
    _report(late, 3)
    assert usage.aggregate().hours >= 1
    (orders,) = usage.usage([tenant_a], start, end, "topic")
    assert orders["produce_bytes"] == expected + 40
    assert usage.usage([tenant_b], start, end, "topic") == []
    # The CSV has every hourly row.
    text = usage.to_csv(usage.detail(tenant_a, start, end))
    lines = text.strip().splitlines()
    assert lines[0].startswith("hour,tenant,topic,topic_id,principal,produce_bytes")
    assert len(lines) == 1 + UsageHour.objects.filter(tenant=tenant_a).count()
    assert any(line.split(",")[2] == "" and "User:app" in line for line in lines[1:])  # requests
    assert str(NO_TOPIC) not in text
