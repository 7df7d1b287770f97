"""What authorization costs the produce path: a micro-benchmark, run by hand.

    python -m tests.authorization.produce_cost

Why: issue 20 allows authorization only a few percent of produce throughput. This drives the Produce handler
of one in-process broker directly (decoded request -> handler -> appended batch -> answer, as the listener
dispatches it, without sockets), acks=1, one partition, a 10-record batch (1.2 KB) per request, three ways:
without an authorizer (the broker's authorizer switched off), and with it, holding 1,000 ACLs of other
principals, from a producer allowed by a LITERAL WRITE ACL and from one allowed only by a PREFIXED one. The
three run in short turns on the same broker and log, so drift (page cache, other processes, the broker's own
background work) hits them alike, and each turn's cost is taken against the no-authorizer run of the same
turn; the median over the turns is printed, beside a second no-authorizer arm whose "cost" is the noise. On a
busy machine that noise is larger than the cost, so the handler's authorization step (`produce._refusals`) is
also timed alone, hot, against the same request. It asserts nothing (`bench/` will carry the end-to-end figure
beside Kafka's).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from kafka.protocol.producer import ProduceRequest

from kelp.broker.kafka.handlers import RequestContext, get_handler
from kelp.broker.kafka.handlers.produce import _refusals
from kelp.records.build import build_batch
from kelp.security.principal import KafkaPrincipal
from tests.authorization.harness import InProcessBroker

LITERAL = KafkaPrincipal.user("literal-producer")
PREFIXED = KafkaPrincipal.user("prefixed-producer")
TOPIC = "bench"
REQUESTS = 500  # per turn
TURNS = 60


def _request() -> bytes:
    T = ProduceRequest.TopicProduceData
    batch = build_batch([(b"key-%d" % i, b"x" * 100) for i in range(10)])
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0, records=batch)])])
    return bytes(request.encode(version=9))


async def _turn(broker: InProcessBroker, body: bytes, principal: KafkaPrincipal, *, authorizer: bool) -> float:
    """Produce requests per second of one turn."""
    spec = get_handler(0)
    assert spec is not None and spec.decoder is not None
    broker.parts.acls.enabled = authorizer
    ctx = RequestContext(broker=broker.parts, api_key=0, api_version=9, correlation_id=1, client_id="bench",
                         peer="10.0.0.7:50000", principal=principal)
    start = time.perf_counter()
    for _ in range(REQUESTS):
        answer = await spec.func(ctx, spec.decoder(memoryview(bytearray(body)), 9))
        assert answer is not None and answer.responses[0].partition_responses[0].error_code == 0
    rate = REQUESTS / (time.perf_counter() - start)
    await asyncio.sleep(0.01)  # the broker's own tasks run between turns
    return rate


async def main() -> None:
    body = _request()
    # "no authorizer" twice: how far two arms that do the same work differ is the noise of the figure
    ways = (("no authorizer", LITERAL, False), ("LITERAL WRITE ACL", LITERAL, True),
            ("PREFIXED WRITE ACL", PREFIXED, True), ("no authorizer again", LITERAL, False))
    with tempfile.TemporaryDirectory() as tmp:
        async with InProcessBroker(Path(tmp), **{"lease.duration.ms": 600_000}) as broker:
            await broker.parts.topics.create_topic(TOPIC, 1, 1)
            others = [{"resourceType": "TOPIC", "resourceName": f"t{i}", "principal": f"User:u{i % 50}",
                       "operation": "WRITE", "permission": "ALLOW"} for i in range(1000)]
            mine = [{"resourceType": "TOPIC", "resourceName": TOPIC, "principal": str(LITERAL), "operation": "WRITE",
                     "permission": "ALLOW"},
                    {"resourceType": "TOPIC", "resourceName": TOPIC[:3], "patternType": "PREFIXED",
                     "principal": str(PREFIXED), "operation": "WRITE", "permission": "ALLOW"}]
            answer = await broker.parts.acls.create([*others, *mine])
            assert all(r is None for r in answer["results"])
            rates: list[list[float]] = [[] for _ in ways]
            for _, principal, on in ways:
                await _turn(broker, body, principal, authorizer=on)  # warm up
            for _ in range(TURNS):
                for i, (_, principal, on) in enumerate(ways):
                    rates[i].append(await _turn(broker, body, principal, authorizer=on))
            broker.parts.acls.enabled = True
            alone = {}
            spec = get_handler(0)
            assert spec is not None and spec.decoder is not None
            for name, principal, _ in ways[1:3]:
                ctx = RequestContext(broker=broker.parts, api_key=0, api_version=9, correlation_id=1,
                                     client_id="bench", peer="10.0.0.7:50000", principal=principal)
                request = spec.decoder(memoryview(bytearray(body)), 9)
                start = time.perf_counter()
                for _ in range(100_000):
                    _refusals(ctx, request)
                alone[name] = (time.perf_counter() - start) / 100_000 * 1e6
    # Paired: each turn's cost against the no-authorizer run of the same turn, then the median over the turns.
    base = [1e6 / r for r in rates[0]]
    print(f"no authorizer: {statistics.median(base):.1f} us per produce request "
          f"(median of {TURNS} turns of {REQUESTS})")
    for (name, _, _), r in zip(ways[1:], rates[1:], strict=True):
        extra = statistics.median(1e6 / x - b for x, b in zip(r, base, strict=True))
        step = f"; the authorization step alone: {alone[name]:.2f} us" if name in alone else ""
        print(f"{name:20s} {extra:+6.2f} us per request, {100 * extra / statistics.median(base):+5.1f}%{step}")


if __name__ == "__main__":
    asyncio.run(main())
