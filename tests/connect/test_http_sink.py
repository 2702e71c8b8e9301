"""The HTTP sink against a real HTTP server on 127.0.0.1 run by the test.

The server records each request (method, path, headers, body, the client's port) and
answers as scripted: 2xx by default, or a status with headers, after a hang, or by
dropping the connection without an answer; ``down`` drops every request. The tests drive
the task as the worker does (initialize, start, put, pre_commit, stop). Every wait is
bounded: back-offs of milliseconds, request timeouts of seconds, joins with timeouts.
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import hashlib
import hmac
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from data_plane.connect.api import (
    ConnectException,
    RetriableException,
    SinkTaskContext,
    TopicPartition,
)
from data_plane.connect.config import ConfigException
from data_plane.connect.connectors.http_sink import (
    HttpSinkConnector,
    HttpSinkTask,
    retry_after,
)
from data_plane.connect.data import (
    INT64_SCHEMA,
    STRING_SCHEMA,
    ConnectRecord,
    Schema,
    Struct,
    decimal_schema,
    struct_schema,
)

LOGGER = "data_plane.connect.connectors.http_sink"
TOPIC = "orders"


# --- the server ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b'{"ok":true}'
    hang: float = 0.0  # seconds to wait (until released) before answering
    drop: bool = False  # close the connection without an answer
    echo: bool = False  # answer with the request's headers as the body


@dataclasses.dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # by lower-case name
    body: bytes
    port: int

    def json(self) -> Any:
        return json.loads(self.body)


class Hook(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.lock = threading.Lock()
        self.requests: list[Seen] = []
        self.script: deque[Reply] = deque()
        self.down = False
        self.release = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def answer(self, *replies: Reply) -> None:
        with self.lock:
            self.script.extend(replies)

    def seen(self) -> list[Seen]:
        with self.lock:
            return list(self.requests)

    def wait_for(self, count: int, timeout: float = 2.0) -> list[Seen]:
        deadline = time.monotonic() + timeout
        while len(self.seen()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.seen()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: Hook

    def setup(self) -> None:
        super().setup()
        # The head and the body are two writes: without this, Nagle's algorithm holds the
        # body until the client's delayed ACK (40 ms a request).
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        hook = self.server
        with hook.lock:
            if hook.down:
                reply = Reply(drop=True)
            else:
                hook.requests.append(
                    Seen(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        self.client_address[1],
                    )
                )
                reply = hook.script.popleft() if hook.script else Reply()
        if reply.hang:
            hook.release.wait(reply.hang)
        if reply.drop:
            self.close_connection = True
            return
        payload = reply.body
        if reply.echo:
            payload = "\n".join(f"{k}: {v}" for k, v in self.headers.items()).encode()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_PUT = do_PATCH = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(port: int = 0) -> Hook:
    hook = Hook(port)
    threading.Thread(target=hook.serve_forever, args=(0.05,), daemon=True).start()
    return hook


def close(hook: Hook) -> None:
    hook.release.set()
    hook.shutdown()
    hook.server_close()


@pytest.fixture
def server() -> Iterator[Hook]:
    hook = serve()
    yield hook
    close(hook)


# --- the task -----------------------------------------------------------------------------------


class FakeContext(SinkTaskContext):
    def assignment(self) -> set[TopicPartition]:
        return set()

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        pass

    def request_commit(self) -> None:
        pass


MakeTask = Callable[..., HttpSinkTask]


@pytest.fixture
def make_task(server: Hook) -> Iterator[MakeTask]:
    tasks: list[HttpSinkTask] = []

    def make(url: str | None = None, **config: str) -> HttpSinkTask:
        task = HttpSinkTask()
        task.initialize(FakeContext())
        task.start(
            {
                "name": "hooks",
                "http.api.url": url or server.url,
                "retry.backoff.ms": "10",
                "retry.backoff.max.ms": "40",
                "request.timeout.ms": "2000",
                **{k.replace("_", "."): v for k, v in config.items()},
            }
        )
        tasks.append(task)
        return task

    yield make
    for task in tasks:
        task.stop()


def rec(value: Any, offset: int, partition: int = 0, schema: Schema | None = None) -> ConnectRecord:
    return ConnectRecord(
        topic=TOPIC,
        partition=partition,
        key_schema=None,
        key=None,
        value_schema=schema or (value.schema if isinstance(value, Struct) else None),
        value=value,
        kafka_offset=offset,
    )


def tp(partition: int = 0) -> TopicPartition:
    return TopicPartition(TOPIC, partition)


ORDER = struct_schema(
    [("id", INT64_SCHEMA), ("item", STRING_SCHEMA), ("price", decimal_schema(2))],
    name="shop.Order",
)


def order(n: int) -> Struct:
    return Struct(ORDER, {"id": n, "item": f"item-{n}", "price": decimal.Decimal("12.34")})


# --- bodies and headers -------------------------------------------------------------------------


def test_records_go_one_per_request_in_order_over_one_connection(
    server: Hook, make_task: MakeTask
) -> None:
    task = make_task()
    task.put([rec(order(1), 0), rec({"a": [1, 2]}, 1), rec("hello", 2), rec(b"\x00\xff", 3)])
    assert task.pre_commit({tp(): 4}) == {tp(): 4}
    seen = server.seen()
    assert [r.json() for r in seen] == [
        {"id": 1, "item": "item-1", "price": 12.34},
        {"a": [1, 2]},
        "hello",
        base64.b64encode(b"\x00\xff").decode(),
    ]
    for offset, request in enumerate(seen):
        assert request.method == "POST"
        assert request.path == "/hook"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-millrace-topic"] == TOPIC
        assert request.headers["x-millrace-partition"] == "0"
        assert request.headers["x-millrace-offset"] == str(offset)
        assert "authorization" not in request.headers
        assert "x-millrace-signature" not in request.headers
    deliveries = [uuid.UUID(r.headers["x-millrace-delivery"]) for r in seen]
    assert len(set(deliveries)) == 4
    assert len({r.port for r in seen}) == 1  # one keep-alive connection


def test_batches_are_json_arrays_and_a_partial_one_waits_for_flush(
    server: Hook, make_task: MakeTask
) -> None:
    task = make_task(
        batch_max_size="2",
        request_method="PUT",
        headers="X-Tenant: acme|X-Trace:a:b:c",
    )
    task.put([rec({"n": n}, n) for n in range(5)])
    assert [r.json() for r in server.seen()] == [[{"n": 0}, {"n": 1}], [{"n": 2}, {"n": 3}]]
    assert task.pre_commit({tp(): 5}) == {tp(): 5}
    seen = server.seen()
    assert seen[2].json() == [{"n": 4}]  # still an array
    assert [r.method for r in seen] == ["PUT"] * 3
    assert [r.headers["x-millrace-offset"] for r in seen] == ["0", "2", "4"]
    assert all(r.headers["x-tenant"] == "acme" for r in seen)
    assert all(r.headers["x-trace"] == "a:b:c" for r in seen)


def test_string_bodies_are_the_value_as_text(server: Hook, make_task: MakeTask) -> None:
    task = make_task(request_body_format="string", request_method="PATCH")
    task.put([rec("plain text", 0), rec(b"\x01raw", 1), rec({"k": "v"}, 2)])
    task.pre_commit({tp(): 3})
    seen = server.seen()
    assert [(r.method, r.body, r.headers["content-type"]) for r in seen] == [
        ("PATCH", b"plain text", "text/plain; charset=utf-8"),
        ("PATCH", b"\x01raw", "application/octet-stream"),
        ("PATCH", b'{"k":"v"}', "application/json"),
    ]


@pytest.mark.parametrize("behavior", ["ignore", "log", "fail"])
def test_null_values(
    server: Hook, make_task: MakeTask, behavior: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    task = make_task(behavior_on_null_values=behavior)
    if behavior == "fail":
        with pytest.raises(ConnectException, match=r"orders-0@1.*tombstone"):
            task.put([rec("a", 0), rec(None, 1), rec("b", 2)])
        return
    task.put([rec("a", 0), rec(None, 1), rec("b", 2)])
    assert task.pre_commit({tp(): 3}) == {tp(): 3}
    assert [r.json() for r in server.seen()] == ["a", "b"]
    assert ("tombstone" in caplog.text) == (behavior == "log")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"auth_type": "basic", "connection_user": "ann", "connection_password": "pw-Secret1"},
            "Basic " + base64.b64encode(b"ann:pw-Secret1").decode(),
        ),
        ({"auth_type": "bearer", "bearer_token": "tok-Secret2"}, "Bearer tok-Secret2"),
    ],
)
def test_auth(server: Hook, make_task: MakeTask, config: dict[str, str], expected: str) -> None:
    task = make_task(**config)
    task.put([rec("x", 0)])
    assert server.seen()[0].headers["authorization"] == expected


def test_signature_verifies_and_a_retry_keeps_the_delivery_id(
    server: Hook, make_task: MakeTask
) -> None:
    secret = "whsec-0123456789"
    server.answer(Reply(500))
    task = make_task(hmac_secret=secret)
    before = int(time.time())
    task.put([rec(order(7), 41)])
    first, second = server.seen()
    assert first.body == second.body
    assert first.headers["x-millrace-delivery"] == second.headers["x-millrace-delivery"]
    for request in (first, second):
        found = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", request.headers["x-millrace-signature"])
        assert found is not None
        stamp = int(found.group(1))
        assert before <= stamp <= time.time() + 1
        expected = hmac.new(
            secret.encode(), f"{stamp}.".encode() + request.body, hashlib.sha256
        ).hexdigest()
        assert hmac.compare_digest(found.group(2), expected)
        # Another body does not verify under that signature.
        forged = hmac.new(secret.encode(), f"{stamp}.".encode() + b"{}", hashlib.sha256)
        assert not hmac.compare_digest(found.group(2), forged.hexdigest())


def test_the_delivery_id_is_the_same_when_the_records_are_sent_again(
    server: Hook, make_task: MakeTask
) -> None:
    make_task().put([rec("x", 5)])
    make_task().put([rec("x", 5), rec("y", 6)])  # a restarted task
    ids = [r.headers["x-millrace-delivery"] for r in server.seen()]
    assert ids[0] == ids[1] != ids[2]


# --- retries and failures -----------------------------------------------------------------------


def test_retried_statuses_back_off_until_success(server: Hook, make_task: MakeTask) -> None:
    server.answer(Reply(500), Reply(502), Reply(408), Reply(429))
    task = make_task(retry_backoff_ms="20", retry_backoff_max_ms="40")
    started = time.monotonic()
    task.put([rec("x", 0)])
    elapsed = time.monotonic() - started
    seen = server.seen()
    assert len(seen) == 5
    assert {r.body for r in seen} == {b'"x"'}
    # Waits of at least half of 20, 40, 40 and 40 ms (doubled, capped, jittered).
    assert 0.07 <= elapsed < 2
    assert task.pre_commit({tp(): 1}) == {tp(): 1}


def test_retry_after_is_honoured_and_capped(server: Hook, make_task: MakeTask) -> None:
    server.answer(Reply(429, {"Retry-After": "1"}))
    task = make_task(retry_backoff_max_ms="3000")
    started = time.monotonic()
    task.put([rec("x", 0)])
    assert 0.95 <= time.monotonic() - started < 2.5
    assert len(server.seen()) == 2

    server.answer(Reply(503, {"Retry-After": "30"}))
    capped = make_task(retry_backoff_max_ms="100")
    started = time.monotonic()
    capped.put([rec("y", 1)])
    assert time.monotonic() - started < 1
    assert len(server.seen()) == 4


def test_retry_after_reads_seconds_and_dates() -> None:
    now = 1_700_000_000.0
    assert retry_after("7", now) == 7
    assert retry_after("Tue, 14 Nov 2023 22:13:40 GMT", now) == 20
    assert retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now) == 0  # past
    assert retry_after("soon", now) is None
    assert retry_after(None, now) is None


def test_a_400_fails_the_task_at_once(server: Hook, make_task: MakeTask) -> None:
    server.answer(Reply(400, body=b'{"error":"bad payload"}'))
    task = make_task(url=server.url + "?key=query-Secret3")
    with pytest.raises(ConnectException) as failed:
        task.put([rec("x", 9)])
    message = str(failed.value)
    assert f"http://127.0.0.1:{server.port}/hook" in message
    assert "400" in message and "bad payload" in message and "orders-0@9" in message
    assert "query-Secret3" not in message
    assert len(server.seen()) == 1  # not retried
    assert server.seen()[0].path == "/hook?key=query-Secret3"
    # The worker commits on its way out: nothing is sent again, nothing failed committed.
    assert task.pre_commit({tp(): 9}) == {tp(): 9}
    assert task.pre_commit({tp(): 10}) == {tp(): 9}
    with pytest.raises(ConnectException, match="400"):
        task.put([rec("y", 10)])
    assert len(server.seen()) == 1


def test_retries_spent_fail_the_task(server: Hook, make_task: MakeTask) -> None:
    server.answer(*[Reply(503)] * 3)
    task = make_task(max_retries="2")
    with pytest.raises(ConnectException, match=r"503.*after 3 attempt"):
        task.put([rec("x", 0)])
    assert len(server.seen()) == 3


@pytest.mark.parametrize("behavior", ["ignore", "log"])
def test_behavior_on_error_skips_failed_records(
    server: Hook, make_task: MakeTask, behavior: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    server.answer(Reply(400), Reply(404))
    task = make_task(behavior_on_error=behavior)
    task.put([rec("a", 0), rec("b", 1), rec("c", 2)])
    assert task.pre_commit({tp(): 3}) == {tp(): 3}
    assert [r.json() for r in server.seen()] == ["a", "b", "c"]  # each tried once
    logged = "400" in caplog.text and "404" in caplog.text and "skipped" in caplog.text
    assert logged == (behavior == "log")


def test_pre_commit_commits_only_delivered_records(server: Hook, make_task: MakeTask) -> None:
    task = make_task(batch_max_size="2", max_retries="1")
    p0, p1, p2 = tp(0), tp(1), tp(2)
    task.put([rec("a", 0, 0), rec("b", 0, 1)])  # delivered
    task.put([rec("c", 1, 0)])  # buffered: half a request
    server.down = True  # connections dropped without an answer
    with pytest.raises(RetriableException, match="RemoteDisconnected"):
        task.put([rec("d", 0, 2)])
    offsets = {p0: 2, p1: 1, p2: 1}
    assert task.pre_commit(offsets) == {p0: 1, p1: 1, p2: 0}
    server.down = False
    task.put([rec("d", 0, 2)])  # the worker puts the batch again: not taken twice
    assert task.pre_commit(offsets) == offsets
    assert [r.json() for r in server.seen()] == [["a", "b"], ["c", "d"]]


def test_an_unreachable_server_keeps_the_records_until_it_is_back(make_task: MakeTask) -> None:
    with socket.socket() as reserved:  # bound, not listening: connections are refused
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
        task = make_task(url=f"http://127.0.0.1:{port}/in", max_retries="2")
        with pytest.raises(RetriableException, match=r"Connection ?Refused"):
            task.put([rec("a", 0), rec("b", 1)])
        assert task.pre_commit({tp(): 2}) == {tp(): 0}
    back = serve(port)
    try:
        task.put([rec("a", 0), rec("b", 1)])  # put again by the worker
        assert task.pre_commit({tp(): 2}) == {tp(): 2}
        assert [r.json() for r in back.seen()] == ["a", "b"]
    finally:
        close(back)


def _pre_commit_in_thread(task: HttpSinkTask, offsets: dict[TopicPartition, int]) -> Any:
    result: dict[str, Any] = {}

    def run() -> None:
        result["offsets"] = task.pre_commit(offsets)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_stop_ends_a_long_back_off_at_once(server: Hook, make_task: MakeTask) -> None:
    server.answer(*[Reply(503)] * 3)
    task = make_task(batch_max_size="2", retry_backoff_ms="20000", retry_backoff_max_ms="20000")
    task.put([rec("a", 0)])
    thread, result = _pre_commit_in_thread(task, {tp(): 1})
    assert len(server.wait_for(1)) == 1
    time.sleep(0.1)  # in the back-off
    started = time.monotonic()
    task.stop()
    thread.join(2)
    assert not thread.is_alive()
    assert time.monotonic() - started < 1
    assert result["offsets"] == {tp(): 0}  # nothing delivered, nothing committed
    assert len(server.seen()) == 1


def test_stop_breaks_off_a_request_in_flight(server: Hook, make_task: MakeTask) -> None:
    server.answer(Reply(hang=5))
    task = make_task(batch_max_size="2", request_timeout_ms="10000")
    task.put([rec("a", 0)])
    thread, result = _pre_commit_in_thread(task, {tp(): 1})
    assert len(server.wait_for(1)) == 1
    started = time.monotonic()
    task.stop()
    thread.join(2)
    assert not thread.is_alive()
    assert time.monotonic() - started < 1
    assert result["offsets"] == {tp(): 0}


# --- secrets ------------------------------------------------------------------------------------


def test_secrets_never_reach_logs_or_errors(
    server: Hook, make_task: MakeTask, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    password, token, secret = "pw-Hunter2-xyz", "tok-Bearer9-xyz", "whsec-Sign5-xyz"
    # The server echoes the request's headers (the Authorization among them) into its
    # answers, which the task quotes in its warnings and errors.
    server.answer(Reply(500, echo=True), Reply(400, echo=True), Reply(503, echo=True))
    basic = make_task(
        auth_type="basic",
        connection_user="ann",
        connection_password=password,
        hmac_secret=secret,
        headers="X-Api-Key:key-Header7-xyz",
    )
    with pytest.raises(ConnectException) as failed:
        basic.put([rec("x", 0)])
    bearer = make_task(auth_type="bearer", bearer_token=token, behavior_on_error="log")
    bearer.put([rec("y", 1)])
    credentials = base64.b64encode(f"ann:{password}".encode()).decode()
    text = caplog.text + str(failed.value)
    assert "[hidden]" in text  # the echoes were quoted, cleaned
    for leaked in (password, token, secret, credentials, "key-Header7-xyz"):
        assert leaked not in text
    assert server.seen()[0].headers["authorization"] == f"Basic {credentials}"


# --- configuration ------------------------------------------------------------------------------


def connector(worker: Mapping[str, str] | None = None) -> HttpSinkConnector:
    made = HttpSinkConnector()
    made.worker_config = dict(worker or {})
    return made


def errors(config: Mapping[str, str], worker: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {k: v for k, v in connector(worker).validate(config).items() if v}


def test_validate_accepts_a_good_config() -> None:
    assert errors({"http.api.url": "https://hooks.example.com/in?token=abc"}) == {}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://hooks.example.com/in", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("hooks.example.com/in", "http:// or https://"),
        ("https:///in", "no host"),
        ("https://ann:pw@hooks.example.com/", "credentials"),
        ("http://hooks.example.com:99999/", "port"),
        ("http://hooks.example.com/a b", "spaces"),
    ],
)
def test_validate_refuses_bad_urls_naming_the_key(url: str, message: str) -> None:
    found = errors({"http.api.url": url})
    assert list(found) == ["http.api.url"]
    assert message in found["http.api.url"][0]
    assert "pw@" not in found["http.api.url"][0]


def test_validate_refuses_hosts_the_worker_does_not_allow() -> None:
    worker = {"http.allowed.hosts": "hooks.example.com, 10.0.0.5:8443, [::1]:9000"}
    for allowed in (
        "https://hooks.example.com/in",
        "http://HOOKS.example.com:8080/in",
        "https://10.0.0.5:8443/",
        "http://[::1]:9000/",
    ):
        assert errors({"http.api.url": allowed}, worker) == {}, allowed
    for refused in ("http://127.0.0.1:8080/", "https://10.0.0.5/", "http://[::1]:9001/"):
        found = errors({"http.api.url": refused}, worker)
        assert list(found) == ["http.api.url"], refused
        assert "not among the hosts" in found["http.api.url"][0]
    assert errors({"http.api.url": "http://127.0.0.1:8080/"}) == {}  # no limit set
    with pytest.raises(ConfigException, match=r"http\.api\.url.*not among"):
        connector(worker).start({"http.api.url": "http://127.0.0.1:8080/"})


def test_validate_checks_keys_together() -> None:
    url = {"http.api.url": "https://hooks.example.com/"}
    assert list(errors({**url, "auth.type": "basic"})) == ["connection.user"]
    assert list(errors({**url, "auth.type": "bearer"})) == ["bearer.token"]
    found = errors(
        {**url, "auth.type": "bearer", "bearer.token": "t", "headers": "Authorization:x"}
    )
    assert list(found) == ["headers"]
    found = errors({**url, "headers": "X-Ok:1|no colon here-Secret4"})
    assert list(found) == ["headers"] and "Secret4" not in found["headers"][0]
    assert list(errors({**url, "headers": "Host:evil"})) == ["headers"]
    assert list(errors({**url, "headers": "X-Millrace-Signature:forged"})) == ["headers"]
    found = errors({**url, "request.body.format": "string", "batch.max.size": "10"})
    assert list(found) == ["batch.max.size"]
    found = errors({**url, "retry.on.status.codes": "429,5xx,6xx"})
    assert list(found) == ["retry.on.status.codes"]
    assert list(errors({**url, "request.method": "GET"})) == ["request.method"]
    assert list(errors({})) == ["http.api.url"]


def test_the_connector_gives_each_task_the_config() -> None:
    made = connector()
    config = {"name": "hooks", "http.api.url": "https://hooks.example.com/"}
    made.start(config)
    assert made.task_configs(3) == [config] * 3
    assert made.task_class() is HttpSinkTask
