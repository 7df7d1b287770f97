"""The nemesis' schedule is a function of its seed, covers every targeted fault, and the regression list replays.

What `make chaos SEED=...` and the regression list rely on: the same seed
gives the same faults with the same parameters, `(seed, index)` names one
fault exactly, every available targeted kind comes once per round, kinds
the topology cannot do (network, disk) are never scheduled without it, and
every regression entry still names the kind its seed and index give.
"""

from __future__ import annotations

import itertools

import pytest

from tests.chaos.nemesis import (
    FAULTS,
    NEEDS,
    RANDOM,
    STREAM_31,
    TARGETED,
    TARGETED_17,
    TARGETED_31,
    available_kinds,
    fault_params_rng,
    kind_at,
    schedule,
    short_schedule,
)
from tests.chaos.runner import load_regressions

ALL = frozenset({"network", "disk", "power", "store", "clock", "fsync-each"})
ISSUE_17 = frozenset({"network", "disk"})  # what the regression list's runs could do


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    first = list(itertools.islice(schedule(7, ALL), 60))
    assert first == list(itertools.islice(schedule(7, ALL), 60))
    assert first != list(itertools.islice(schedule(8, ALL), 60))
    assert [fault_params_rng(7, i).random() for i in range(5)] == [fault_params_rng(7, i).random() for i in range(5)]
    assert fault_params_rng(7, 3).random() != fault_params_rng(7, 4).random()


@pytest.mark.parametrize("caps", [ALL, ISSUE_17, frozenset()])
def test_every_round_has_every_available_targeted_kind_once(caps: frozenset) -> None:
    assert set(available_kinds(caps)) == {k for k in TARGETED if k not in NEEDS or set(NEEDS[k].split("+")) <= caps}
    if "power" in caps:
        assert "power-loss-all" not in available_kinds(caps - {"fsync-each"})
    items = list(itertools.islice(schedule(3, caps), 400))
    for stream, in_stream in ((TARGETED_17, lambda i: i < STREAM_31), (TARGETED_31, lambda i: i >= STREAM_31)):
        kinds = available_kinds(caps, stream)
        targeted = [k for i, k in items if in_stream(i) and k in TARGETED]
        rounds = [targeted[i:i + len(kinds)] for i in range(0, len(kinds) * 4, len(kinds))]
        assert all(sorted(r) == sorted(kinds) for r in rounds), (stream, rounds)
    assert all(k in TARGETED or k in RANDOM for _, k in itertools.islice(schedule(3, caps), 200))
    if not caps:
        assert not {"disk-full", "partition-brokers", "partition-clients", "control-plane-drop",
                    "control-plane-delay"} & {k for _, k in itertools.islice(schedule(3, caps), 200)}


def test_the_short_schedule_is_each_targeted_kind_once_with_the_full_schedules_indices() -> None:
    short = short_schedule(1, ALL)
    assert sorted(k for _, k in short) == sorted(TARGETED)
    assert all(kind_at(1, ALL, i) == k for i, k in short)
    assert short_schedule(1, ALL, ["double-failover"]) == [(i, k) for i, k in short if k == "double-failover"]


def test_every_fault_kind_has_an_implementation() -> None:
    assert set(FAULTS) == set(TARGETED) | set(RANDOM)


def test_every_regression_entry_names_the_fault_its_seed_and_index_give() -> None:
    entries = load_regressions()
    for e in entries:
        assert kind_at(int(e["seed"]), ALL, int(e["index"])) == e["kind"], e
        assert kind_at(int(e["seed"]), ISSUE_17, int(e["index"])) == e["kind"], e
        assert e["found"].strip()


def test_issue_31s_stream_leaves_issue_17s_indices_as_they_were() -> None:
    """The schedule before issue 31 (one stream of issue 17's kinds) is the first stream, index for index,
    whatever the topology can do of issue 31's: the old schedule was rounds of TARGETED_17 alone."""
    import random

    from tests.chaos.nemesis import RANDOM_WEIGHTS

    before, index = [], 0
    for round_no in range(20):  # the schedule function as it was before issue 31
        rng = random.Random(f"1:round:{round_no}")
        order = TARGETED_17[:]
        rng.shuffle(order)
        for kind in order:
            before.append((index, kind))
            index += 1
            if rng.random() < 0.75:
                before.append((index, rng.choices(RANDOM, RANDOM_WEIGHTS)[0]))
                index += 1
    for caps in (ALL, ISSUE_17):
        now = [(i, k) for i, k in itertools.islice(schedule(1, caps), 2 * len(before)) if i < STREAM_31]
        assert now[:len(before)] == before
    assert {k for i, k in itertools.islice(schedule(1, ALL), 200) if i >= STREAM_31} >= set(TARGETED_31)
