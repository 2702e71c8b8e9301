"""Consumer-group members as child processes, for the group benchmarks.

Each member is a confluent-kafka consumer in a process of its own (``spawn``), talking to
the benchmark over a pipe: it reports ``(kind, wall-clock time, payload)`` tuples, the
first ``("subscribe", t, [])`` just before it subscribes, then ``("assigned", t,
sorted partitions)`` on every change of its assignment. Any message from the parent
tells it to close the consumer (a clean leave) and exit. A member never outlives
``MEMBER_LIFETIME_S``, whatever the parent does; :meth:`Group.stop` kills what is left.
Used by :mod:`bench.groups` and :mod:`bench.rebalance` (whose members also report what
they fetch).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

MEMBER_LIFETIME_S = 300  # a member process never outlives this, whatever the parent does


def assignment_member(conf: dict[str, Any], topic: str, conn: Connection) -> None:
    """One group member: subscribe, poll, report every assignment change; stop when told."""
    from confluent_kafka import Consumer

    consumer = Consumer(conf)
    try:
        conn.send(("subscribe", time.time(), []))
        consumer.subscribe([topic])
        last: list[int] | None = None
        deadline = time.monotonic() + MEMBER_LIFETIME_S
        while time.monotonic() < deadline and not conn.poll():
            consumer.poll(0.01)
            now = sorted(tp.partition for tp in consumer.assignment())
            if now != last:
                conn.send(("assigned", time.time(), now))
                last = now
    finally:
        consumer.close()
        conn.close()


@dataclass
class Member:
    process: BaseProcess
    conn: Connection
    subscribed_at: float | None = None
    assignment: list[int] | None = None
    assigned_at: float = 0.0
    open: bool = True

    def take(self, kind: str, at: float, payload: Any) -> None:
        """Take in one report of this member's process."""
        if kind == "subscribe":
            self.subscribed_at = at
        else:
            self.assignment, self.assigned_at = payload, at


class Group:
    """Member processes of one consumer group, and what each last reported.

    ``target(conf, topic, conn)`` is the body of a member process; ``member`` makes the
    parent's record of one (its :meth:`Member.take` reads that body's reports).
    """

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        timeout: float,
        partitions: int,
        target: Callable[[dict[str, Any], str, Connection], None] = assignment_member,
        member: Callable[[BaseProcess, Connection], Member] = Member,
    ) -> None:
        self.conf = conf
        self.topic = topic
        self.timeout = timeout
        self.partitions = partitions
        self.members: list[Member] = []
        self._target = target
        self._member = member
        self._mp = multiprocessing.get_context("spawn")

    def start(self) -> Member:
        ours, theirs = self._mp.Pipe()
        conf = self.conf | {"client.id": f"bench-member-{len(self.members)}"}
        process = self._mp.Process(
            target=self._target, args=(conf, self.topic, theirs), daemon=True
        )
        process.start()
        theirs.close()
        member = self._member(process, ours)
        self.members.append(member)
        return member

    def pump(self, seconds: float) -> None:
        """Take in every report that arrives within ``seconds``."""
        live = [m for m in self.members if m.open]
        if not live:
            time.sleep(seconds)
            return
        ready = wait([m.conn for m in live], seconds)
        for member in live:
            if member.conn not in ready:
                continue
            try:
                while member.conn.poll():
                    member.take(*member.conn.recv())
            except (EOFError, OSError):
                member.open = False

    def settle(self, seconds: float) -> None:
        """Keep taking in reports for ``seconds`` (a pause with the group left alone)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.pump(left)

    def wait_for(self, done: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + self.timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            self.pump(0.05)
        return True

    def wait_balanced(self, members: list[Member]) -> bool:
        """Wait until ``members`` hold equal shares that together are every partition."""
        each = self.partitions // len(members)

        def balanced() -> bool:
            held = [m.assignment for m in members]
            return all(a is not None and len(a) == each for a in held) and sorted(
                p for a in held for p in a or []
            ) == list(range(self.partitions))

        return self.wait_for(balanced)

    def stop(self) -> None:
        for m in self.members:
            with contextlib.suppress(OSError):
                m.conn.send("stop")
        deadline = time.monotonic() + 15
        for m in self.members:
            m.process.join(max(0.1, deadline - time.monotonic()))
            if m.process.is_alive():
                m.process.kill()
                m.process.join(5)
            m.conn.close()


@contextlib.contextmanager
def group(
    conf: dict[str, Any], topic: str, timeout: float, partitions: int, **kwargs: Any
) -> Iterator[Group]:
    """A :class:`Group` with a fresh ``group.id``, its processes stopped at the end."""
    found = Group(
        conf | {"group.id": f"bench-{uuid.uuid4().hex[:12]}"}, topic, timeout, partitions, **kwargs
    )
    try:
        yield found
    finally:
        found.stop()
