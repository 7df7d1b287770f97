"""Which Topic resource owns a topic, decided in linear time over thousands of resources (finding 9).

What a user relies on: with a few thousand Topic resources — some naming the
same topic — the oldest one owns each topic, the newer ones say
DuplicateTopic, and a resync pass over all of them costs a constant number
of Topic list calls, not one list of every Topic per Topic (quadratic: 9
million objects read for 3000 Topics). The cost is counted in objects the
fake API server returned, which is deterministic.
"""

from __future__ import annotations

import asyncio
import os
import time

from kelp.operator.reconcile.resync import resync_once
from kelp.operator.reconcile.runner import Runner
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, resource

TOPICS = int(os.environ.get("KELP_TEST_OWNERSHIP_TOPICS", "3000"))
DUPLICATES = TOPICS // 10


def test_ownership_over_thousands_of_topics_is_linear() -> None:
    admin = FakeAdmin(brokers=[0])
    objects = [resource("Cluster", "demo", {"brokers": 1})]
    for i in range(TOPICS):
        objects.append(resource("Topic", f"t-{i:05d}", {"cluster": "demo", "partitions": 1},
                                created=f"2026-11-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"))
    # Newer resources naming the topics of the first DUPLICATES ones (created a day later).
    for i in range(DUPLICATES):
        objects.append(resource("Topic", f"copy-{i:05d}", {"cluster": "demo", "topicName": f"t-{i:05d}",
                                                            "partitions": 1}, created="2026-11-02T00:00:00Z"))
    kube = FakeKube(*objects)
    started = time.monotonic()
    failed = asyncio.run(resync_once(kube, None, None, runner=Runner(kube, admin_of(admin))))
    elapsed = time.monotonic() - started
    assert failed == 0
    total = TOPICS + DUPLICATES
    print(f"\nresync pass over {total} Topic resources: {elapsed:.2f}s, {kube.listed.get('Topic', 0)} "
          "Topic objects read")
    assert kube.listed.get("Topic", 0) <= 3 * total, f"{kube.listed['Topic']} Topic objects read for {total} Topics"

    def ready(name: str) -> dict:
        status = kube.objects[("Topic", "ns", name)]["status"]
        return next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready("t-00000")["reason"] == "TopicReady"
    assert ready(f"t-{TOPICS - 1:05d}")["reason"] == "TopicReady"
    dup = ready("copy-00007")
    assert dup["reason"] == "DuplicateTopic" and "Topic resource 't-00007' (older)" in dup["message"]
    created = [b["name"] for m, p, b in admin.requests if (m, p) == ("POST", "/admin/v1/topics")]
    assert len(created) == TOPICS and len(set(created)) == TOPICS  # every topic once, by its owner


def test_a_burst_of_topic_events_reads_each_topic_a_bounded_number_of_times() -> None:
    """Operator start: kopf resumes every Topic, one handler call each; they share one ownership index."""
    from kelp.operator.reconcile.runner import Runner
    from kelp.operator.reconcile.topics import TopicOwners

    admin = FakeAdmin(brokers=[0])
    n = TOPICS // 3
    objects = [resource("Cluster", "demo", {"brokers": 1})]
    objects += [resource("Topic", f"t-{i:05d}", {"cluster": "demo"}, created=f"2026-11-01T00:{i // 60 % 60:02d}:"
                         f"{i % 60:02d}Z") for i in range(n)]
    objects.append(resource("Topic", "late-copy", {"cluster": "demo", "topicName": "t-00003"},
                            created="2026-11-03T00:00:00Z"))
    kube = FakeKube(*objects)
    runner = Runner(kube, admin_of(admin))
    owners = TopicOwners()

    async def events() -> None:
        for i in range(n):
            await runner.reconcile("Topic", "ns", f"t-{i:05d}", owners=owners)
        # A duplicate created after the index was built: it is new to the index, so the index is rebuilt.
        await runner.reconcile("Topic", "ns", "late-copy", owners=owners)
        # The owner goes; the duplicate becomes the owner on its next event.
        kube.objects.pop(("Topic", "ns", "t-00003"))
        await runner.reconcile("Topic", "ns", "late-copy", owners=owners)
    asyncio.run(events())
    assert kube.listed.get("Topic", 0) <= 4 * (n + 1), f"{kube.listed['Topic']} Topic objects read for {n} events"
    conds = kube.objects[("Topic", "ns", "late-copy")]["status"]["conditions"]
    assert next(c for c in conds if c["type"] == "Ready")["reason"] == "TopicReady"
    assert kube.events("DuplicateTopic")  # the first event refused it, with a Warning
