"""``ClusterClient.log_dirs`` on its own: which broker's size counts for a partition.

The brokers are fakes answering decoded bodies, so the cases a real cluster produces only
by accident (a leader that cannot be reached, a copy only a follower holds) are exact.
"""

from __future__ import annotations

from typing import Any

import pytest

from data_plane.client import ClusterClient, KafkaClientError
from data_plane.protocol.errors import ErrorCode

METADATA, DESCRIBE_LOG_DIRS = 3, 35
T = "orders"


class FakeBroker:
    def __init__(self, sizes: dict[int, int] | None = None, error: int = ErrorCode.NONE):
        self.sizes = sizes  # None: unreachable
        self.error = error
        self.asked: list[dict[str, Any]] = []

    def request(
        self, api_key: int, version: int, body: dict[str, Any], answer: object = None
    ) -> dict[str, Any]:
        if self.sizes is None:
            raise KafkaClientError("down", ErrorCode.NETWORK_EXCEPTION)
        assert (api_key, version) == (DESCRIBE_LOG_DIRS, 4)
        self.asked.append(body)
        partitions = [
            {"partition_index": i, "partition_size": s, "offset_lag": 0, "is_future_key": False}
            for i, s in self.sizes.items()
        ]
        return {
            "throttle_time_ms": 0,
            "error_code": self.error,
            "results": []
            if self.error
            else [
                {
                    "error_code": 0,
                    "log_dir": "/data",
                    "topics": [{"name": T, "partitions": partitions}] if partitions else [],
                }
            ],
        }

    def close(self) -> None:
        pass


LEADERS = {0: 1, 1: 2, 2: 1, 3: 2}  # partition -> leader


class Bootstrap:
    """Answers Metadata: brokers 1-3, topic ``T`` with the ``LEADERS``."""

    def request(
        self, api_key: int, version: int, body: dict[str, Any], answer: object = None
    ) -> dict[str, Any]:
        assert api_key == METADATA
        return metadata(body)


def metadata(body: dict[str, Any]) -> dict[str, Any]:
    known = body["topics"] is None or any(t["name"] == T for t in body["topics"])
    return {
        "brokers": [{"node_id": i, "host": "b", "port": i} for i in (1, 2, 3)],
        "topics": [
            {
                "name": T,
                "error_code": 0,
                "partitions": [
                    {"partition_index": p, "error_code": 0, "leader_id": leader}
                    for p, leader in LEADERS.items()
                ],
            }
        ]
        if known
        else [],
    }


@pytest.fixture
def brokers(monkeypatch):
    fakes = {
        1: FakeBroker({0: 100, 1: 50}),  # leads 0 and 2 (2 has no log anywhere)
        2: FakeBroker(None),  # leads 1 and 3, unreachable
        3: FakeBroker({0: 120, 1: 60}),
    }
    monkeypatch.setattr(ClusterClient, "_any_connection", lambda self: Bootstrap())
    monkeypatch.setattr(ClusterClient, "_connection", lambda self, address: fakes[address[1]])
    return fakes


def client() -> ClusterClient:
    return ClusterClient([("b", 1)], username="u", password="p")


def test_the_leaders_size_wins_then_the_largest_copy(brokers):
    sizes = client().log_dirs([T])
    assert sizes == {
        (T, 0): 100,  # the leader's, though a follower's copy is larger
        (T, 1): 60,  # leader unreachable: the largest copy elsewhere
        (T, 2): 0,  # the leader answered and holds no log
    }  # partition 3: leader unreachable, no copy anywhere: absent
    assert brokers[1].asked == [{"topics": [{"topic": T, "partitions": [0, 1, 2, 3]}]}]


def test_none_asks_every_broker_for_every_topic(brokers):
    assert client().log_dirs(None)[(T, 0)] == 100
    assert brokers[3].asked == [{"topics": None}]


def test_refusal_raises_and_no_broker_at_all_raises(brokers):
    brokers[3].error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaClientError) as refused:
        client().log_dirs([T])
    assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    brokers[1].sizes = brokers[3].sizes = None
    with pytest.raises(KafkaClientError) as down:
        client().log_dirs([T])
    assert down.value.code == ErrorCode.NETWORK_EXCEPTION


def test_no_topics_asks_nothing(brokers):
    assert client().log_dirs([]) == {}
    assert all(not b.asked for b in brokers.values())
