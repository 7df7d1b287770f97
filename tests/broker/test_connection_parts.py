"""The two parts a Kafka connection composes, each alone against stand-ins for the Protocol it is handed.

Why: the connection's answers and its bounds used to be mixins sharing the connection's private state, testable
only through a whole connection; as objects (issue 35) each one's invariant is attacked directly:
- `ResponseWriter`: an answer ready early is never written before an earlier one; the MAX_IN_FLIGHT-th
  unanswered request pauses reading, which resumes only below half of it; after a closing answer nothing more
  is written and the file ranges of answers never sent are closed.
- `ConnectionBounds`: reading paused for several reasons resumes only once the last is lifted, never on a
  closed connection, and a shorter quota throttle does not cut a longer one short (on a virtual-time loop:
  the throttle's timer fires at once, no sleeping); what may be evicted, and what is idle.
"""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace
from typing import Any

from kelp.broker.kafka.connection_bounds import PAUSE_IN_FLIGHT, PAUSE_POOL, ConnectionBounds
from kelp.broker.kafka.response_writer import MAX_IN_FLIGHT, ResponseWriter
from tests.broker.test_framing_protocol import _FakeTransport
from tests.support.virtual_time import VirtualTimeLoop


class _Host:
    """The connection as the writer sees it (`WriterHost`)."""

    peer = "client"
    last_active = 0.0
    stopped = False

    def writer_stopped(self) -> None:
        self.stopped = True


class _Gate:
    """The connection's reading as the writer sees it (`ReadGate`), recording each change with the queue's length."""

    def __init__(self) -> None:
        self.paused = 0
        self.events: list[tuple[str, int, int]] = []
        self.writer: ResponseWriter | None = None

    def pause(self, why: int) -> None:
        self.paused |= why
        self.events.append(("pause", why, len(self.writer.pending) if self.writer else -1))

    def resume(self, why: int) -> None:
        self.paused &= ~why
        self.events.append(("resume", why, len(self.writer.pending) if self.writer else -1))


def _writer() -> tuple[ResponseWriter, _Host, _Gate, _FakeTransport]:
    host, gate, transport = _Host(), _Gate(), _FakeTransport()
    writer = ResponseWriter(host, gate)
    gate.writer = writer
    writer.start(transport, tls=False)
    return writer, host, gate, transport


async def test_answers_leave_in_request_order_and_the_in_flight_bound_pauses_reading_until_half_are_sent() -> None:
    writer, host, gate, transport = _writer()
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[Any]] = []
    for i in range(MAX_IN_FLIGHT):
        assert not gate.paused, f"reading paused with only {i} requests in flight"
        futures.append(loop.create_future())
        writer.push(futures[-1])
    assert gate.events == [("pause", PAUSE_IN_FLIGHT, MAX_IN_FLIGHT)]
    for i in reversed(range(1, MAX_IN_FLIGHT)):  # every answer but the first is ready, latest first
        futures[i].set_result([bytes([i])])
    await asyncio.sleep(0)
    assert transport.written == [] and writer.busy, "an answer went out before the first request's"
    futures[0].set_result([b"\0", b"!"])
    writer.end()
    await asyncio.wait_for(writer.task, 5)
    assert transport.written == [b"\0!"] + [bytes([i]) for i in range(1, MAX_IN_FLIGHT)]
    assert gate.events[1:] == [("resume", PAUSE_IN_FLIGHT, MAX_IN_FLIGHT // 2 - 1)]  # once, below half
    assert host.stopped and transport.closed and host.last_active > 0


class _Range:
    """A file range of an answer (`framing.FileRange`) that records being closed."""

    def __init__(self) -> None:
        self.file, self.position, self.size = io.BytesIO(b"x"), 0, 1
        self.closed = False

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        self.closed = True


async def test_after_a_closing_answer_nothing_is_written_and_unsent_file_ranges_are_closed() -> None:
    writer, host, _gate, transport = _writer()
    loop = asyncio.get_running_loop()
    first, closing, ready, waiting = (loop.create_future() for _ in range(4))
    for fut in (first, closing, ready, waiting):
        writer.push(fut)
    unsent = _Range()
    ready.set_result([b"never", unsent])
    closing.set_result(False)  # a handler's "close after what came before"
    first.set_result([b"first"])
    await asyncio.wait_for(writer.task, 5)
    assert transport.written == [b"first"] and transport.closed and host.stopped
    assert unsent.closed and waiting.cancelled() and not writer.pending


class _Conn:
    """The connection as its bounds see it (`BoundedConnection`)."""

    def __init__(self) -> None:
        self.peer = "client"
        self.transport = _FakeTransport()
        self.session: Any = None
        self.closed = self.lost = False
        self.last_active = self.opened_at = 0.0
        self.busy = self.handshaking = False
        self.dropped = 0

    def partial_request(self) -> tuple[int | None, int] | None:
        return None

    def drop(self) -> None:
        self.dropped += 1
        self.closed = True


class _Listener:
    def __init__(self) -> None:
        self.closed: list[str] = []

    def is_broker(self, session: Any) -> bool:
        return session.principal == "broker"

    def count_closed(self, reason: str) -> None:
        self.closed.append(reason)


def test_reading_resumes_only_once_every_reason_is_lifted_and_a_shorter_throttle_does_not_cut_a_longer_one() -> None:
    async def scenario() -> None:
        conn = _Conn()
        bounds = ConnectionBounds(conn, _Listener())
        reading = conn.transport
        bounds.throttle(500)
        bounds.pause(PAUSE_POOL)
        bounds.pause(PAUSE_IN_FLIGHT)
        bounds.throttle(100)  # a shorter one while the longer holds
        assert not reading.reading
        bounds.resume(PAUSE_IN_FLIGHT)
        bounds.resume(PAUSE_POOL)
        await asyncio.sleep(0.2)
        assert not reading.reading, "the shorter throttle ended the longer one"
        await asyncio.sleep(0.4)
        assert reading.reading and bounds.paused == 0 and conn.last_active > 0
        # a closed connection is never read again, whatever is lifted
        bounds.pause(PAUSE_POOL)
        conn.closed = True
        bounds.resume(PAUSE_POOL)
        assert not reading.reading

    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_what_may_be_evicted_and_what_is_idle() -> None:
    conn, listener = _Conn(), _Listener()
    bounds = ConnectionBounds(conn, listener)
    assert bounds.eviction_rank() == 0 and bounds.idle()  # not authenticated yet: first to go
    conn.session = SimpleNamespace(authenticated=True, principal="broker")
    assert bounds.eviction_rank() is None  # a broker's: never
    conn.session = SimpleNamespace(authenticated=True, principal="alice")
    assert bounds.eviction_rank() == 1
    conn.busy = True
    assert bounds.eviction_rank() is None and not bounds.idle()
    conn.busy = False
    bounds.pause(PAUSE_POOL)  # held back by the broker is not idleness
    assert not bounds.idle() and bounds.eviction_rank() == 1
    bounds.evict("max.connections")
    assert conn.dropped == 1 and listener.closed == ["max.connections (evicted)"]
    assert bounds.eviction_rank() is None and not bounds.idle()
