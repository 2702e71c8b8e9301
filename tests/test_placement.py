"""Replica placement: distinct replicas, even leaders and replicas, racks spread."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_plane.placement import BrokerSlot, PlacementError, assign_replicas, rack_alternating


@st.composite
def layouts(draw):
    racks = draw(st.sampled_from([None, 2, 3]))
    n = draw(st.integers(1, 3)) * racks if racks else draw(st.integers(1, 9))
    brokers = [BrokerSlot(10 + i, None if racks is None else f"r{i % racks}") for i in range(n)]
    rf = draw(st.integers(1, n))
    partitions = draw(st.integers(1, 120))
    start = draw(st.integers(0, 50))
    return brokers, rf, partitions, start


@given(layouts())
def test_placement_is_even_and_rack_aware(layout):
    # Racks of equal size (as Kafka also needs for an even rack-aware spread): with one
    # broker alone in its rack, that broker must take a replica of every partition.
    brokers, rf, partitions, start = layout
    plan = assign_replicas(brokers, partitions, rf, start=start)
    ids = {b.id for b in brokers}
    assert len(plan) == partitions
    assert all(len(set(r)) == rf and set(r) <= ids for r in plan)
    leaders = Counter(r[0] for r in plan)
    replicas = Counter(b for r in plan for b in r)
    assert max(leaders[i] for i in ids) - min(leaders[i] for i in ids) <= 1
    assert max(replicas[i] for i in ids) - min(replicas[i] for i in ids) <= rf
    rack_of = {b.id: b.rack for b in brokers}
    racks = set(rack_of.values())
    if None not in racks:  # every partition spans as many racks as it can
        assert all(len({rack_of[b] for b in r}) == min(rf, len(racks)) for r in plan)


def test_placement_is_deterministic_and_continues_for_new_partitions():
    brokers = [BrokerSlot(i) for i in (1, 2, 3)]
    whole = assign_replicas(brokers, 6, 2, start=1)
    assert whole == assign_replicas(brokers, 6, 2, start=1)
    tail = assign_replicas(brokers, 3, 2, first_partition=3, start=1)
    assert tail == whole[3:]


def test_too_few_brokers_is_a_clear_error():
    with pytest.raises(PlacementError, match="larger than the 2 live broker"):
        assign_replicas([BrokerSlot(1), BrokerSlot(2)], 3, 3)
    with pytest.raises(PlacementError):
        assign_replicas([BrokerSlot(1)], 1, 0)


def test_racks_alternate():
    brokers = [BrokerSlot(1, "a"), BrokerSlot(2, "a"), BrokerSlot(3, "b"), BrokerSlot(4, "c")]
    assert [b.id for b in rack_alternating(brokers)] == [1, 3, 4, 2]


def test_a_rack_constraint_beats_evenness():
    brokers = [BrokerSlot(1, "a"), BrokerSlot(2, "b"), BrokerSlot(3, "a")]
    plan = assign_replicas(brokers, 6, 2)
    assert all(2 in r for r in plan)  # the only broker in rack b
