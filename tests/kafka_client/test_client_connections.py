"""Both connections, blocking and asyncio, against a real server on 127.0.0.1: the same behaviour.

Every case runs once per kind: an answer, a broker that never answers (timeout),
a reply with another correlation id, frames out of bounds, a connection
closed before or during a reply, a refused connection, a cancelled request,
the broker's ApiVersions asked once per connection. After each failure the
connection is dropped and the next request connects again and gets its own
answer.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse
from kafka.protocol.metadata import ApiVersionsResponse

from kelp.kafka_client import AsyncConnection, BadResponse, BlockingConnection, BrokerTimeout, BrokerUnavailable
from tests.support.fake_kafka_broker import DROP, SILENT, FakeBroker, Received, Truncated, encode_response

pytestmark = pytest.mark.timeout(30)

VERSION = 4


def heartbeat() -> HeartbeatRequest:
    return HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)


def answer(code: int = 0) -> HeartbeatResponse:
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


class Connection:
    """One connection of either kind behind one awaitable `request` (the blocking one in a worker thread,
    since the server shares the test's event loop)."""

    def __init__(self, kind: str, port: int, **options: Any) -> None:
        cls = BlockingConnection if kind == "blocking" else AsyncConnection
        self.conn = cls("127.0.0.1", port, client_id="kelp-test", **options)

    @property
    def address(self) -> str:
        return self.conn.address

    async def request(self, request: ApiMessage, version: int = VERSION, **options: Any) -> ApiMessage:
        if isinstance(self.conn, BlockingConnection):
            return await asyncio.to_thread(self.conn.request, request, version, **options)
        return await self.conn.request(request, version, **options)

    async def api_versions(self) -> Mapping[int, tuple[int, int]]:
        if isinstance(self.conn, BlockingConnection):
            return await asyncio.to_thread(self.conn.api_versions)
        return await self.conn.api_versions()

    async def close(self) -> None:
        if isinstance(self.conn, BlockingConnection):
            self.conn.close()
        else:
            await self.conn.close()


class Script:
    """The fake broker's answers in order; the last one repeats."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)

    def __call__(self, seen: Received) -> object:
        step = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return step(seen) if callable(step) else step


@pytest.fixture(params=["blocking", "asyncio"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    fake = await FakeBroker(Script(answer())).start()
    yield fake
    await fake.stop()


async def test_a_request_gets_its_response_with_counting_correlation_ids(kind: str, broker: FakeBroker) -> None:
    conn = Connection(kind, broker.port)
    for expected in (1, 2):
        response = await conn.request(heartbeat())
        assert isinstance(response, HeartbeatResponse) and response.header.correlation_id == expected
    assert [(r.correlation_id, r.request.header.client_id) for r in broker.received] == [(1, "kelp-test"),
                                                                                          (2, "kelp-test")]
    assert broker.connections == 1
    await conn.close()


async def test_a_broker_that_never_answers_times_out_and_the_next_request_reconnects(kind: str,
                                                                                    broker: FakeBroker) -> None:
    broker.handler = Script(SILENT, answer())
    conn = Connection(kind, broker.port, timeout_s=5.0)
    began = time.monotonic()
    with pytest.raises(BrokerTimeout, match=rf"broker at {conn.address} did not answer within 0.3s") as err:
        await conn.request(heartbeat(), timeout_s=0.3)
    assert time.monotonic() - began < 3.0
    assert err.value.address == conn.address and isinstance(err.value, TimeoutError)
    assert (await conn.request(heartbeat())).error_code == 0
    assert broker.connections == 2  # the late reply of the first request can never be read as the second's
    await conn.close()


async def test_a_reply_with_another_correlation_id_drops_the_connection(kind: str, broker: FakeBroker) -> None:
    broker.handler = Script(lambda seen: encode_response(answer(), VERSION, seen.correlation_id + 5), answer())
    conn = Connection(kind, broker.port)
    with pytest.raises(BadResponse, match=rf"broker at {conn.address} answered correlation id 6, expected 1"):
        await conn.request(heartbeat())
    assert (await conn.request(heartbeat())).header.correlation_id == 2
    assert broker.connections == 2
    await conn.close()


@pytest.mark.parametrize("size", [2, 1 << 30 | 1])
async def test_a_frame_size_no_reply_can_have_is_refused(kind: str, broker: FakeBroker, size: int) -> None:
    broker.handler = Script(struct.pack(">i", size), answer())
    conn = Connection(kind, broker.port)
    with pytest.raises(BadResponse, match=rf"broker at {conn.address} sent a response frame of {size} bytes"):
        await conn.request(heartbeat())
    assert (await conn.request(heartbeat())).error_code == 0
    await conn.close()


async def test_a_reply_larger_than_the_connection_allows_is_refused(kind: str, broker: FakeBroker) -> None:
    conn = Connection(kind, broker.port, max_response_bytes=8)
    with pytest.raises(BadResponse, match=r"sent a response frame of \d+ bytes \(a reply holds 4 to 8\)"):
        await conn.request(heartbeat())
    await conn.close()


@pytest.mark.parametrize(("cut", "said"), [(None, "after 0 of 4 bytes"), (6, r"after 2 of \d+ bytes")])
async def test_a_connection_closed_before_or_during_the_reply_is_reported_and_reopened(
        kind: str, broker: FakeBroker, cut: int | None, said: str) -> None:
    def closing(seen: Received) -> object:
        return DROP if cut is None else Truncated(encode_response(answer(), VERSION, seen.correlation_id)[:cut])

    broker.handler = Script(closing, answer())
    conn = Connection(kind, broker.port)
    with pytest.raises(BrokerUnavailable, match=rf"broker at {conn.address} closed the connection {said}"):
        await conn.request(heartbeat())
    assert (await conn.request(heartbeat())).error_code == 0
    assert broker.connections == 2
    await conn.close()


async def test_a_refused_connection_names_the_broker(kind: str) -> None:
    fake = await FakeBroker(Script(answer())).start()
    port = fake.port
    await fake.stop()
    conn = Connection(kind, port, timeout_s=2.0)
    with pytest.raises(BrokerUnavailable, match=rf"cannot connect to broker at 127.0.0.1:{port}") as err:
        await conn.request(heartbeat())
    assert err.value.address == f"127.0.0.1:{port}"
    await conn.close()


async def test_a_request_cancelled_mid_way_leaves_no_reply_behind(broker: FakeBroker) -> None:
    """asyncio only: a cancelled request drops its connection, so its reply is never taken for the next one's."""
    broker.handler = Script(SILENT, answer(3))
    conn = AsyncConnection("127.0.0.1", broker.port, client_id="kelp-test")
    task = asyncio.ensure_future(conn.request(heartbeat(), VERSION))
    while not broker.received:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    response = await conn.request(heartbeat(), VERSION)
    assert response.error_code == 3 and response.header.correlation_id == 2 and broker.connections == 2
    await conn.close()


async def test_api_versions_are_asked_once_per_connection_and_again_after_a_drop(kind: str,
                                                                                 broker: FakeBroker) -> None:
    served = ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=12, min_version=0, max_version=4)])
    broker.handler = lambda seen: served if seen.api_key == 18 else answer()
    conn = Connection(kind, broker.port)
    assert await conn.api_versions() == {12: (0, 4)}
    assert (await conn.request(heartbeat())).error_code == 0
    assert await conn.api_versions() == {12: (0, 4)}
    assert [(r.api_key, r.version) for r in broker.received] == [(18, 3), (12, VERSION)]
    await conn.close()
    assert await conn.api_versions() == {12: (0, 4)}  # a new connection may be another broker build: ask again
    assert [r.api_key for r in broker.received] == [18, 12, 18] and broker.connections == 2
    await conn.close()
