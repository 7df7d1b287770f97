"""The check of compressed records (issue 36) costs the event loop at most a few milliseconds per batch.

Decompressing and walking a 1 MB batch's records takes ~5-40 ms of CPU, and a zip bomb up to the 64 MiB bound
much more; done on the loop it would stop every other client for as long. The topics are compacted: the log
decoded every record on the loop to check keys (kafka-python, ~60 ms for 1,500 records), now the walk does.
Batches above a small size (and a small batch that inflates past 1 MiB) are checked on the CPU pool
(`broker.cpu_work.run_cpu`); the probe of `tests/support/loop_guard.py` times every loop step in the loop
thread's CPU time while they are produced.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from kafka.protocol.producer import ProduceRequest

from kelp.errors import ErrorCode
from kelp.records.build import build_batch
from tests.authorization.harness import ADMIN, InProcessBroker
from tests.support.loop_guard import StepProbe, serve
from tests.support.poison import CODECS, bomb

pytestmark = pytest.mark.timeout(300)

BOUND_S = 0.05
T = ProduceRequest.TopicProduceData
WORDS = [b"alpha", b"beta", b"gamma", b"delta", b"kafka", b"kelp", b"broker", b"record", b"%d"]


def _big_batch(codec: str, records: int) -> bytes:
    rnd = random.Random(36)
    values = [b" ".join(rnd.choice(WORDS) for _ in range(200))[:1024] for _ in range(records)]
    return build_batch([(b"k%d" % i, v) for i, v in enumerate(values)], compression=codec)


async def test_large_compressed_batches_and_bombs_are_checked_off_the_loop(tmp_path: Path) -> None:
    from kelp.broker.kafka.handlers import get_handler

    spec = get_handler(ProduceRequest.API_KEY)
    async with InProcessBroker(tmp_path) as b:
        probe = StepProbe()
        for codec in (*CODECS, "none"):
            topic = f"big-{codec}"
            # compacted: its keys are checked too, once, by the same walk (the log decoded them on the loop before)
            await b.parts.topics.create_topic(topic, 1, 1, configs={"max.message.bytes": str(2 << 20),
                                                                    "cleanup.policy": "compact"})
            pills = [("zip bomb", bomb(codec, 130 << 20))] if codec != "none" else []
            for name, batch in [("1 MB batch", _big_batch(codec, 1500)), *pills]:
                body = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                    T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])]).encode(version=9)
                with probe.measuring():
                    await asyncio.sleep(0)
                    probe.reset()
                    await asyncio.create_task(serve(b.parts, spec, 9, body, ADMIN))  # its own steps, each timed
                    assert probe.longest_s <= BOUND_S, (
                        f"{codec} {name}: {probe.longest_s * 1000:.0f} ms in {probe.longest}")
            log = b.parts.replicas.get_partition(topic, 0).log
            assert log.log_end_offset == 1500  # the good batch stored, the bomb not
        answer = await b.call(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            T(name="big-zstd", partition_data=[T.PartitionProduceData(index=0, records=bomb("zstd", 130 << 20))])]),
            9)
        part = answer.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert "inflates past 134217728 bytes" in part.error_message  # 64 x max.message.bytes (2 MiB)
