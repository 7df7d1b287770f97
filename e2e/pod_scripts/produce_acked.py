"""Produce COUNT records to TOPIC over about SECONDS with acks=all; print what was acknowledged.

usage: python produce_acked.py BOOTSTRAP TOPIC COUNT SECONDS TAG

Record i has key "i" and value "TAG-i". kafka-python's defaults make the
producer idempotent with acks=all and unbounded retries inside
delivery_timeout_ms, so a broker that goes away mid-run costs retries, not
records. An acknowledgement is recorded only from the send future's success
callback, with the partition and offset the broker assigned; everything else
(a send that raised, a future that failed, one still pending at the end) is
counted as not acknowledged. Progress lines go to stdout every 100 records;
the last line is `KELP-E2E-RESULT {"sent", "acked": [[partition, offset, i]...],
"failedCount", "failed": [first 20 errors], "seconds"}`.
"""

import json
import sys
import threading
import time

from kafka import KafkaProducer

bootstrap, topic, count, seconds, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]

lock = threading.Lock()
acked = []
failed = []


def on_ack(i):
    def callback(md):
        with lock:
            acked.append([md.partition, md.offset, i])
    return callback


def on_error(i):
    def errback(exc):
        with lock:
            failed.append([i, repr(exc)])
    return errback


producer = KafkaProducer(
    bootstrap_servers=bootstrap.split(","), client_id="kelp-e2e-producer", acks="all",
    linger_ms=5, request_timeout_ms=15000, delivery_timeout_ms=180000, max_block_ms=60000,
    retry_backoff_ms=250, reconnect_backoff_ms=250, reconnect_backoff_max_ms=2000, metadata_max_age_ms=5000,
)
start = time.monotonic()
for i in range(count):
    try:
        future = producer.send(topic, key=str(i).encode(), value=f"{tag}-{i}".encode())
    except Exception as exc:  # the producer gave up before the record was queued: not acknowledged
        with lock:
            failed.append([i, repr(exc)])
    else:
        future.add_callback(on_ack(i))
        future.add_errback(on_error(i))
    delay = start + seconds * (i + 1) / count - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    if (i + 1) % 100 == 0:
        with lock:
            print(f"progress sent={i + 1} acked={len(acked)} failed={len(failed)}", flush=True)
producer.flush(timeout=240)
producer.close(timeout=30)
with lock:
    result = {"sent": count, "acked": acked, "failedCount": len(failed), "failed": failed[:20],
              "seconds": round(time.monotonic() - start, 1)}
print("KELP-E2E-RESULT " + json.dumps(result, separators=(",", ":")), flush=True)
