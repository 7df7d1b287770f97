"""A connection's produce requests append in the order they arrived.

Why: an idempotent or transactional producer pipelines up to five produce requests on its connection to a
leader, and their batches of one partition carry consecutive sequence numbers; the broker refuses a batch
whose sequence is not next (OUT_OF_ORDER_SEQUENCE_NUMBER). Kafka handles one request of a connection at a
time (the channel is muted until the response is sent), so a connection's batches reach the log in the order
they were sent. Kelp runs each request of a connection in its own task (responses still go out in order), and
a produce request may give the event loop a turn before or between its appends — its KIP-890 verification
with the transaction coordinator, a loop budget's slice running out, recompression in a worker thread, a
replica busy loading its producer state. A later request of the same connection could then append first: its
batch, next but one in sequence, got OUT_OF_ORDER_SEQUENCE_NUMBER, and once the earlier batch was
acknowledged the Java client took that as a real gap — a fatal error for the application (issue 34's
rebalancing bench: `sent sequence 1 ... before its earlier sequence 0 of the transaction`).

The produce handler takes a turn as it starts (synchronously, so turns follow arrival) and waits, before its
verification and appends, until every earlier produce request of its connection has finished appending (or
failed); it ends its turn before waiting for the ISR, so acks=all waits still overlap as before. A request
that needs no turn of the loop finds the one before it done already and does not wait. The wait is bounded
by the earlier requests' own bounds (the verifier's timeout, the request timeout): each ends its turn in a
`finally`.

This module must never hold a turn across an ISR wait or any wait without a bound.
"""

from __future__ import annotations

import asyncio

__all__ = ["AppendOrder", "Turn"]


class AppendOrder:
    """One connection's produce turns, in arrival order. `waiting`: requests waiting for an earlier one now."""

    __slots__ = ("_last", "waiting")

    def __init__(self) -> None:
        self._last: asyncio.Future[None] | None = None  # the latest turn taken, None once it ended
        self.waiting = 0

    def take(self) -> "Turn":
        """The next turn: call at the start of the request, before anything awaits."""
        before = self._last
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last = mine
        return Turn(self, before, mine)

    def _end(self, mine: asyncio.Future[None]) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._last is mine:
            self._last = None


class Turn:
    """A produce request's place in its connection's order: `await turn.wait()`, then append, then `end()`."""

    __slots__ = ("_order", "_before", "_mine")

    def __init__(self, order: AppendOrder, before: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
        self._order = order
        self._before = before
        self._mine = mine

    async def wait(self) -> None:
        """Until the request before this one ended its turn (which it did after the one before it)."""
        before = self._before
        if before is None or before.done():
            return
        self._order.waiting += 1
        try:
            await asyncio.shield(before)  # a cancelled waiter must not cancel the earlier request's turn
        finally:
            self._order.waiting -= 1

    def end(self) -> None:
        """The appends are done (or failed): the next request of the connection may go on — once the one
        before this has ended too (a request cancelled while it waited must not let the next one overtake)."""
        before = self._before
        if before is not None and not before.done():
            before.add_done_callback(lambda _before: self._order._end(self._mine))
        else:
            self._order._end(self._mine)
