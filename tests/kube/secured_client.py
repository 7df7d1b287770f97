"""A Kafka client that runs *inside a pod* with a KelpUser's Secret mounted at /etc/kelp-user (issue 20).

Why this exists: the KelpUser's promise is "mount the Secret, use client.properties". This script,
shipped into a pod of Kelp's image through a ConfigMap, takes everything from the mounted Secret —
security.protocol, sasl.mechanism, the JAAS line's username and password, the truststore (ca.crt) — and
only the bootstrap addresses from its environment (the tier has no cluster DNS, so the client Service name
in client.properties does not resolve; the brokers' pod IPs do). It produces COUNT keyed records with
acks=all over SASL_SSL (host names checked against the brokers' certificates), consumes them back through
the consumer group GROUP, and writes a JSON summary to the termination message, exiting 0 only when every
acknowledged record came back. kafka-python, as the image ships it: no other client is installed there.

It must never run unbounded: every wait has a deadline (DEADLINE_S).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

MOUNT = "/etc/kelp-user"
DEADLINE_S = 150.0


def properties(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                out[key.strip()] = value.strip()
    return out


def main() -> int:
    from kafka import KafkaConsumer, KafkaProducer

    started = time.monotonic()
    props = properties(f"{MOUNT}/client.properties")
    jaas = re.search(r'username="([^"]+)"\s+password="([^"]+)"', props["sasl.jaas.config"])
    assert jaas is not None, "client.properties has no SCRAM JAAS line"
    topic, group, count = os.environ["TOPIC"], os.environ["GROUP"], int(os.environ["COUNT"])
    common = {"bootstrap_servers": os.environ["BOOTSTRAP"].split(","),
              "security_protocol": props["security.protocol"], "sasl_mechanism": props["sasl.mechanism"],
              "sasl_plain_username": jaas.group(1), "sasl_plain_password": jaas.group(2),
              "ssl_cafile": props["ssl.truststore.location"], "ssl_check_hostname": True}
    summary: dict[str, object] = {"user": jaas.group(1), "protocol": props["security.protocol"],
                                  "mechanism": props["sasl.mechanism"]}
    producer = KafkaProducer(acks="all", retries=5, **common)
    futures = [producer.send(topic, key=f"k{i % 7}".encode(), value=f"pod:{i}".encode()) for i in range(count)]
    producer.flush(timeout=60)
    acked = {}
    for i, fut in enumerate(futures):
        meta = fut.get(timeout=30)
        acked[f"pod:{i}"] = (meta.partition, meta.offset)
    producer.close(timeout=10)
    summary["acked"] = len(acked)
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **common)
    seen: dict[str, tuple[int, int]] = {}
    while len(seen) < len(acked) and time.monotonic() - started < DEADLINE_S:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for r in records:
                seen[r.value.decode()] = (tp.partition, r.offset)
    consumer.commit()
    consumer.close()
    missing = [v for v in acked if v not in seen]
    moved = [v for v in acked if v in seen and tuple(seen[v]) != tuple(acked[v])]
    summary.update({"consumed": len(seen), "missing": len(missing), "moved": len(moved),
                    "seconds": round(time.monotonic() - started, 1)})
    text = json.dumps(summary)
    print(text, flush=True)
    try:
        with open("/dev/termination-log", "w") as fh:
            fh.write(text)
    except OSError:
        pass
    return 0 if not missing and not moved else 1


if __name__ == "__main__":
    sys.exit(main())
