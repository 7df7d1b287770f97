"""The leader's replication rules on one partition, without a network.

High watermark = min log end offset over the ISR (never backwards; an
expansion in flight counts), a follower joins the ISR only once it has
caught up to the high watermark and this leader epoch's start, a follower
that stops fetching is reported out of sync after the lag time, and
acks=all waiters complete exactly when the high watermark passes them.
"""

from __future__ import annotations

import asyncio

from kelp.broker.metadata.model import PartitionState
from kelp.broker.replica.partition import Partition
from kelp.errors import NotLeaderOrFollowerError


class FakeLog:
    def __init__(self, leo: int = 0, hw: int = 0) -> None:
        self.log_end_offset = leo
        self._hw = hw
        self.first_unstable_offset: int | None = None  # no transaction open

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = max(0, min(value, self.log_end_offset))


def leader(leo: int = 0, hw: int = 0, isr=(0, 1, 2), replicas=(0, 1, 2), now: int = 1000) -> Partition:
    part = Partition("t", 0, FakeLog(leo, hw), broker_id=0)
    part.become_leader(PartitionState(replicas, 0, 3, isr, 7), now)
    part.start_epoch(leo)  # what the replica manager does once no truncation is in flight
    return part


def test_high_watermark_is_the_minimum_over_the_isr_and_never_moves_back() -> None:
    part = leader(leo=10, hw=4)
    assert not part.maybe_advance_high_watermark()  # followers unknown under this epoch: HW stays
    part.record_follower_fetch(1, 8, 2000)
    part.record_follower_fetch(2, 6, 2000)
    assert part.maybe_advance_high_watermark() and part.high_watermark == 6
    part.record_follower_fetch(2, 5, 2001)  # a follower that truncated: HW never goes back
    assert not part.maybe_advance_high_watermark() and part.high_watermark == 6
    part.record_follower_fetch(2, 10, 2002)
    assert part.maybe_advance_high_watermark() and part.high_watermark == 8


def test_a_follower_joins_the_isr_only_when_caught_up() -> None:
    part = leader(leo=10, hw=10, isr=(0, 1))
    part.epoch_start_offset = 10
    assert part.record_follower_fetch(2, 9, 2000) is None
    assert part.record_follower_fetch(2, 10, 2001) == (0, 1, 2)
    part.pending_isr = (0, 1, 2)
    assert part.maximal_isr == (0, 1, 2)
    assert part.record_follower_fetch(2, 10, 2002) is None  # one change in flight at a time


def test_pending_expansion_holds_the_high_watermark_back() -> None:
    part = leader(leo=10, hw=5, isr=(0, 1))
    part.record_follower_fetch(1, 10, 2000)
    part.pending_isr = (0, 1, 2)
    part.record_follower_fetch(2, 7, 2000)
    part.maybe_advance_high_watermark()
    assert part.high_watermark == 7


def test_followers_that_stop_fetching_fall_out_of_sync_after_the_lag_time() -> None:
    part = leader(leo=10, hw=10, now=1000)
    part.record_follower_fetch(1, 10, 20_000)
    assert part.out_of_sync(20_500, 30_000) == ()
    assert part.out_of_sync(31_001, 30_000) == (2,)  # 2 never fetched since the epoch began at 1000
    part.log.log_end_offset = 15  # new records; 1 fetches 10 again: it had what we had at its previous fetch
    part.record_follower_fetch(1, 10, 40_000)
    assert part.out_of_sync(40_000, 30_000) == (2,)
    part.record_follower_fetch(1, 12, 80_000)  # behind both the current and the previous log end
    assert 1 in part.out_of_sync(80_000, 30_000)


async def test_ack_waiters_complete_when_the_high_watermark_passes_them() -> None:
    part = leader(leo=10, hw=0)
    loop = asyncio.get_running_loop()
    early, late = loop.create_future(), loop.create_future()
    part.add_ack_waiter(5, 3, early)
    part.add_ack_waiter(10, 3, late)
    for r in (1, 2):
        part.record_follower_fetch(r, 6, 2000)
    part.maybe_advance_high_watermark()
    part.wake()
    assert early.done() and not late.done()
    part.become_follower(PartitionState((0, 1, 2), 1, 4, (1, 2), 8), NotLeaderOrFollowerError("moved"))
    assert isinstance(late.exception(), NotLeaderOrFollowerError)


def test_a_new_leader_answers_offset_not_available_until_its_high_watermark_reaches_its_epoch_start() -> None:
    """KIP-207: right after an election the new leader's high watermark may lag what the old leader had
    committed; "latest" must not answer less than a client saw, so it is refused (retriably) until then."""
    import pytest

    from kelp.errors import OffsetNotAvailableError

    part = leader(leo=10, hw=6, isr=(0, 1))
    part.epoch_start_offset = 10
    with pytest.raises(OffsetNotAvailableError, match="epoch"):
        part.require_end_offset_known()
    part.record_follower_fetch(1, 10, 2000)
    assert part.maybe_advance_high_watermark() and part.high_watermark == 10
    part.require_end_offset_known()
