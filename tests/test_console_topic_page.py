"""The topic page's partitions right after they were made: "starting", not a failure."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker, Topic
from control_plane.core.actor import Actor
from control_plane.groups.lag import LogState
from frontend import topics as topic_views


class NotOpenYet:
    """The brokers as they answer just after a topic was made: its leader does not know it."""

    def __init__(self, tenant):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def log_state(self, tps, committed):
        return LogState(errors={tp: "UNKNOWN_TOPIC_OR_PARTITION" for tp in tps})


@pytest.fixture
def page(owner, tenant_a, monkeypatch):
    Broker.objects.create(id=1, host="127.0.0.1", port=9092)
    catalog_services.create_topic(Actor(user=owner), tenant_a, name="orders", partition_count=2)
    monkeypatch.setattr(topic_views, "Brokers", NotOpenYet)
    client = Client()
    client.force_login(owner)
    return lambda: client.get("/t/acme/topics/orders/").content.decode()


def test_a_new_topics_partitions_are_starting(page):
    html = page()
    assert html.count(">starting</span>") == 2
    assert "not on its leader yet" not in html


def test_later_the_same_answer_is_an_error(page):
    Topic.objects.filter(name="orders").update(updated_at=timezone.now() - timedelta(minutes=2))
    html = page()
    assert ">starting</span>" not in html
    assert html.count("not on its leader yet") == 2
