"""The consumer group protocol of KIP-848: groups the coordinator assigns, member by member.

A member heartbeats (ConsumerGroupHeartbeat) with its subscription and the partitions it
owns; the coordinator answers with its member epoch and, when it changed, its assignment.
No member ever waits for the others: there is no join or sync barrier.

Epochs, as Kafka defines them:

* the **group epoch** goes up whenever the membership or a member's subscription changes,
  or a subscribed topic appears, disappears or gains partitions;
* the **assignment epoch** is the group epoch the target assignment was computed for (by
  the group's server-side assignor, :mod:`data_plane.groups.assignors`), lazily, on the
  next heartbeat after the group epoch moved;
* a **member epoch** is the assignment epoch the member has reconciled to.

Reconciliation is incremental: a member first gives up (revokes) the partitions it holds
that the target gives to others, keeping every other partition and its epoch; once its
heartbeat no longer reports them, it moves to the assignment epoch and receives the
partitions of its target that nobody else still holds; those still held it gets as they
are released (state ``unreleased_partitions``). So members whose partitions do not move
never stop fetching. A member that does not revoke within its rebalance timeout, or stops
heartbeating for the session timeout, is fenced: removed, its partitions freed.

Static members (an instance id) that leave with epoch -2 keep their assignment for the
session timeout; the instance rejoining with epoch 0 (under a new member id) takes it
back. A regular-expression subscription is evaluated here, against the topics of the
group's tenant that the member may describe (``resolve``), on every heartbeat.

State lives on the event loop (no locks; no awaits inside a transition) and is written
through the same :class:`~data_plane.groups.coordinator.GroupStore` as classic groups,
as a :class:`~data_plane.groups.model.GroupRecord` of type ``consumer``; an answer that
hands out a new epoch or assignment waits until that is stored, so a coordinator that
takes over (it loads the record) never knows less than the members were told.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid

from data_plane.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR
from data_plane.groups.classic_members import ClassicMembers
from data_plane.groups.clock import Clock
from data_plane.groups.consumer_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STABLE,
    STATIC_LEAVE_EPOCH,
    UNRELEASED,
    UNREVOKED,
    ConsumerConfig,
    ConsumerGroup,
    ConsumerMember,
    HeartbeatAnswer,
    Parts,
    Resolved,
    Resolver,
    from_record,
    intersect,
    minus,
    owns_only,
    still_owns,
)
from data_plane.groups.coordinator import Group, GroupCoordinator, GroupError
from data_plane.groups.model import GroupRecord, GroupState, OffsetRecord
from data_plane.groups.persistence import wait_persisted, write_group
from data_plane.protocol.errors import ErrorCode

logger = logging.getLogger("millrace.groups")

E = ErrorCode
S = GroupState

__all__ = [
    "ConsumerConfig",
    "ConsumerGroup",
    "ConsumerGroupCoordinator",
    "ConsumerMember",
    "HeartbeatAnswer",
    "Parts",
    "Resolved",
    "Resolver",
]


class ConsumerGroupCoordinator(ClassicMembers):
    """KIP-848 groups, beside the classic coordinator whose store, clock and group table
    it shares: a group id names one group of either type (an empty group changes type
    when a member of the other protocol joins it)."""

    def __init__(self, classic: GroupCoordinator, config: ConsumerConfig) -> None:
        self.classic = classic
        self.config = config
        classic.restore_consumer = self._restore
        classic.modern = self

    @property
    def clock(self) -> Clock:
        return self.classic.clock

    # --- loading --------------------------------------------------------------------------

    async def group(
        self, tenant_id: int, group_id: str, *, create: bool, resolve: Resolver | None = None
    ) -> ConsumerGroup:
        """The consumer group; with ``create`` (a member joining), a new one, or an empty
        classic group of that id turned into one, or a classic group with members upgraded
        online (needs ``resolve``)."""
        found = await self.classic.load(tenant_id, group_id)
        if isinstance(found, ConsumerGroup):
            return found
        if isinstance(found, Group) and (found.members or found.pending):
            if not create or resolve is None or not found.members:
                raise GroupError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            return self.upgrade(found, resolve)
        if not create:
            raise GroupError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        key = (tenant_id, group_id)
        if isinstance(found, Group):
            logger.info("group %s: empty classic group becomes a consumer group", group_id)
            self.classic.groups.pop(key, None)
        group = ConsumerGroup(tenant_id, group_id, state_since_ms=self.clock.wall_ms())
        self.classic.consumer_groups[key] = group
        return group

    def _restore(self, r: GroupRecord) -> ConsumerGroup:
        group = ConsumerGroup(
            r.tenant_id,
            r.group_id,
            group_epoch=r.generation,
            assignment_epoch=r.assignment_epoch,
            assignor=r.protocol_name or DEFAULT_ASSIGNOR,
            state_since_ms=r.state_since_ms,
        )
        for m in r.consumer_members:
            member = ConsumerMember(
                m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                client_id=m.client_id,
                host=m.host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                server_assignor=m.server_assignor,
                member_epoch=m.member_epoch,
                previous_member_epoch=m.previous_member_epoch,
                state=m.state,
                assigned=from_record(m.assigned),
                revoking=from_record(m.revoking),
                topics={n: (t, c) for n, t, c in m.resolved},
                classic_protocols=None
                if m.classic_protocols is None
                else list(m.classic_protocols),
                classic_session_timeout_ms=m.classic_session_timeout_ms,
            )
            group.members[member.member_id] = member
            group.target[member.member_id] = from_record(m.target)
            if member.instance_id:
                group.static[member.instance_id] = member.member_id
            for tp in member.owned():
                group.owners[tp] = member.member_id
            self._touch(group, member)
            if member.state == UNREVOKED:
                self._arm_revocation(group, member)
        group.last_state = group.state
        logger.info(
            "loaded consumer group %s/%s: %s, epoch %s, %s members",
            r.tenant_id,
            r.group_id,
            group.state,
            group.group_epoch,
            len(group.members),
        )
        return group

    # --- persistence ----------------------------------------------------------------------

    def _changed(self, group: ConsumerGroup) -> None:
        state = group.state
        if state != group.last_state:
            group.last_state = state
            group.state_since_ms = self.clock.wall_ms()
        group.version += 1
        if group.writer is None or group.writer.done():
            group.writer = asyncio.get_running_loop().create_task(self._write(group))

    async def _write(self, group: ConsumerGroup) -> None:
        classic = self.classic
        await write_group(
            group, lambda record: classic.call(classic.store.save_group, record), classic._sleep
        )

    async def _persisted(self, group: ConsumerGroup) -> bool:
        return await wait_persisted(group, lambda _: self._changed(group))

    # --- timers ---------------------------------------------------------------------------

    def _touch(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        # A classic member keeps the session timeout it asked for in JoinGroup.
        timeout_ms = member.classic_session_timeout_ms or self.config.session_timeout_ms
        member.expiry = self.clock.call_later(
            timeout_ms / 1000, self._expire, group, member.member_id
        )

    def _expire(self, group: ConsumerGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is not None:
            logger.info("group %s: member %s session expired", group.group_id, member_id)
            self._remove(group, member, "session timeout")

    def _arm_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.revocation_timer is not None:
            member.revocation_timer.cancel()
        member.revocation_timer = self.clock.call_later(
            member.rebalance_timeout_ms / 1000,
            self._revocation_expired,
            group,
            member.member_id,
            member.member_epoch,
        )

    def _revocation_expired(self, group: ConsumerGroup, member_id: str, epoch: int) -> None:
        member = group.members.get(member_id)
        if member is not None and member.state == UNREVOKED and member.member_epoch == epoch:
            logger.info(
                "group %s: member %s did not revoke within its rebalance timeout",
                group.group_id,
                member_id,
            )
            self._remove(group, member, "rebalance timeout")

    # --- membership -----------------------------------------------------------------------

    def _set_partitions(
        self, group: ConsumerGroup, member: ConsumerMember, assigned: Parts, revoking: Parts
    ) -> None:
        for tp in member.owned():
            if group.owners.get(tp) == member.member_id:
                del group.owners[tp]
        member.assigned, member.revoking = assigned, revoking
        for tp in member.owned():
            group.owners[tp] = member.member_id

    def _remove(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        """Fence a member: its partitions are free, and the group rebalances."""
        for timer in (member.expiry, member.revocation_timer):
            if timer is not None:
                timer.cancel()
        self._set_partitions(group, member, {}, {})
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        if member.instance_id and group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]
        group.group_epoch += 1
        logger.info(
            "group %s: member %s removed (%s); group epoch %s",
            group.group_id,
            member.member_id,
            reason,
            group.group_epoch,
        )
        if member.classic or not self.maybe_downgrade(group):
            self._changed(group)

    # --- ConsumerGroupHeartbeat -----------------------------------------------------------

    async def heartbeat(
        self,
        tenant_id: int,
        group_id: str,
        *,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: Parts | None,
        client_id: str,
        host: str,
        resolve: Resolver,
        client_member_id: bool,
    ) -> HeartbeatAnswer:
        regex = self._validate(
            group_id,
            member_id,
            member_epoch,
            instance_id,
            rack_id,
            rebalance_timeout_ms,
            subscribed_topic_names,
            subscribed_topic_regex,
            server_assignor,
            owned,
            client_member_id,
        )
        joining = member_epoch == JOIN_EPOCH
        if joining:
            # Resolve before anything changes: a subscription refused (a topic the principal
            # may not describe) must leave the group as it was, not upgraded or joined.
            names = tuple(sorted(set(subscribed_topic_names or ())))
            topics = resolve(names, regex)
        group = await self.group(tenant_id, group_id, create=joining, resolve=resolve)
        if not member_id:
            member_id = str(uuid.uuid4())  # v0: the coordinator names new members
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return await self._leave(group, member_id, member_epoch, instance_id)
        try:
            if (
                len(group.members) >= self.config.max_size
                and member_id not in group.members
                and not (instance_id and instance_id in group.static)
            ):
                raise GroupError(
                    E.GROUP_MAX_SIZE_REACHED,
                    f"The consumer group has reached its maximum capacity of "
                    f"{self.config.max_size} members.",
                )
            if not joining:
                known = self._known(group, member_id, member_epoch, instance_id, owned)
                names = (
                    tuple(sorted(set(subscribed_topic_names)))
                    if subscribed_topic_names is not None
                    else known.subscribed_topic_names
                )
                if subscribed_topic_regex is None and known.subscribed_topic_regex:
                    regex = re.compile(known.subscribed_topic_regex)
                topics = resolve(names, regex)
        except Exception:
            self._forget_if_new(group)
            raise
        member, is_new = self._member(group, member_id, member_epoch, instance_id, owned)
        before_assigned = dict(member.assigned)
        before_epoch = member.member_epoch
        before_state = member.state
        changed = is_new
        if rack_id is not None and rack_id != member.rack_id:
            member.rack_id, changed = rack_id, True
        if rebalance_timeout_ms != -1 and rebalance_timeout_ms != member.rebalance_timeout_ms:
            member.rebalance_timeout_ms, changed = rebalance_timeout_ms, True
        bump = is_new
        if server_assignor is not None and server_assignor != member.server_assignor:
            member.server_assignor, changed = server_assignor, True
        if subscribed_topic_names is not None and names != member.subscribed_topic_names:
            member.subscribed_topic_names, changed, bump = names, True, True
        if subscribed_topic_regex is not None:
            value = subscribed_topic_regex or None
            if value != member.subscribed_topic_regex:
                member.subscribed_topic_regex, changed, bump = value, True, True
        if client_id != member.client_id or host != member.host:
            member.client_id, member.host, changed = client_id, host, True
        if topics != member.topics:
            member.topics, changed, bump = topics, True, True
        assignor = self._group_assignor(group)
        if assignor != group.assignor:
            group.assignor, bump = assignor, True
        if bump:
            group.group_epoch += 1
            logger.info(
                "group %s: epoch %s (member %s %s)",
                group.group_id,
                group.group_epoch,
                member.member_id,
                "joined" if is_new else "changed its subscription",
            )
        if group.group_epoch > group.assignment_epoch:
            self._update_target(group)
        self._reconcile(group, member, owned)
        self._touch(group, member)
        changed = changed or (
            member.member_epoch != before_epoch
            or member.state != before_state
            or member.assigned != before_assigned
            or bump
        )
        if changed:
            self._changed(group)
            if not await self._persisted(group):
                raise GroupError(E.COORDINATOR_NOT_AVAILABLE, "storing the group failed")
        # Kafka answers with the assignment on a full request (a join, or what a client sends
        # after an error) or when it changed. librdkafka resends a timed-out request as it
        # was, so a member whose answer was lost after the coordinator acted on it would
        # never learn its assignment (a member asked to revoke would hold everything until
        # its rebalance timeout). So it is also sent while the member is reconciling, and
        # when the request's epoch is behind the one answered; clients ignore an assignment
        # they already have.
        full = member_epoch == JOIN_EPOCH or (
            rebalance_timeout_ms != -1
            and (subscribed_topic_names is not None or subscribed_topic_regex is not None)
            and owned is not None
        )
        send = (
            full
            or member.assigned != before_assigned
            or member.state != STABLE
            or member_epoch != member.member_epoch
        )
        return HeartbeatAnswer(
            member.member_id,
            member.member_epoch,
            self.config.heartbeat_interval_ms,
            dict(member.assigned) if send else None,
        )

    def _known(
        self,
        group: ConsumerGroup,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        owned: Parts | None,
    ) -> ConsumerMember:
        """A member heartbeating with its epoch, checked as :meth:`_member` checks it
        (without changing anything)."""
        member, _ = self._member(group, member_id, member_epoch, instance_id, owned)
        return member

    def _forget_if_new(self, group: ConsumerGroup) -> None:
        """A group created by a request that was then refused does not stay behind."""
        key = (group.tenant_id, group.group_id)
        if not group.members and group.group_epoch == 0 and group.version == 0:
            if self.classic.consumer_groups.get(key) is group:
                del self.classic.consumer_groups[key]

    def _validate(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        names: list[str] | None,
        regex: str | None,
        server_assignor: str | None,
        owned: Parts | None,
        client_member_id: bool,
    ) -> re.Pattern[str] | None:
        """Kafka's checks of a heartbeat, in its order; the compiled regex if one came."""

        def invalid(message: str) -> GroupError:
            return GroupError(E.INVALID_REQUEST, message)

        if not group_id:
            raise invalid("GroupId can't be empty.")
        if instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if rack_id == "":
            raise invalid("RackId can't be empty.")
        if member_epoch > 0 or member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if not member_id:
                raise invalid("MemberId can't be empty.")
            if member_epoch == STATIC_LEAVE_EPOCH and instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif member_epoch == JOIN_EPOCH:
            if client_member_id and not member_id:
                raise invalid("MemberId can't be empty.")
            if rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if not names and not regex:
                raise invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        else:
            raise invalid("MemberEpoch is invalid.")
        if server_assignor is not None and server_assignor not in ASSIGNORS:
            raise GroupError(
                E.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {server_assignor} is not supported. Supported assignors: "
                f"{', '.join(sorted(ASSIGNORS))}.",
            )
        if regex:
            try:
                return re.compile(regex)
            except re.error as exc:
                raise GroupError(
                    E.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex {regex!r} is not a valid regular expression: {exc}",
                ) from None
        return None

    def _member(
        self,
        group: ConsumerGroup,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        owned: Parts | None,
    ) -> tuple[ConsumerMember, bool]:
        """The heartbeating member (created, rejoined or replacing its static instance),
        and whether it is new to the group."""
        if member_epoch == JOIN_EPOCH:
            if instance_id is not None:
                previous_id = group.static.get(instance_id)
                if previous_id is not None and previous_id != member_id:
                    previous = group.members[previous_id]
                    if previous.member_epoch != STATIC_LEAVE_EPOCH:
                        raise GroupError(
                            E.UNRELEASED_INSTANCE_ID,
                            f"Static member {previous_id} with instance id {instance_id} "
                            f"is not released yet.",
                        )
                    return self._replace(group, previous, member_id), False
            known = group.members.get(member_id)
            if known is not None:
                # Rejoining (after a fence, or a lost answer): it owns nothing now.
                self._set_partitions(group, known, {}, {})
                known.member_epoch = known.previous_member_epoch = 0
                known.state = STABLE
                return known, False
            member = ConsumerMember(member_id, instance_id=instance_id)
            group.members[member_id] = member
            if instance_id is not None:
                group.static[instance_id] = member_id
            logger.info("group %s: member %s joins", group.group_id, member_id)
            return member, True
        if instance_id is not None:
            known_id = group.static.get(instance_id)
            if known_id is None:
                raise GroupError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if known_id != member_id:
                raise GroupError(
                    E.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} was fenced "
                    f"by member {known_id}.",
                )
        found = group.members.get(member_id)
        if found is None:
            raise GroupError(
                E.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        member = found
        if member_epoch > member.member_epoch:
            raise GroupError(
                E.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({member_epoch}) than "
                f"the one known by the group coordinator ({member.member_epoch}). The member "
                "must abandon all its partitions and rejoin.",
            )
        if member_epoch < member.member_epoch and (
            member_epoch != member.previous_member_epoch or not owns_only(owned, member.assigned)
        ):
            raise GroupError(
                E.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({member_epoch}) than "
                f"the one known by the group coordinator ({member.member_epoch}). The member "
                "must abandon all its partitions and rejoin.",
            )
        return member, False

    def _replace(
        self, group: ConsumerGroup, previous: ConsumerMember, member_id: str
    ) -> ConsumerMember:
        """A static instance rejoins under a new member id and takes over its assignment."""
        for timer in (previous.expiry, previous.revocation_timer):
            if timer is not None:
                timer.cancel()
        member = ConsumerMember(
            member_id,
            instance_id=previous.instance_id,
            rack_id=previous.rack_id,
            client_id=previous.client_id,
            host=previous.host,
            rebalance_timeout_ms=previous.rebalance_timeout_ms,
            subscribed_topic_names=previous.subscribed_topic_names,
            subscribed_topic_regex=previous.subscribed_topic_regex,
            server_assignor=previous.server_assignor,
            member_epoch=0,
            previous_member_epoch=0,
            state=previous.state,
            topics=previous.topics,
        )
        owned_assigned, owned_revoking = previous.assigned, previous.revoking
        self._set_partitions(group, previous, {}, {})
        del group.members[previous.member_id]
        group.members[member_id] = member
        group.target[member_id] = group.target.pop(previous.member_id, {})
        assert member.instance_id is not None
        group.static[member.instance_id] = member_id
        self._set_partitions(group, member, owned_assigned, owned_revoking)
        logger.info(
            "group %s: static member %s rejoins as %s (was %s)",
            group.group_id,
            member.instance_id,
            member_id,
            previous.member_id,
        )
        return member

    async def _leave(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None
    ) -> HeartbeatAnswer:
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(
                E.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        if member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # It will be back: keep its partitions for the session timeout.
            logger.info("group %s: static member %s leaves for now", group.group_id, member_id)
            member.member_epoch = STATIC_LEAVE_EPOCH
            self._changed(group)
        else:
            self._remove(group, member, "left the group")
        await self._persisted(group)
        return HeartbeatAnswer(member_id, member_epoch, self.config.heartbeat_interval_ms, None)

    # --- assignment -----------------------------------------------------------------------

    def _group_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: by name), else the default."""
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return DEFAULT_ASSIGNOR
        return min(votes, key=lambda name: (-votes[name], name))

    def _update_target(self, group: ConsumerGroup) -> None:
        partitions: dict[str, int] = {}
        subscriptions: dict[str, frozenset[str]] = {}
        for m in group.members.values():
            ids = set()
            for topic_id, count in m.topics.values():
                partitions[topic_id] = count
                ids.add(topic_id)
            subscriptions[m.member_id] = frozenset(ids)
        assignor = ASSIGNORS.get(group.assignor, ASSIGNORS[DEFAULT_ASSIGNOR])
        group.target = dict(assignor.assign(subscriptions, partitions, group.target))
        group.assignment_epoch = group.group_epoch
        logger.info(
            "group %s: target assignment for epoch %s (%s, %s members, %s partitions)",
            group.group_id,
            group.assignment_epoch,
            assignor.name,
            len(subscriptions),
            sum(partitions.values()),
        )

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Parts | None) -> None:
        """Move the member towards its target, one safe step (Kafka's reconciliation)."""
        if member.state == STABLE:
            if member.member_epoch == group.assignment_epoch:
                return
            self._next(group, member, member.member_epoch, owned)
        elif member.state == UNREVOKED:
            if still_owns(owned, member.revoking):
                return
            self._next(group, member, member.member_epoch + 1, owned)
        else:
            self._next(group, member, member.member_epoch, owned)

    def _next(
        self, group: ConsumerGroup, member: ConsumerMember, epoch: int, owned: Parts | None
    ) -> None:
        target = group.target.get(member.member_id, {})
        keep = intersect(member.assigned, target)
        revoke = minus(member.assigned, keep)
        wanted = minus(target, keep)
        free: Parts = {}
        unreleased = False
        for topic, parts in wanted.items():
            available = frozenset(
                p
                for p in parts
                if group.owners.get((topic, p), member.member_id) == member.member_id
            )
            unreleased = unreleased or len(available) < len(parts)
            if available:
                free[topic] = available
        was_unrevoked = member.state == UNREVOKED
        epoch = min(epoch, group.assignment_epoch)
        if revoke and still_owns(owned, revoke):
            # Give up what moves first; keep the rest, and the epoch.
            member.state = UNREVOKED
            self._set_partitions(group, member, keep, revoke)
            if member.member_epoch != epoch:
                member.previous_member_epoch, member.member_epoch = member.member_epoch, epoch
            if not was_unrevoked:
                self._arm_revocation(group, member)
            return
        if member.revocation_timer is not None:
            member.revocation_timer.cancel()
            member.revocation_timer = None
        assigned = dict(keep)
        for topic, parts in free.items():
            assigned[topic] = assigned.get(topic, frozenset()) | parts
        member.state = UNRELEASED if unreleased else STABLE
        self._set_partitions(group, member, assigned, {})
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch

    # --- offsets --------------------------------------------------------------------------

    def check_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int
    ) -> None:
        """May this committer commit to the group (OffsetCommit)? Kafka's rules."""
        if member_epoch < 0 and not group.members:
            return  # an admin tool or a consumer outside group management
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(
                E.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        if member.classic:
            if member_epoch != member.member_epoch:
                raise GroupError(
                    E.ILLEGAL_GENERATION,
                    f"The received generation id {member_epoch} does not match the expected "
                    f"member epoch {member.member_epoch}.",
                )
            return
        if api_version < 9:
            raise GroupError(
                E.UNSUPPORTED_VERSION,
                "OffsetCommit version 9 or above must be used by members using the "
                "consumer group protocol",
            )
        if member_epoch != member.member_epoch:
            raise GroupError(
                E.STALE_MEMBER_EPOCH,
                f"The received member epoch {member_epoch} does not match the expected "
                f"member epoch {member.member_epoch}.",
            )

    def check_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
        """May this member read the group's offsets (OffsetFetch v9)?"""
        if member_id is None and member_epoch < 0:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise GroupError(
                E.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        if member_epoch != member.member_epoch:
            raise GroupError(
                E.STALE_MEMBER_EPOCH,
                f"The received member epoch {member_epoch} does not match the expected "
                f"member epoch {member.member_epoch}.",
            )

    async def commit(
        self,
        group: ConsumerGroup,
        *,
        member_id: str,
        member_epoch: int,
        api_version: int,
        offsets: list[OffsetRecord],
    ) -> None:
        self.check_commit(group, member_id, member_epoch, api_version)
        member = group.members.get(member_id)
        if member is not None:
            self._touch(group, member)
        if offsets:
            await self.classic.call(
                self.classic.store.commit_offsets, group.tenant_id, group.group_id, offsets
            )

    # --- describe / delete -----------------------------------------------------------------

    async def describe(self, tenant_id: int, group_id: str) -> ConsumerGroup | None:
        found = await self.classic.load(tenant_id, group_id)
        return found if isinstance(found, ConsumerGroup) else None

    def close(self) -> None:
        for group in self.classic.consumer_groups.values():
            for m in group.members.values():
                for timer in (m.expiry, m.revocation_timer):
                    if timer is not None:
                        timer.cancel()

    async def flush(self) -> None:
        for group in list(self.classic.consumer_groups.values()):
            if group.writer is not None and not group.writer.done():
                try:
                    await asyncio.wait_for(asyncio.shield(group.writer), 5)
                except Exception:  # noqa: BLE001 - shutting down: best effort
                    logger.warning("group %s not stored before shutdown", group.group_id)
