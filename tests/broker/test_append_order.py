"""A connection's produce turns (`kelp.broker.kafka.append_order`): arrival order, also when a waiter is cancelled.

The produce path itself is tested on the wire in tests/transactions/test_pipelined_produce.py; here the one case
the wire cannot provoke on cue: a request cancelled while it waits for its turn (its connection went away, the
broker stops) must not let the request after it overtake the one before it.
"""

from __future__ import annotations

import asyncio

from kelp.broker.kafka.append_order import AppendOrder


async def test_turns_follow_arrival_and_a_cancelled_waiter_lets_none_overtake() -> None:
    order = AppendOrder()
    first, second, third = order.take(), order.take(), order.take()
    await first.wait()  # nothing before it: no wait at all
    waiting_second = asyncio.ensure_future(second.wait())
    waiting_third = asyncio.ensure_future(third.wait())
    for _ in range(3):
        await asyncio.sleep(0)
    assert order.waiting == 2 and not waiting_second.done() and not waiting_third.done()
    waiting_second.cancel()
    await asyncio.gather(waiting_second, return_exceptions=True)
    second.end()  # the handler's finally, with the first request still appending
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waiting_third.done(), "the third request overtook the first"
    first.end()
    await asyncio.wait_for(waiting_third, 1)
    third.end()
    assert order.waiting == 0 and order._last is None
    lone = order.take()
    await asyncio.wait_for(lone.wait(), 1)  # an idle connection's next request does not wait
    lone.end()
