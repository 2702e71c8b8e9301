"""After the broker refuses a record for good, the next REST or WebSocket produce to the
same partition succeeds: the web tier's idempotent producer is replaced, not left with
sequence numbers the broker never took (which made every later produce fail with
out_of_order_sequence_number until the web server restarted)."""

from __future__ import annotations

import pytest

from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import topic_name
from tests.streams.test_rest_produce import consume_all, post, produce_url, rest
from tests.streams.test_ws import open_socket, run

pytestmark = pytest.mark.django_db

# Every non-retriable per-record refusal the broker's produce path can give a well-formed
# batch from a REST or WebSocket client: (topic configs, the refused record, the error
# code aiokafka reports). aiokafka has no name for INVALID_RECORD (87): "unknown".
REFUSALS = {
    "message_too_large": ({"max.message.bytes": "2000"}, {"key": "k", "value": "x" * 5000}),
    "keyless_on_compacted": ({"cleanup.policy": "compact"}, {"value": "no key"}),
    # A record from 2023, on a topic that takes records up to an hour old.
    "timestamp_out_of_bounds": (
        {"message.timestamp.before.max.ms": "3600000"},
        {"key": "k", "value": "old", "timestamp": 1_700_000_000_000},
    ),
}
EXPECTED_CODE = {
    "message_too_large": "message_size_too_large",
    "keyless_on_compacted": "unknown",
    "timestamp_out_of_bounds": "invalid_timestamp",
}


def create(kafka, configs):
    from confluent_kafka.admin import AdminClient, NewTopic

    name = topic_name("refuse")
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(20)
    return name


def good(n):
    return {"key": "k", "value": f"small-{n}"}


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_rest_produce_recovers_after_a_refused_record(kafka, refusal, caplog):
    configs, bad = REFUSALS[refusal]
    name = create(kafka, configs)
    client = rest(kafka)
    url = produce_url(kafka, name)
    assert post(client, url, good(1)).status_code == 200
    refused = post(client, url, bad)
    assert refused.status_code == 207
    error = refused.json()["results"][0]["error"]
    assert (error["code"], error["retriable"]) == (EXPECTED_CODE[refusal], False)
    for n in (2, 3):
        answer = post(client, url, good(n))
        assert answer.status_code == 200, answer.json()
    assert "replacing the idempotent producer" in caplog.text
    values = [m.value() for m in consume_all(kafka, name, 3)]
    assert values == [b'"small-1"', b'"small-2"', b'"small-3"']  # each once, in order


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_websocket_produce_recovers_after_a_refused_record(kafka, refusal):
    configs, bad = REFUSALS[refusal]
    name = create(kafka, configs)

    async def send(comm, frame_id, record):
        await comm.send_json_to(
            {"type": "produce", "id": frame_id, "topic": name, "partition": 0, **record}
        )
        return await comm.receive_json_from(timeout=30)

    async def scenario():
        comm = await open_socket(kafka)
        await comm.receive_json_from(timeout=10)
        assert (await send(comm, "g1", good(1)))["type"] == "produced"
        refused = await send(comm, "bad", bad)
        assert (refused["type"], refused["code"]) == ("error", EXPECTED_CODE[refusal])
        for n in (2, 3):
            reply = await send(comm, f"g{n}", good(n))
            assert reply["type"] == "produced", reply
        await comm.disconnect()

    run(scenario())
    values = [m.value() for m in consume_all(kafka, name, 3)]
    assert values == [b'"small-1"', b'"small-2"', b'"small-3"']
