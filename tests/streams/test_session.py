"""The WebSocket stream's protocol state (``control_plane.streams.session``) with plain data:
no socket, no broker, no database."""

from __future__ import annotations

import ast
import base64
from pathlib import Path

import pytest

from control_plane.streams import session
from control_plane.streams.session import (
    MAX_PRODUCE_IN_FLIGHT,
    MAX_RECORDS_PER_FRAME,
    FrameError,
    StreamSession,
    TopicPartition,
)

MAX_WINDOW = 10_000
T0 = TopicPartition("orders", 0)
T1 = TopicPartition("orders", 1)


def subscribed(*, window: int = 1000, group: str | None = None, mode: str | None = None):
    """A session subscribed to ``orders`` (2 partitions)."""
    s = StreamSession()
    frame: dict = {"type": "subscribe", "topics": ["orders"], "window": window}
    if group is not None:
        frame["group"] = group
    if mode is not None:
        frame["mode"] = mode
    s.subscription = s.subscribe(frame, max_window=MAX_WINDOW).resolve({"orders": 2})
    return s


def ack(s: StreamSession, tp: TopicPartition, offset: int):
    return s.ack({"type": "ack", "topic": tp.topic, "partition": tp.partition, "offset": offset})


def code_of(call) -> str:
    with pytest.raises(FrameError) as info:
        call()
    return info.value.code


# --- purity --------------------------------------------------------------------------------


def test_the_session_imports_no_io():
    tree = ast.parse(Path(session.__file__).read_text())
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert not imported & {"asyncio", "channels", "aiokafka", "django", "socket"}


def test_partitions_compare_equal_to_plain_pairs():
    # The adapter converts aiokafka's TopicPartition at the boundary; both are (topic, n).
    assert T0 == ("orders", 0) and hash(T0) == hash(("orders", 0))


# --- frames ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "{nope", "[1]", '{"id": 1}', '{"type": 3}'])
def test_frames_that_are_not_typed_json_objects_are_bad(text):
    assert code_of(lambda: session.parse_frame(text)) == "bad_frame"


def test_a_typed_object_is_a_frame():
    assert session.parse_frame('{"type": "ping", "id": 4}') == {"type": "ping", "id": 4}


def test_an_error_frame_answers_the_frame_id():
    error = FrameError("bad_frame", "no")
    assert session.error_frame(error, {"type": "x", "id": 9}) == {
        "type": "error",
        "code": "bad_frame",
        "message": "no",
        "id": 9,
    }
    assert "id" not in session.error_frame(error, None)


def test_routes_before_and_after_authenticating():
    assert session.route({"type": "auth"}, authenticated=False) == "auth"
    assert session.route({"type": "ping"}, authenticated=False) == "unauthenticated"
    assert session.route({"type": "what"}, authenticated=False) == "unauthenticated"
    for kind in ("ping", "subscribe", "ack", "produce"):
        assert session.route({"type": kind}, authenticated=True) == kind
    assert code_of(lambda: session.route({"type": "auth"}, authenticated=True)) == "bad_frame"
    assert code_of(lambda: session.route({"type": "what"}, authenticated=True)) == "bad_frame"


def test_an_auth_frame_needs_two_strings():
    assert session.parse_auth({"type": "auth", "key_id": "k", "secret": "s"}) == ("k", "s")
    assert code_of(lambda: session.parse_auth({"type": "auth", "key_id": "k"})) == "bad_frame"


def test_too_many_malformed_frames_close_the_socket_but_refusals_do_not_count():
    s = StreamSession()
    denied = FrameError("permission_denied", "no")
    assert not any(s.rejected(denied, max_bad_frames=2) for _ in range(5))
    assert s.rejected(FrameError("bad_frame", "x"), max_bad_frames=2) is False
    assert s.rejected(FrameError("bad_frame", "x"), max_bad_frames=2) is True


# --- the connection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "refused"),
    [(b"secret=x", True), (b"api_key=x", True), (b"Token=1", True), (b"from=earliest", False)],
)
def test_credentials_in_the_url_are_refused(query, refused):
    assert session.credentials_in_url(query) is refused


def test_the_authorization_header():
    basic = base64.b64encode(b"MRK1:s3cret")
    assert session.auth_header([(b"Authorization", b"Basic " + basic)]) == ("MRK1", "s3cret")
    assert session.auth_header([(b"authorization", b"Bearer MRK1.s3cret")]) == ("MRK1", "s3cret")
    assert session.auth_header([(b"authorization", b"Basic %%%")]) == ("", "")
    assert session.auth_header([(b"authorization", b"Digest x")]) == ("", "")
    assert session.auth_header([(b"cookie", b"a=b")]) is None


# --- subscribing -----------------------------------------------------------------------------


def parse(**fields):
    return session.parse_subscribe({"type": "subscribe", **fields}, max_window=MAX_WINDOW)


def test_a_subscription_has_defaults():
    request = parse(topics=["orders"])
    assert (request.mode, request.window, request.start, request.group) == (
        "at-least-once",
        session.DEFAULT_WINDOW,
        "latest",
        None,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"topics": ["orders"], "window": 0},
        {"topics": ["orders"], "window": MAX_WINDOW + 1},
        {"topics": ["orders"], "window": True},
        {"topics": ["orders"], "mode": "exactly-once"},
        {"topics": ["orders"], "group": ""},
        {"topics": ["orders"], "from": "middle"},
        {"topics": ["orders"], "from": {"timestamp": "x"}},
        {"topics": []},
        {"topics": [f"t{i}" for i in range(101)]},
        {"topics": "orders"},
        {"partitions": [{"topic": "orders", "partition": 0}], "group": "g"},
        {"partitions": []},
        {"partitions": [{"topic": "orders", "partition": True}]},
        {"partitions": [{"topic": "orders", "partition": 0, "offset": 1, "position": "latest"}]},
        {"topics": ["orders"], "key_format": "yaml"},
    ],
)
def test_invalid_subscriptions_are_bad_frames(fields):
    assert code_of(lambda: parse(**fields)) == "bad_frame"


def test_the_window_limit_is_the_callers():
    assert session.parse_subscribe({"topics": ["a"], "window": 5}, max_window=5).window == 5
    with pytest.raises(FrameError):
        session.parse_subscribe({"topics": ["a"], "window": 6}, max_window=5)


def test_explicit_partitions_name_the_topics_and_must_exist():
    request = parse(
        partitions=[
            {"topic": "orders", "partition": 1, "offset": 5},
            {"topic": "orders", "partition": 0},
            {"topic": "audit", "partition": 0, "position": "earliest"},
        ],
        **{"from": "earliest"},
    )
    assert request.topics == ["orders", "audit"]
    resolved = request.resolve({"orders": 2, "audit": 1})
    assert resolved.positions == [
        ("orders", 1, {"offset": 5}),
        ("orders", 0, {"position": "earliest"}),
        ("audit", 0, {"position": "earliest"}),
    ]
    with pytest.raises(FrameError) as info:
        request.resolve({"orders": 1, "audit": 1})
    assert info.value.code == "not_found" and "0 to 0" in info.value.message


def test_without_a_group_every_partition_is_read_from_the_start_asked():
    resolved = parse(topics=["orders"], **{"from": {"timestamp": 7}}).resolve({"orders": 2})
    assert resolved.positions == [
        ("orders", 0, {"position": {"timestamp": 7}}),
        ("orders", 1, {"position": {"timestamp": 7}}),
    ]
    assert resolved.start == "latest"  # what a group member would start from


def test_a_group_gets_its_partitions_from_the_group():
    resolved = parse(topics=["orders"], group="g", **{"from": "earliest"}).resolve({"orders": 2})
    assert resolved.positions == [] and resolved.start == "earliest"


def test_a_socket_subscribes_once():
    s = subscribed()
    assert code_of(lambda: s.subscribe({"topics": ["orders"]}, max_window=MAX_WINDOW)) == (
        "bad_frame"
    )


def test_subscription_frames():
    s = subscribed(window=5, group="g")
    assert session.subscribed_frame(s.subscription) == {
        "type": "subscribed",
        "topics": ["orders"],
        "group": "g",
        "mode": "at-least-once",
        "window": 5,
        "isolation_level": "read_committed",
    }
    assert session.partitions_frame("revoked", [T1, T0]) == {
        "type": "revoked",
        "partitions": [{"topic": "orders", "partition": 1}, {"topic": "orders", "partition": 0}],
    }


# --- the window ------------------------------------------------------------------------------


def test_the_window_bounds_what_is_delivered_and_not_acknowledged():
    s = subscribed(window=3)
    assert s.window_open and s.room() == 3
    s.deliver(T0, [10, 11])
    assert s.window_open and s.room() == 1 and s.unacked == 2
    s.deliver(T1, [4])
    assert not s.window_open and s.room() == 0


def test_a_frame_carries_at_most_the_frame_limit():
    s = subscribed(window=MAX_WINDOW)
    assert s.room() == MAX_RECORDS_PER_FRAME


def test_acks_are_cumulative_per_partition():
    s = subscribed(window=3)
    s.deliver(T0, [10, 11, 12])
    s.deliver(T1, [4])
    assert ack(s, T0, 11) == session.AckOutcome()
    assert s.unacked == 2 and s.window_open and s.acked == {T0: 12}
    ack(s, T0, 11)  # again: nothing more to free, the commit point stays
    assert s.unacked == 2 and s.acked == {T0: 12}
    ack(s, T0, 100)
    assert s.unacked == 1 and s.acked == {T0: 101}


def test_an_ack_below_every_delivered_offset_frees_nothing():
    s = subscribed()
    s.deliver(T0, [10])
    ack(s, T0, 9)
    assert s.unacked == 1 and s.acked == {}


def test_an_ack_frame_may_list_offsets():
    s = subscribed()
    s.deliver(T0, [1, 2])
    s.deliver(T1, [5])
    items = [
        {"topic": "orders", "partition": 0, "offset": 2},
        {"topic": "orders", "partition": 1, "offset": 5},
    ]
    assert s.ack({"type": "ack", "offsets": items}).error is None
    assert s.unacked == 0 and s.acked == {T0: 3, T1: 6}


def test_acking_a_partition_with_nothing_delivered_says_so():
    s = subscribed()
    s.deliver(T0, [1])
    outcome = ack(s, T1, 1)
    assert outcome.not_assigned == [T1] and outcome.error is None
    assert session.not_assigned_frame(T1)["code"] == "not_assigned"


def test_a_malformed_ack_item_stops_the_frame_after_the_items_before_it():
    s = subscribed()
    s.deliver(T0, [1])
    items = [
        {"topic": "other", "partition": 0, "offset": 1},
        {"topic": "orders", "partition": 0, "offset": 1},
        {"topic": "orders", "partition": "x", "offset": 1},
        {"topic": "orders", "partition": 1, "offset": 1},
    ]
    outcome = s.ack({"type": "ack", "offsets": items})
    assert outcome.not_assigned == [TopicPartition("other", 0)]
    assert outcome.error is not None and outcome.error.code == "bad_frame"
    assert s.unacked == 0 and s.acked == {T0: 2}


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "ack", "offsets": "all"},
        {"type": "ack", "topic": "orders", "partition": 0},
        {"type": "ack", "offsets": [["orders", 0, 1]]},
    ],
)
def test_malformed_acks_are_bad_frames(frame):
    outcome = subscribed().ack(frame)
    assert outcome.error is not None and outcome.error.code == "bad_frame"


def test_nothing_to_acknowledge_before_subscribing():
    outcome = ack(StreamSession(), T0, 1)
    assert outcome.error is not None and "subscribe first" in outcome.error.message


# --- commits ---------------------------------------------------------------------------------


def test_acknowledged_offsets_are_due_until_committed():
    s = subscribed(group="g")
    s.deliver(T0, [1, 2])
    s.deliver(T1, [7])
    assert s.commits_due() == {}
    ack(s, T0, 1)
    ack(s, T1, 7)
    assert s.commits_due() == {T0: 2, T1: 8}
    assert s.commits_due(only=[T1]) == {T1: 8}
    s.commit_succeeded({T0: 2})
    assert s.commits_due() == {T1: 8}
    ack(s, T0, 2)
    assert s.commits_due() == {T0: 3, T1: 8}


@pytest.mark.parametrize(
    ("group", "mode", "before", "acknowledged", "on_revoke"),
    [
        ("g", "at-least-once", None, True, True),
        ("g", "at-most-once", 11, False, False),
        (None, "at-most-once", None, False, False),
        (None, "at-least-once", None, False, True),
    ],
)
def test_when_a_mode_commits(group, mode, before, acknowledged, on_revoke):
    s = subscribed(group=group, mode=mode)
    assert s.commit_before_delivery(T0, 10) == before
    assert s.subscription.commits_acknowledged is acknowledged
    assert s.commits_on_revoke is on_revoke


def test_a_revoked_partition_frees_the_window_and_is_forgotten():
    s = subscribed(window=3, group="g")
    s.deliver(T0, [1, 2, 3])
    ack(s, T0, 1)
    s.commit_succeeded({T0: 2})
    ack(s, T0, 2)
    s.deliver(T1, [9, 10])
    assert not s.window_open and s.commits_due() == {T0: 3}
    s.revoke([T0])
    assert s.unacked == 2 and s.window_open and s.commits_due() == {}
    assert T0 not in s.delivered and T0 not in s.acked and T0 not in s.committed
    assert ack(s, T0, 3).not_assigned == [T0]
    s.revoke([T1, TopicPartition("never", 0)])
    assert s.unacked == 0 and s.delivered == {}


def test_a_partition_delivered_nothing_still_takes_acks():
    s = subscribed()
    s.deliver(T0, [])
    assert ack(s, T0, 5) == session.AckOutcome()


# --- producing -------------------------------------------------------------------------------


def test_a_produce_frame_is_one_record():
    record = session.parse_produce(
        {"type": "produce", "topic": "orders", "key": "k", "value": {"n": 1}, "partition": 1}, 2
    )
    assert (record.key, record.value, record.partition) == (b'"k"', b'{"n":1}', 1)


def test_a_produce_frame_names_an_existing_partition():
    frame = {"type": "produce", "topic": "orders", "value": 1, "partition": 2}
    with pytest.raises(FrameError) as info:
        session.parse_produce(frame, 2)
    assert info.value.code == "not_found" and "0 to 1" in info.value.message
    bad = {"type": "produce", "topic": "orders", "value": "%%", "value_format": "binary"}
    assert code_of(lambda: session.parse_produce(bad, 2)) == "bad_frame"


def test_produce_frames_in_flight_are_bounded():
    s = StreamSession()
    for _ in range(MAX_PRODUCE_IN_FLIGHT):
        s.check_produce_room()
        s.produce_sent()
    assert code_of(s.check_produce_room) == "too_many_in_flight"
    s.produce_answered()
    s.check_produce_room()


def test_topic_names_are_non_empty_strings():
    assert session.check_topic_name("orders") == "orders"
    assert code_of(lambda: session.check_topic_name("")) == "bad_frame"
    assert code_of(lambda: session.check_topic_name(None)) == "bad_frame"
