"""Read every partition of TOPIC from its log start to its high watermark; print what was read.

usage: python consume_all.py BOOTSTRAP TOPIC TIMEOUT_SECONDS

No group, no commits: the consumer assigns itself every partition, takes the
end offsets once at the start (the producer has finished by then) and polls
until each position reaches its end offset or the timeout passes. The last
line is `KELP-E2E-RESULT {"end": {partition: offset}, "position": {...},
"complete": bool, "records": {partition: [[offset, value]...]}}`.
"""

import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition

bootstrap, topic, timeout_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
deadline = time.monotonic() + timeout_s

consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), client_id="kelp-e2e-consumer", group_id=None,
                         enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=31000,
                         reconnect_backoff_max_ms=2000, metadata_max_age_ms=5000)
partitions = None
while not partitions and time.monotonic() < deadline:
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        time.sleep(1)
if not partitions:
    raise SystemExit(f"topic {topic} has no partitions in the metadata after {timeout_s:.0f}s")
tps = [TopicPartition(topic, p) for p in sorted(partitions)]
consumer.assign(tps)
consumer.seek_to_beginning(*tps)
end = consumer.end_offsets(tps)
records = {tp.partition: [] for tp in tps}


def behind():
    return [tp for tp in tps if consumer.position(tp) < end[tp]]


while behind() and time.monotonic() < deadline:
    for tp, messages in consumer.poll(timeout_ms=1000).items():
        for m in messages:
            records[tp.partition].append([m.offset, m.value.decode() if m.value is not None else None])
    print(f"progress read={sum(len(r) for r in records.values())}", flush=True)
result = {"end": {tp.partition: end[tp] for tp in tps}, "position": {tp.partition: consumer.position(tp) for tp in tps},
          "complete": not behind(), "records": records}
consumer.close()
print("KELP-E2E-RESULT " + json.dumps(result, separators=(",", ":")), flush=True)
