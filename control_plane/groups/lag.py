"""What a consumer group looks like from outside: members, assignments, offsets, lag.

Membership and committed offsets come from the database (the coordinator writes them);
log start/end offsets and record timestamps come from the brokers, asked through the
internal principal (``control_plane.catalog.brokers``). Lag follows Kafka's tools:

* ``lag`` = log end offset (the high watermark: what consumers can read) - committed
  offset, in records. A partition assigned to a member that has not committed yet counts
  from the log start offset (``lag_basis`` "log_start"; "committed" otherwise): the
  broker does not know the member's ``auto.offset.reset``, and a new group reading a
  backlog starts there, so leaving such partitions out understated the lag of every
  group that was still catching up. None where neither is known.
* ``lag_seconds`` = how old the next record the group will read is: now - the timestamp
  of the first record at that offset (0 when nothing is waiting). It uses the records'
  own timestamps, so with CreateTime it is as right as the producers' clocks.

If the brokers cannot be asked, the database's part is still served and ``offsets_error``
says why the rest is missing.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import groupby
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from control_plane.catalog.brokers import KafkaClientError, broker_client
from control_plane.catalog.models import Topic
from control_plane.core.errors import InvalidInput, Unavailable
from control_plane.groups.models import CommittedOffset, ConsumerGroup, GroupType, LagSample
from control_plane.tenancy.models import Tenant
from data_plane.client import EARLIEST, LATEST, ClusterClient
from data_plane.groups.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
)
from data_plane.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
Visible = Callable[[str], bool]


def _everything(_topic: str) -> bool:
    return True


def compute_lag(
    committed: int | None, end: int | None, first_timestamp: int | None, now_ms: int
) -> tuple[int | None, float | None]:
    """(lag in records, lag in seconds) for one partition; None where unknown."""
    if committed is None or end is None:
        return None, None
    lag = max(0, end - committed)
    if lag == 0:
        return 0, 0.0
    if first_timestamp is None or first_timestamp < 0:
        return lag, None
    return lag, round(max(0, now_ms - first_timestamp) / 1000, 3)


@dataclass
class LogState:
    """Per partition: (log start, log end, timestamp of the record at the committed offset)."""

    start: dict[TopicPartition, int] = field(default_factory=dict)
    end: dict[TopicPartition, int] = field(default_factory=dict)
    next_timestamp: dict[TopicPartition, int | None] = field(default_factory=dict)
    errors: dict[TopicPartition, str] = field(default_factory=dict)
    failure: str | None = None


@dataclass(frozen=True)
class LogQuery:
    """One caller's question for ``read_log_states``: these partitions, with these
    committed offsets, and these partitions read from the log start (no commit yet)."""

    partitions: frozenset[TopicPartition]
    committed: dict[TopicPartition, int]
    from_start: frozenset[TopicPartition] = frozenset()


def read_log_state(
    client: ClusterClient,
    partitions: Iterable[TopicPartition],
    committed: dict[TopicPartition, int],
    *,
    with_start: bool = True,
    from_start: Iterable[TopicPartition] = (),
) -> LogState:
    """Log start and end of ``partitions``, and the timestamp of the next record to read:
    at the committed offset, or at the log start for ``from_start`` (no commit yet)."""
    query = LogQuery(frozenset(partitions), committed, frozenset(from_start))
    return read_log_states(client, [query], with_start=with_start)[0]


def read_log_states(
    client: ClusterClient,
    queries: list[LogQuery],
    *,
    with_start: bool = True,
    all_starts: bool = True,
) -> list[LogState]:
    """``read_log_state`` for many callers at once (every group of a page): the log ends
    and starts of all their partitions in one ListOffsets round, and the next records'
    timestamps in as few Fetch rounds as the distinct offsets per partition need."""
    states = [LogState() for _ in queries]
    wanted = sorted({tp for q in queries for tp in q.partitions})
    if not wanted:
        return states
    end: dict[TopicPartition, int] = {}
    start: dict[TopicPartition, int] = {}
    errors: dict[TopicPartition, str] = {}
    for tp, answer in client.list_offsets(dict.fromkeys(wanted, LATEST)).items():
        if answer.error == ErrorCode.NONE:
            end[tp] = answer.offset
        else:
            errors[tp] = ErrorCode(answer.error).name
    # Log starts: of every partition, or (``all_starts=False``, for totals) only where lag
    # counts from the log start.
    starting = end if all_starts else {tp for q in queries for tp in q.from_start if tp in end}
    if with_start and starting:
        # The same partitions as a moment ago: the leaders just learned still hold.
        earliest = client.list_offsets(dict.fromkeys(starting, EARLIEST), refresh=False)
        for tp, answer in earliest.items():
            if answer.error == ErrorCode.NONE:
                start[tp] = answer.offset
    # Each round asks one offset per partition; a partition two callers read from different
    # offsets goes into two rounds.
    rounds: list[dict[TopicPartition, int]] = []
    asked: list[dict[TopicPartition, int]] = []  # per query: partition -> its round
    for q in queries:
        basis = {tp: o for tp, o in q.committed.items() if tp in q.partitions}
        for tp in q.from_start:
            if tp in start:
                basis[tp] = start[tp]
        mine: dict[TopicPartition, int] = {}
        for tp, offset in basis.items():
            if tp not in end or offset >= end[tp]:
                continue
            for number, offsets in enumerate(rounds):
                if offsets.get(tp, offset) == offset:
                    offsets[tp] = offset
                    mine[tp] = number
                    break
            else:
                rounds.append({tp: offset})
                mine[tp] = len(rounds) - 1
        asked.append(mine)
    answers = [client.positions(offsets) for offsets in rounds]
    for q, state, mine in zip(queries, states, asked, strict=True):
        for tp in q.partitions:
            if tp in end:
                state.end[tp] = end[tp]
            if tp in start:
                state.start[tp] = start[tp]
            if tp in errors:
                state.errors[tp] = errors[tp]
        for tp, number in mine.items():
            position = answers[number][tp]
            state.next_timestamp[tp] = (
                position.timestamp if position.error == ErrorCode.NONE else None
            )
    return states


class Brokers:
    """The tenant's brokers for one request or job; remembers why they could not answer."""

    def __init__(self, tenant: Tenant) -> None:
        self.client: ClusterClient | None = None
        self.failure: str | None = None
        try:
            self.client = broker_client(tenant)
        except Unavailable as exc:
            self.failure = exc.message

    def __enter__(self) -> Brokers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()

    def log_state(
        self,
        partitions: Iterable[TopicPartition],
        committed: dict[TopicPartition, int],
        *,
        with_start: bool = True,
        from_start: Iterable[TopicPartition] = (),
    ) -> LogState:
        if self.client is None:
            return LogState(failure=self.failure)
        try:
            return read_log_state(
                self.client, partitions, committed, with_start=with_start, from_start=from_start
            )
        except KafkaClientError as exc:
            self.failure = f"the brokers could not be asked: {exc}"
            self.client.close()
            self.client = None
            return LogState(failure=self.failure)

    def log_states(self, queries: list[LogQuery], *, all_starts: bool = True) -> list[LogState]:
        """``log_state`` for many queries in a few rounds (``read_log_states``)."""
        if self.client is None:
            return [LogState(failure=self.failure) for _ in queries]
        try:
            return read_log_states(self.client, queries, all_starts=all_starts)
        except KafkaClientError as exc:
            self.failure = f"the brokers could not be asked: {exc}"
            self.client.close()
            self.client = None
            return [LogState(failure=self.failure) for _ in queries]

    def offsets_for_time(
        self, partitions: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]:
        """First offset at or after ``timestamp_ms`` (-1 where every record is older)."""
        if self.client is None:
            raise Unavailable(self.failure or "no broker is available")
        try:
            answers = self.client.list_offsets(dict.fromkeys(partitions, timestamp_ms))
        except KafkaClientError as exc:
            raise Unavailable(f"the brokers could not be asked: {exc}") from None
        failed = sorted(f"{t}-{p}" for (t, p), a in answers.items() if a.error)
        if failed:
            raise Unavailable(f"no offsets for {', '.join(failed)} (no leader available)")
        return {tp: a.offset for tp, a in answers.items()}


# --- members ---------------------------------------------------------------------------------


def _topic_names(group: ConsumerGroup) -> dict[str, str]:
    """Topic id (str) -> name, for the ids a consumer-protocol group's members hold."""
    ids = {t for m in group.members for key in ("assigned", "target") for t, _ in m.get(key) or []}
    if not ids:
        return {}
    rows = Topic.objects.filter(tenant_id=group.tenant_id, topic_id__in=ids)
    return {str(t.topic_id): t.name for t in rows}


def _by_name(parts: list[Any], names: dict[str, str]) -> list[dict[str, Any]]:
    """[[topic id, [partition...]]...] as [{topic, partitions}] (ids of deleted topics go)."""
    out = [
        {"topic": names[str(t)], "partitions": sorted(int(p) for p in ps)}
        for t, ps in parts or []
        if str(t) in names
    ]
    return sorted(out, key=lambda a: a["topic"])


def _consumer_member(member: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """A KIP-848 member: its subscription, epoch, and current and target assignments."""
    return {
        "member_id": member["member_id"],
        "group_instance_id": member.get("instance_id"),
        "client_id": member.get("client_id", ""),
        "host": member.get("host", ""),
        "subscription": sorted(member.get("subscribed_topic_names") or []),
        "subscription_regex": member.get("subscribed_topic_regex"),
        "assignment": _by_name(member.get("assigned"), names),
        "member_epoch": member.get("member_epoch"),
        "target_assignment": _by_name(member.get("target"), names),
    }


def _decoded_member(
    group: ConsumerGroup, member: dict[str, Any], names: dict[str, str] | None = None
) -> dict[str, Any]:
    if group.group_type == GroupType.CONSUMER:
        return _consumer_member(member, names if names is not None else _topic_names(group))
    out: dict[str, Any] = {
        "member_id": member["member_id"],
        "group_instance_id": member.get("instance_id"),
        "client_id": member.get("client_id", ""),
        "host": member.get("host", ""),
        "subscription": None,
        "assignment": None,
    }
    if group.protocol_type != "consumer":
        return out  # another protocol's bytes mean nothing to us
    try:
        sub = decode_subscription(base64.b64decode(member.get("metadata", "")))
        out["subscription"] = list(sub.topics)
    except (ConsumerProtocolError, ValueError):
        pass
    raw = base64.b64decode(member.get("assignment", ""))
    if raw:
        try:
            assigned = decode_assignment(raw)
            out["assignment"] = [
                {"topic": t, "partitions": sorted(ps)} for t, ps in assigned.partitions
            ]
        except (ConsumerProtocolError, ValueError):
            pass
    return out


def _committed_rows(group: ConsumerGroup, visible: Visible) -> list[CommittedOffset]:
    rows = group.offsets.select_related("topic").order_by("topic__name", "partition")
    return [r for r in rows if visible(r.topic.name)]


@dataclass
class _GroupView:
    """What a group's offsets table is made of, before the brokers are asked."""

    members: list[dict[str, Any]]
    owner: dict[TopicPartition, dict[str, Any]]
    rows: dict[TopicPartition, CommittedOffset]

    @property
    def query(self) -> LogQuery:
        committed = {tp: r.offset for tp, r in self.rows.items()}
        # Assigned with nothing committed: lag counts from the log start.
        uncommitted = frozenset(set(self.owner) - set(self.rows))
        return LogQuery(frozenset(set(self.rows) | set(self.owner)), committed, uncommitted)


def _group_view(
    group: ConsumerGroup, visible: Visible, rows: list[CommittedOffset] | None = None
) -> _GroupView:
    names = _topic_names(group) if group.group_type == GroupType.CONSUMER else None
    members = [_decoded_member(group, m, names) for m in group.members]
    owner: dict[TopicPartition, dict[str, Any]] = {}
    for m in members:
        if m["subscription"] is not None:
            m["subscription"] = [t for t in m["subscription"] if visible(t)]
        if m.get("target_assignment") is not None:
            m["target_assignment"] = [a for a in m["target_assignment"] if visible(a["topic"])]
        if m["assignment"] is not None:
            m["assignment"] = [a for a in m["assignment"] if visible(a["topic"])]
            for a in m["assignment"]:
                for p in a["partitions"]:
                    owner[(a["topic"], p)] = m
    if rows is None:
        rows = _committed_rows(group, visible)
    return _GroupView(members, owner, {(r.topic.name, r.partition): r for r in rows})


def _offset_rows(view: _GroupView, state: LogState) -> list[dict[str, Any]]:
    now_ms = int(time.time() * 1000)
    offsets = []
    for tp in sorted(view.query.partitions):
        row, member = view.rows.get(tp), view.owner.get(tp)
        basis = "committed" if row is not None else "log_start"
        position = row.offset if row is not None else state.start.get(tp)
        lag, lag_seconds = compute_lag(
            position, state.end.get(tp), state.next_timestamp.get(tp), now_ms
        )
        offsets.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed_offset": None if row is None else row.offset,
                "committed_at": None if row is None else row.committed_at,
                "metadata": None if row is None else row.metadata,
                "log_start_offset": state.start.get(tp),
                "log_end_offset": state.end.get(tp),
                "lag": lag,
                "lag_seconds": lag_seconds,
                "lag_basis": basis if lag is not None else None,
                "member_id": None if member is None else member["member_id"],
                "client_id": None if member is None else member["client_id"],
                "host": None if member is None else member["host"],
                "error": state.errors.get(tp),
            }
        )
    return offsets


def group_offsets(
    group: ConsumerGroup, brokers: Brokers, *, visible: Visible = _everything
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(members, per-partition offsets and lag, why broker data is missing or None)."""
    view = _group_view(group, visible)
    query = view.query
    state = (
        brokers.log_state(query.partitions, query.committed, from_start=query.from_start)
        if query.partitions
        else LogState()
    )
    return view.members, _offset_rows(view, state), state.failure


def many_group_offsets(
    groups: list[ConsumerGroup], brokers: Brokers, *, visible: Visible = _everything
) -> list[tuple[list[dict[str, Any]], str | None]]:
    """``group_offsets`` (offsets and failure) of every group, asking the brokers and the
    database a fixed number of times however many groups there are. For totals: a
    partition's log start is only asked where the lag counts from it (``log_start_offset``
    is None elsewhere)."""
    rows: dict[int, list[CommittedOffset]] = {g.pk: [] for g in groups}
    committed = (
        CommittedOffset.objects.filter(group__in=[g.pk for g in groups])
        .select_related("topic")
        .order_by("topic__name", "partition")
    )
    for row in committed:
        if visible(row.topic.name):
            rows[row.group_id].append(row)
    views = [_group_view(g, visible, rows[g.pk]) for g in groups]
    states = brokers.log_states([v.query for v in views], all_starts=False)
    return [(_offset_rows(v, s), s.failure) for v, s in zip(views, states, strict=True)]


def summary_fields(group: ConsumerGroup, offsets: list[dict[str, Any]]) -> dict[str, Any]:
    lags = [o["lag"] for o in offsets if o["lag"] is not None]
    seconds = [o["lag_seconds"] for o in offsets if o["lag_seconds"] is not None]
    return {
        "group_id": group.group_id,
        "state": group.state,
        "group_type": group.group_type,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol,
        "generation": group.generation,
        "assignment_epoch": group.assignment_epoch
        if group.group_type == GroupType.CONSUMER
        else None,
        "member_count": len(group.members),
        "state_changed_at": group.state_changed_at,
        "partition_count": len(offsets),
        "total_lag": sum(lags) if lags else None,
        # Partitions whose lag counts from the log start: assigned, nothing committed yet.
        "uncommitted_partition_count": sum(1 for o in offsets if o["lag_basis"] == "log_start"),
        "max_lag_seconds": max(seconds) if seconds else None,
    }


def describe(
    tenant: Tenant, group: ConsumerGroup, *, visible: Visible = _everything
) -> dict[str, Any]:
    """A group with members, assignments and per-partition offsets and lag."""
    with Brokers(tenant) as brokers:
        members, offsets, failure = group_offsets(group, brokers, visible=visible)
    return {
        **summary_fields(group, offsets),
        "members": members,
        "offsets": offsets,
        "offsets_error": failure,
    }


def summaries(
    tenant: Tenant,
    groups: Iterable[ConsumerGroup],
    *,
    visible: Visible = _everything,
    brokers: Brokers | None = None,
) -> list[dict[str, Any]]:
    """Each group's state and lag totals (one broker connection for all of them: the
    caller's ``brokers`` if given)."""
    groups = list(groups)
    if brokers is not None:
        answers = many_group_offsets(groups, brokers, visible=visible)
    else:
        with Brokers(tenant) as own:
            answers = many_group_offsets(groups, own, visible=visible)
    return [
        {**summary_fields(group, offsets), "offsets_error": failure}
        for group, (offsets, failure) in zip(groups, answers, strict=True)
    ]


# --- offset reset plans -----------------------------------------------------------------------


def _reset_partitions(
    tenant: Tenant, group: ConsumerGroup, topics: list[dict[str, Any]] | None
) -> list[TopicPartition]:
    if not topics:
        committed = sorted(
            {(name, p) for name, p in group.offsets.values_list("topic__name", "partition")}
        )
        if not committed:
            raise InvalidInput(
                f"consumer group {group.group_id!r} has no committed offsets; "
                "name the topics to reset",
                field="topics",
            )
        return committed
    known = {t.name: t for t in Topic.objects.filter(tenant=tenant)}
    out: list[TopicPartition] = []
    for entry in topics:
        topic = known.get(entry["topic"])
        if topic is None:
            raise InvalidInput(f"topic {entry['topic']!r} does not exist", field="topics")
        indices = entry.get("partitions") or range(topic.partition_count)
        for index in indices:
            if not 0 <= index < topic.partition_count:
                raise InvalidInput(
                    f"topic {topic.name!r} has no partition {index} "
                    f"(it has {topic.partition_count})",
                    field="topics",
                )
            out.append((topic.name, index))
    return sorted(set(out))


def plan_reset(
    tenant: Tenant,
    group: ConsumerGroup,
    *,
    to: str,
    topics: list[dict[str, Any]] | None = None,
    timestamp_ms: int | None = None,
    offset: int | None = None,
) -> list[dict[str, Any]]:
    """Where each partition's committed offset would move, as Kafka's reset tool decides.

    ``earliest`` / ``latest`` are the log start / end; ``timestamp`` is the first record at
    or after it (the log end if all are older); ``offset`` is clamped into
    [log start, log end]. Partitions default to those the group has committed offsets for.
    """
    partitions = _reset_partitions(tenant, group, topics)
    previous = {
        (name, p): o
        for name, p, o in group.offsets.values_list("topic__name", "partition", "offset")
    }
    with Brokers(tenant) as brokers:
        state = brokers.log_state(partitions, {})
        if state.failure:
            raise Unavailable(state.failure)
        missing = sorted(f"{t}-{p}" for t, p in partitions if (t, p) not in state.end)
        if missing:
            raise Unavailable(f"no log offsets for {', '.join(missing)} (no leader available)")
        if to == "timestamp":
            assert timestamp_ms is not None
            found = brokers.offsets_for_time(partitions, timestamp_ms)
    plan = []
    for tp in partitions:
        start, end = state.start[tp], state.end[tp]
        if to == "earliest":
            new = start
        elif to == "latest":
            new = end
        elif to == "timestamp":
            new = found[tp] if found[tp] >= 0 else end
        elif to == "offset":
            assert offset is not None
            new = min(max(offset, start), end)
        else:
            raise InvalidInput(f"unknown reset target {to!r}", field="to")
        plan.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "previous_offset": previous.get(tp),
                "new_offset": new,
                "log_start_offset": start,
                "log_end_offset": end,
            }
        )
    return plan


# --- the lag history ---------------------------------------------------------------------------


def sample_lag() -> int:
    """Record one lag sample per partition of every group with committed offsets or
    members (whose assigned partitions without a commit count from the log start).

    Returns the number of samples written. Samples older than
    ``MILLRACE_LAG_HISTORY_HOURS`` are removed, so the series stays bounded.
    """
    now = timezone.now()
    written = 0
    groups = (
        ConsumerGroup.objects.filter(Q(offsets__isnull=False) | ~Q(members=[]))
        .distinct()
        .select_related("tenant")
        .order_by("tenant_id", "group_id")
    )
    for tenant, tenant_groups in groupby(groups, key=lambda g: g.tenant):
        topics = {t.name: t for t in Topic.objects.filter(tenant=tenant)}
        batch = list(tenant_groups)
        with Brokers(tenant) as brokers:
            answers = many_group_offsets(batch, brokers)
        for group, (offsets, failure) in zip(batch, answers, strict=True):
            if failure:
                break  # this tenant's brokers are unreachable: next tenant
            samples = [
                LagSample(
                    group=group,
                    topic=topics[o["topic"]],
                    partition=o["partition"],
                    at=now,
                    committed_offset=o["committed_offset"],
                    lag_basis=o["lag_basis"],
                    log_end_offset=o["log_end_offset"],
                    lag=o["lag"],
                    lag_seconds=o["lag_seconds"],
                )
                for o in offsets
                if o["lag"] is not None and o["topic"] in topics
            ]
            LagSample.objects.bulk_create(samples)
            written += len(samples)
    horizon = now - timedelta(hours=settings.MILLRACE_LAG_HISTORY_HOURS)
    LagSample.objects.filter(at__lt=horizon).delete()
    return written
