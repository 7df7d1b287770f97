"""The REST consumers' range assignment matches Kafka's RangeAssignor."""

from __future__ import annotations

from kelp.broker.http.rest_v2.subscriptions import range_assign


def test_range_assignment_gives_contiguous_ranges_first_members_one_extra() -> None:
    plan = range_assign([("c", ["t"]), ("a", ["t", "u"]), ("b", ["t"])], {"t": 7, "u": 2}.get)
    assert plan == {"a": {"t": [0, 1, 2], "u": [0, 1]}, "b": {"t": [3, 4]}, "c": {"t": [5, 6]}}


def test_more_members_than_partitions_leaves_some_without() -> None:
    plan = range_assign([("a", ["t"]), ("b", ["t"]), ("c", ["t"])], {"t": 2}.get)
    assert plan == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {}}
    assert range_assign([("a", ["missing"])], {}.get) == {"a": {}}
