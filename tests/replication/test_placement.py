"""Replica placement: what a user of `kafka-topics --create` relies on.

Replicas of one partition on distinct brokers (and racks, when there are
enough racks), leaders and replicas spread evenly, new topics not all led
by the same broker, and a clear error when the replication factor exceeds
the live brokers.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kelp.broker.metadata.placement import assign_replicas, rack_alternated
from kelp.errors import InvalidReplicationFactorError


def test_replicas_are_distinct_and_leaders_spread_evenly() -> None:
    brokers = {0: None, 1: None, 2: None, 3: None}
    plan = assign_replicas(brokers=brokers, partitions=12, replication_factor=3)
    assert all(len(set(r)) == 3 for r in plan)
    leaders = Counter(r[0] for r in plan)
    assert set(leaders.values()) == {3}
    load = Counter(b for r in plan for b in r)
    assert set(load.values()) == {9}
    # the followers of one leader vary (Kafka's shift), so one broker's failure spreads its load
    followers_of_0 = {tuple(r[1:]) for r in plan if r[0] == 0}
    assert len(followers_of_0) > 1


def test_replicas_go_to_distinct_racks_when_there_are_enough() -> None:
    brokers = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    plan = assign_replicas(brokers=brokers, partitions=30, replication_factor=3)
    for replicas in plan:
        assert len({brokers[b] for b in replicas}) == 3, replicas
    assert set(Counter(r[0] for r in plan).values()) == {5}


def test_fewer_racks_than_replicas_still_places_every_replica() -> None:
    brokers = {0: "a", 1: "a", 2: "b"}
    plan = assign_replicas(brokers=brokers, partitions=6, replication_factor=3)
    assert all(sorted(r) == [0, 1, 2] for r in plan)


def test_new_topics_start_on_the_least_loaded_broker() -> None:
    brokers = {0: None, 1: None, 2: None}
    first = assign_replicas(brokers=brokers, partitions=1, replication_factor=1)
    second = assign_replicas(brokers=brokers, partitions=1, replication_factor=1, existing=first)
    third = assign_replicas(brokers=brokers, partitions=1, replication_factor=1, existing=first + second)
    assert {first[0][0], second[0][0], third[0][0]} == {0, 1, 2}


def test_replication_factor_above_live_brokers_names_them() -> None:
    with pytest.raises(InvalidReplicationFactorError, match=r"replication factor 3 is larger than the 2 live "
                                                            r"broker\(s\) \(0, 1\)"):
        assign_replicas(brokers={0: None, 1: None}, partitions=1, replication_factor=3, topic="orders")


def test_rack_alternated_order() -> None:
    assert rack_alternated({0: "a", 1: "a", 2: "b", 3: "c", 4: "b"}) == [0, 2, 3, 1, 4]
