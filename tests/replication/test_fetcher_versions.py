"""Which Fetch version a replica fetcher sends: by topic id (v15) when the leader serves
it, by the id as the topic's name (v12) to a leader that does not (a rolling upgrade)."""

from __future__ import annotations

from typing import Any

import pytest

from data_plane.client.connection import KafkaClientError
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import APIS
from data_plane.replication.fetcher import FETCH, _by_topic, _fetch_version, _topic_id


class Leader:
    """A connection to a leader that answers ApiVersions with the given Fetch range."""

    def __init__(self, fetch: tuple[int, int] | None, error: int = ErrorCode.NONE) -> None:
        self.keys = [
            {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
            for a in APIS.values()
            if a.key != FETCH
        ]
        if fetch is not None:
            self.keys.append({"api_key": FETCH, "min_version": fetch[0], "max_version": fetch[1]})
        self.error = error
        self.asked: list[tuple[int, int]] = []

    def request(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((key, version))
        return {"error_code": self.error, "api_keys": self.keys}


def test_a_leader_serving_our_versions_is_fetched_by_topic_id():
    ours = APIS[FETCH]
    assert _fetch_version(Leader((ours.min_version, ours.max_version))) == 15


@pytest.mark.parametrize("fetch", [(4, 12), (4, 14), (16, 17), None])
def test_a_leader_without_fetch_v15_is_fetched_at_v12(fetch):
    assert _fetch_version(Leader(fetch)) == 12


def test_a_refused_api_versions_is_an_error_the_fetcher_retries():
    with pytest.raises(KafkaClientError):
        _fetch_version(Leader((4, 17), ErrorCode.UNSUPPORTED_VERSION))


def test_topics_are_named_both_ways_and_read_back_either_way():
    import uuid

    class F:
        def __init__(self, topic_id: uuid.UUID, index: int) -> None:
            self.topic = type("T", (), {"topic_id": topic_id})()
            self.index = index

    a, b = uuid.uuid4(), uuid.uuid4()
    entries: Any = [(None, F(a, 0)), (None, F(b, 1)), (None, F(a, 2))]
    topics = _by_topic(entries, lambda f: {"partition": f.index})
    assert topics == [
        {"topic": str(a), "topic_id": a, "partitions": [{"partition": 0}, {"partition": 2}]},
        {"topic": str(b), "topic_id": b, "partitions": [{"partition": 1}]},
    ]
    assert _topic_id(str(a)) == a and _topic_id("orders") is None
