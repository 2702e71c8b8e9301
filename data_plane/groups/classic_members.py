"""Classic-protocol members of a consumer group, and the online upgrade and downgrade.

Kafka 4.0 lets a group move between protocols while it runs. When a consumer-protocol
member joins a classic group that uses the "consumer" embedded protocol, the group becomes
a consumer group on the spot (**upgrade**): each classic member becomes a member whose
epoch is the group's generation, subscribed to what its JoinGroup metadata names, owning
what its last SyncGroup assignment gave it, which is also its target. Members still on the
classic protocol then live inside the consumer group:

* a Heartbeat answers REBALANCE_IN_PROGRESS when the member should rejoin (the group epoch
  moved past it, it has partitions to give up, or partitions it waited for are free);
* a JoinGroup is answered at once (no barrier; nobody is a leader) with the member's epoch
  as the generation, after the coordinator reconciled it against its target with the
  partitions its subscription says it owns (eager clients own none when they rejoin;
  cooperative ones give up what moved and rejoin once more);
* SyncGroup hands out its current assignment in the consumer protocol's encoding;
* LeaveGroup and session expiry remove it like any member.

When the last consumer-protocol member leaves and only classic members remain, the group
becomes a classic group again (**downgrade**) at the group epoch as its generation, each
member with its target as its assignment, and rebalances.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from data_plane.groups.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from data_plane.groups.consumer_state import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerConfig,
    ConsumerGroup,
    ConsumerMember,
    Parts,
    Resolved,
    Resolver,
)
from data_plane.groups.coordinator import Group, GroupCoordinator, GroupError, Member
from data_plane.groups.model import GroupState
from data_plane.protocol.errors import ErrorCode

logger = logging.getLogger("millrace.groups")

E = ErrorCode
ASSIGNMENT_MAX_VERSION = 3  # ConsumerProtocolAssignment's versions share one layout


def _ids(names: Resolved, by_name: dict[str, tuple[int, ...]]) -> Parts:
    """Partitions named by topic, as partitions by topic id (unknown topics dropped)."""
    out: Parts = {}
    for name, parts in by_name.items():
        if name in names and parts:
            topic_id, count = names[name]
            kept = frozenset(p for p in parts if 0 <= p < count)
            if kept:
                out[topic_id] = out.get(topic_id, frozenset()) | kept
    return out


def _names(member: ConsumerMember, parts: Parts) -> dict[str, list[int]]:
    """Partitions by topic id as the member's topic names (ids it no longer names go)."""
    by_id = {topic_id: name for name, (topic_id, _) in member.topics.items()}
    return {by_id[t]: sorted(ps) for t, ps in sorted(parts.items()) if t in by_id}


def _first_protocol(member: ConsumerMember) -> tuple[str, bytes]:
    assert member.classic_protocols, "a classic member has protocols"
    return member.classic_protocols[0]


class ClassicMembers:
    """The classic side of consumer groups, mixed into the consumer coordinator."""

    classic: GroupCoordinator
    config: ConsumerConfig

    if TYPE_CHECKING:  # provided by ConsumerGroupCoordinator

        def _touch(self, group: ConsumerGroup, member: ConsumerMember) -> None: ...
        def _remove(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None: ...
        def _update_target(self, group: ConsumerGroup) -> None: ...
        def _reconcile(
            self, group: ConsumerGroup, member: ConsumerMember, owned: Parts | None
        ) -> None: ...
        def _set_partitions(
            self, group: ConsumerGroup, member: ConsumerMember, assigned: Parts, revoking: Parts
        ) -> None: ...
        def _changed(self, group: ConsumerGroup) -> None: ...
        async def _write(self, group: ConsumerGroup) -> None: ...
        async def _persisted(self, group: ConsumerGroup) -> bool: ...
        def _group_assignor(self, group: ConsumerGroup) -> str: ...

    # --- upgrade ----------------------------------------------------------------------------

    def upgrade(self, old: Group, resolve: Resolver) -> ConsumerGroup:
        """A classic group becomes a consumer group as it stands (Kafka's fromClassicGroup)."""
        if old.protocol_type != "consumer":
            raise GroupError(
                E.GROUP_ID_NOT_FOUND,
                f"Group {old.group_id} is a classic group of protocol type "
                f"{old.protocol_type!r}, not a consumer group.",
            )
        if len(old.members) > self.config.max_size:
            raise GroupError(
                E.GROUP_MAX_SIZE_REACHED,
                f"Group {old.group_id} has more members than a consumer group may.",
            )
        group = ConsumerGroup(
            old.tenant_id,
            old.group_id,
            group_epoch=old.generation,
            assignment_epoch=old.generation,
            state_since_ms=self.classic.clock.wall_ms(),
        )
        members: list[ConsumerMember] = []
        for m in old.members.values():
            try:
                sub = decode_subscription(m.metadata(old.protocol_name))
                given = decode_assignment(m.assignment).partitions if m.assignment else ()
            except ConsumerProtocolError as exc:
                raise GroupError(
                    E.GROUP_ID_NOT_FOUND,
                    f"Cannot upgrade the classic group {old.group_id}: member {m.member_id}'s "
                    f"embedded consumer protocol is malformed ({exc}).",
                ) from None
            del given  # checked here; taken below, once every member is known
            names = tuple(sorted(set(sub.topics)))
            topics = resolve(names, None)
            member = ConsumerMember(
                m.member_id,
                instance_id=m.instance_id,
                rack_id=sub.rack_id,
                client_id=m.client_id,
                host=m.host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=names,
                member_epoch=old.generation,
                previous_member_epoch=old.generation,
                state=STABLE,
                topics=topics,
                classic_protocols=list(m.protocols),
                classic_session_timeout_ms=m.session_timeout_ms,
            )
            members.append(member)
        self.classic.retire(old)  # its waiting requests are told to rejoin
        # The classic record may still be on its way to the store: ours goes after it.
        group.writer = asyncio.get_running_loop().create_task(
            self.classic.write_after(old.writer, self._write(group))
        )
        for member in members:
            group.members[member.member_id] = member
            if member.instance_id:
                group.static[member.instance_id] = member.member_id
        for member, m in zip(members, old.members.values(), strict=True):
            try:
                given = decode_assignment(m.assignment).partitions if m.assignment else ()
            except ConsumerProtocolError:
                given = ()
            by_name = {t: tuple(ps) for t, ps in given}
            assigned = _ids(resolve(tuple(by_name), None), by_name)
            # A partition two members claim (a stale assignment) stays with the first.
            assigned = {
                t: frozenset(p for p in ps if (t, p) not in group.owners)
                for t, ps in assigned.items()
            }
            assigned = {t: ps for t, ps in assigned.items() if ps}
            self._set_partitions(group, member, assigned, {})
            group.target[member.member_id] = dict(assigned)
            self._touch(group, member)
        group.assignor = self._group_assignor(group)
        group.last_state = group.state
        key = (group.tenant_id, group.group_id)
        self.classic.consumer_groups[key] = group
        logger.info(
            "group %s: classic group upgraded to a consumer group at epoch %s (%s members)",
            group.group_id,
            group.group_epoch,
            len(group.members),
        )
        self._changed(group)
        return group

    # --- downgrade --------------------------------------------------------------------------

    def maybe_downgrade(self, group: ConsumerGroup) -> bool:
        """Once only classic members are left, the group becomes a classic group again."""
        members = list(group.members.values())
        if not members or not all(m.classic for m in members):
            return False
        if len(members) > self.classic.config.max_group_size:
            logger.info("group %s: too many members to downgrade", group.group_id)
            return False
        old = Group(
            group.tenant_id,
            group.group_id,
            generation=group.group_epoch,
            protocol_type="consumer",
            state=GroupState.STABLE,
            state_since_ms=self.classic.clock.wall_ms(),
        )
        for m in members:
            for timer in (m.expiry, m.revocation_timer):
                if timer is not None:
                    timer.cancel()
            version = min(_subscription_version(m), ASSIGNMENT_MAX_VERSION)
            target = group.target.get(m.member_id, {})
            old.members[m.member_id] = Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.host,
                m.classic_session_timeout_ms,
                m.rebalance_timeout_ms,
                "consumer",
                list(m.classic_protocols or []),
                assignment=encode_assignment(_names(m, target), version),
            )
            if m.instance_id:
                old.static[m.instance_id] = m.member_id
        old.protocol_name = GroupCoordinator.choose_protocol(old)
        old.leader = next(iter(old.members))
        key = (group.tenant_id, group.group_id)
        self.classic.consumer_groups.pop(key, None)
        self.classic.adopt(
            old, f"group {group.group_id} downgraded to the classic protocol", group.writer
        )
        logger.info(
            "group %s: downgraded to a classic group at generation %s (%s members)",
            group.group_id,
            old.generation,
            len(old.members),
        )
        return True

    # --- the classic APIs on a consumer group ----------------------------------------------

    def _classic_member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerMember:
        if instance_id is not None:
            known = group.static.get(instance_id)
            if known is None:
                raise GroupError(
                    E.UNKNOWN_MEMBER_ID,
                    f"Member with instance id {instance_id} is not a member of group "
                    f"{group.group_id}.",
                )
            if known != member_id:
                raise GroupError(
                    E.FENCED_INSTANCE_ID, f"Instance {instance_id} is now another member."
                )
        member = group.members.get(member_id)
        if member is None or not member.classic:
            raise GroupError(
                E.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a classic member of group {group.group_id}.",
            )
        return member

    async def classic_join(
        self,
        group: ConsumerGroup,
        *,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        resolve: Resolver,
    ) -> dict[str, Any]:
        """JoinGroup from a classic member of a consumer group: answered at once."""
        if protocol_type != "consumer" or not protocols:
            raise GroupError(
                E.INCONSISTENT_GROUP_PROTOCOL,
                f"group {group.group_id} is a consumer group: only the consumer embedded "
                "protocol may join it",
            )
        try:
            sub = decode_subscription(protocols[0][1])
        except ConsumerProtocolError as exc:
            raise GroupError(
                E.INCONSISTENT_GROUP_PROTOCOL, f"malformed subscription: {exc}"
            ) from None
        new_id = member_id or f"{client_id or 'member'}-{uuid.uuid4()}"
        if not member_id and require_known_member_id and instance_id is None:
            return {
                "error_code": E.MEMBER_ID_REQUIRED,
                "generation_id": -1,
                "protocol_name": None,
                "leader": "",
                "member_id": new_id,
                "members": [],
            }
        # Everything that can refuse the join comes before anything changes.
        names = tuple(sorted(set(sub.topics)))
        topics = resolve(names, None)
        owned_by_name = {t: tuple(ps) for t, ps in sub.owned_partitions}
        owned = _ids(resolve(tuple(owned_by_name), None), owned_by_name)
        if (
            not member_id
            and not (instance_id is not None and instance_id in group.static)
            and len(group.members) >= self.config.max_size
        ):
            raise GroupError(
                E.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )
        member = self._joining_member(group, member_id, new_id, instance_id)
        is_new = member.member_id not in group.members
        if is_new:
            group.members[member.member_id] = member
            if instance_id is not None:
                group.static[instance_id] = member.member_id
            logger.info(
                "group %s: member %s joins with the classic protocol", group.group_id, new_id
            )
        member.classic_protocols = list(protocols)
        member.classic_session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.host, member.rack_id = client_id, host, sub.rack_id
        bump = is_new or names != member.subscribed_topic_names or topics != member.topics
        member.subscribed_topic_names, member.topics = names, topics
        assignor = self._group_assignor(group)
        if assignor != group.assignor:
            group.assignor, bump = assignor, True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._update_target(group)
        self._reconcile(group, member, owned)
        self._touch(group, member)
        self._changed(group)
        if not await self._persisted(group):
            raise GroupError(E.COORDINATOR_NOT_AVAILABLE, "storing the group failed")
        return {
            "error_code": E.NONE,
            "generation_id": member.member_epoch,
            "protocol_type": "consumer",
            "protocol_name": protocols[0][0],
            "leader": "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": [],
        }

    def _joining_member(
        self, group: ConsumerGroup, member_id: str, new_id: str, instance_id: str | None
    ) -> ConsumerMember:
        if instance_id is not None:
            previous_id = group.static.get(instance_id)
            if previous_id is not None and member_id and previous_id != member_id:
                raise GroupError(
                    E.FENCED_INSTANCE_ID, f"Instance {instance_id} is now another member."
                )
            if previous_id is not None and not member_id:
                # A static member restarted (any protocol): it takes over the old one.
                previous = group.members[previous_id]
                member = ConsumerMember(new_id, instance_id=instance_id, topics=previous.topics)
                member.subscribed_topic_names = previous.subscribed_topic_names
                member.member_epoch = previous.member_epoch
                assigned, revoking = previous.assigned, previous.revoking
                for timer in (previous.expiry, previous.revocation_timer):
                    if timer is not None:
                        timer.cancel()
                self._set_partitions(group, previous, {}, {})
                del group.members[previous_id]
                group.members[new_id] = member
                group.static[instance_id] = new_id
                group.target[new_id] = group.target.pop(previous_id, {})
                self._set_partitions(group, member, assigned, revoking)
                return member
        if member_id:
            found = group.members.get(member_id)
            if found is None:
                # The id this coordinator handed out with MEMBER_ID_REQUIRED (KIP-394), or
                # one from before the group changed protocol: a new member, as Kafka does.
                return ConsumerMember(member_id, instance_id=instance_id)
            if not found.classic:
                raise GroupError(
                    E.INCONSISTENT_GROUP_PROTOCOL,
                    f"Member {member_id} uses the consumer protocol.",
                )
            return found
        return ConsumerMember(new_id, instance_id=instance_id)

    async def classic_sync(
        self,
        group: ConsumerGroup,
        *,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> tuple[bytes, str | None, str | None]:
        member = self._classic_member(group, member_id, instance_id)
        if generation != member.member_epoch:
            raise GroupError(
                E.ILLEGAL_GENERATION,
                f"generation {generation} is not the member's epoch {member.member_epoch}",
            )
        name, _ = _first_protocol(member)
        if (protocol_type is not None and protocol_type != "consumer") or (
            protocol_name is not None and protocol_name != name
        ):
            raise GroupError(E.INCONSISTENT_GROUP_PROTOCOL, "protocol does not match the member's")
        if group.group_epoch > member.member_epoch and member.state != UNREVOKED:
            raise GroupError(
                E.REBALANCE_IN_PROGRESS,
                f"A new rebalance is triggered in group {group.group_id} and member "
                f"{member_id} should rejoin to catch up.",
            )
        self._touch(group, member)
        version = min(_subscription_version(member), ASSIGNMENT_MAX_VERSION)
        return encode_assignment(_names(member, member.assigned), version), "consumer", name

    async def classic_heartbeat(
        self, group: ConsumerGroup, *, member_id: str, instance_id: str | None, generation: int
    ) -> None:
        member = self._classic_member(group, member_id, instance_id)
        if generation != member.member_epoch:
            raise GroupError(
                E.ILLEGAL_GENERATION,
                f"generation {generation} is not the member's epoch {member.member_epoch}",
            )
        self._touch(group, member)
        if group.group_epoch > group.assignment_epoch:
            self._update_target(group)
            self._changed(group)
        if (
            member.member_epoch < group.group_epoch
            or member.state == UNREVOKED
            or (member.state == UNRELEASED and self._released(group, member))
        ):
            raise GroupError(E.REBALANCE_IN_PROGRESS)

    @staticmethod
    def _released(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Has a partition the member waits for been given up by its previous owner?"""
        for topic, parts in group.target.get(member.member_id, {}).items():
            held = member.assigned.get(topic, frozenset())
            for p in parts - held:
                if group.owners.get((topic, p)) is None:
                    return True
        return False

    def classic_leave(
        self, group: ConsumerGroup, members: list[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        out: list[ErrorCode] = []
        for member_id, instance_id in members:
            try:
                if instance_id is not None:
                    known = group.static.get(instance_id)
                    if known is None:
                        raise GroupError(E.UNKNOWN_MEMBER_ID)
                    if member_id and known != member_id:
                        raise GroupError(E.FENCED_INSTANCE_ID)
                    member_id = known
                member = self._classic_member(group, member_id, None)
            except GroupError as exc:
                out.append(exc.code)
                continue
            self._remove(group, member, "left the group")
            out.append(E.NONE)
        return out


def _subscription_version(member: ConsumerMember) -> int:
    try:
        return decode_subscription(_first_protocol(member)[1]).version
    except ConsumerProtocolError:
        return 0
