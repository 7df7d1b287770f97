"""Join GROUP on TOPIC, consume at most LIMIT records, commit, leave; print what was committed.

usage: python group_commit.py BOOTSTRAP TOPIC GROUP LIMIT TIMEOUT_SECONDS

A new group starts at the earliest offsets, so the committed offsets sum to
the number of records consumed; the rest of the topic is the group's lag.
`close()` leaves the group, which is then Empty with its offsets kept. The
last line is `KELP-E2E-RESULT {"consumed": n, "committed": {partition: offset}}`
(partitions of the assignment; an offset is null when none was committed).
"""

import json
import sys
import time

from kafka import KafkaConsumer

bootstrap, topic, group, limit, timeout_s = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
deadline = time.monotonic() + timeout_s

consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), client_id="kelp-e2e-group", group_id=group,
                         enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=limit,
                         request_timeout_ms=31000, reconnect_backoff_max_ms=2000)
consumed = 0
while consumed == 0 and time.monotonic() < deadline:
    for messages in consumer.poll(timeout_ms=1000).values():
        consumed += len(messages)
if consumed == 0:
    raise SystemExit(f"group {group} consumed nothing from {topic} in {timeout_s:.0f}s")
consumer.commit()
assigned = sorted(consumer.assignment())
committed = {tp.partition: consumer.committed(tp) for tp in assigned}
consumer.close()
print("KELP-E2E-RESULT " + json.dumps({"consumed": consumed, "committed": committed}, separators=(",", ":")),
      flush=True)
