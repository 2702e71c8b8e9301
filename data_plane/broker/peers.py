"""Requests from this broker to another (the transaction coordinator's markers, the
implicit adds of transactions V2): one connection per peer, authenticated as the
broker-internal principal, reused while the peer's address stays the same and dropped
on any error (the next request connects again). Blocking: callers run it on a worker
thread."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, TypeVar

from data_plane import internal_auth
from data_plane.client.connection import Connection, KafkaClientError

R = TypeVar("R")


class PeerClient:
    def __init__(self, broker_id: int, password: str, client_id: str, timeout: float = 40.0):
        self.broker_id = broker_id
        self._password = password
        self._client_id = f"{client_id}-{broker_id}"
        self._timeout = timeout
        self._conns: dict[int, tuple[tuple[str, int], Connection]] = {}
        self._locks: dict[int, threading.Lock] = defaultdict(threading.Lock)

    def request(
        self,
        peer: int,
        address: tuple[str, int],
        key: int,
        version: int,
        body: Any,
        answer: type[R],
    ) -> R:
        """One request to ``peer`` at ``address``; raises KafkaClientError or OSError."""
        with self._locks[peer]:
            try:
                conn = self._connection(peer, address)
                result: R = conn.request(key, version, body, answer)
                return result
            except (KafkaClientError, OSError):
                self._drop(peer)
                raise

    def _connection(self, peer: int, address: tuple[str, int]) -> Connection:
        held = self._conns.get(peer)
        if held is not None and held[0] == address:
            return held[1]
        self._drop(peer)
        conn = Connection(*address, client_id=self._client_id, timeout=self._timeout)
        try:
            conn.authenticate(internal_auth.MECHANISM, internal_auth.BROKER_USER, self._password)
        except BaseException:
            conn.close()
            raise
        self._conns[peer] = (address, conn)
        return conn

    def _drop(self, peer: int) -> None:
        held = self._conns.pop(peer, None)
        if held is not None:
            held[1].close()

    def close(self) -> None:
        for peer in list(self._conns):
            with self._locks[peer]:
                self._drop(peer)
