"""Replication quotas (Kafka's KIP-73): a byte rate that replicas catching up may use, on the leader and the follower.

Why: a reassignment or a scale-down drain copies whole logs to new replicas. Unthrottled, that copy takes the
disks and the network that producers and in-sync followers need, and acks=all latency climbs for the whole
move. Kafka bounds it per broker, and Kelp follows Kafka's rules, so `kafka-reassign-partitions --throttle` and
the operator's drain set the same keys:
- **Which replicas.** A topic names them in `leader.replication.throttled.replicas` and
  `follower.replication.throttled.replicas`: `*`, or `partition:broker` pairs. A broker's leader quota covers the
  partitions listed with its id on the leader list. Kafka's tool lists every current replica there, because any
  of them may be leader. Its follower quota covers the pairs on the follower list, which the tool fills with the
  replicas being added.
- **How fast.** The rate is the broker's dynamic `leader.replication.throttled.rate` and
  `follower.replication.throttled.rate`. The default, Long.MAX_VALUE, throttles nothing. It is measured as
  Kafka's SimpleRate: bytes since the oldest of `replication.quota.window.num` samples of
  `replication.quota.window.size.seconds`, over at least one window.
- **Only out of sync.** A replica in the ISR is never throttled: acks=all waits for it.
- **How.** While the rate is over its bound, the leader leaves throttled partitions out of a follower's fetch
  answer (Kafka's `ReplicaManager.shouldLeaderThrottle`), and the follower leaves them out of its fetch request
  (`ReplicaFetcherThread.shouldFollowerThrottle`).
- **Accounting.** Both sides count every throttled byte they move. Kelp counts each partition as it is read,
  so the bound is checked again before the next partition. Kafka counts once per response, so one response
  there can overshoot by a whole fetch.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Mapping

from kelp.config.broker import BrokerConfig

__all__ = ["ReplicationQuota", "ReplicationQuotas", "LEADER", "FOLLOWER", "throttled_partitions", "ALL"]

LEADER, FOLLOWER = "leader", "follower"
ALL = "*"


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | str:
    """The partitions a `*.replication.throttled.replicas` value throttles on `broker_id` (`ALL` for `*`).

    The value was validated when it was set (`config_keys.throttled_replicas`); anything unreadable here
    throttles nothing."""
    text = (value or "").strip()
    if text == ALL:
        return ALL
    out: set[int] = set()
    for item in text.split(","):
        partition, _, broker = item.strip().partition(":")
        if partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's quota on one broker: which partitions it covers, and the bytes they moved."""

    def __init__(self, side: str, config: BrokerConfig, topic_configs: Callable[[str], Mapping[str, str] | None],
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self.side = side
        self.config = config
        self._topic_configs = topic_configs
        self._clock = clock
        self._key = f"{side}.replication.throttled.replicas"
        self._rate_key = f"{side}.replication.throttled.rate"
        self._parsed: dict[str, tuple[str, frozenset[int] | str]] = {}  # topic -> (value, partitions)
        self._samples: deque[list[float]] = deque()  # [window start, bytes]
        self.throttled_bytes = 0  # every throttled byte moved, for the metrics
        self.skipped = 0  # partitions left out of a fetch because the rate was over its bound

    def is_throttled(self, topic: str, partition: int) -> bool:
        """True when the topic lists this partition on this broker for this side."""
        configs = self._topic_configs(topic)
        value = (configs or {}).get(self._key) or ""
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != value:
            cached = self._parsed[topic] = (value, throttled_partitions(value, self.config.broker_id))
        covered = cached[1]
        return covered == ALL or partition in covered

    def bound(self) -> int:
        return int(self.config[self._rate_key])

    def exceeded(self) -> bool:
        """Kafka's `isQuotaExceeded`: the measured rate is over the bound (never with the default bound)."""
        return self.rate() > self.bound()

    def record(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        now = self._clock()
        self._purge(now)
        window = float(self.config["replication.quota.window.size.seconds"])
        if not self._samples or now - self._samples[-1][0] >= window:
            self._samples.append([now, 0.0])
        self._samples[-1][1] += nbytes
        self.throttled_bytes += nbytes

    def rate(self) -> float:
        """Bytes per second over the kept samples (Kafka's SimpleRate: since the oldest sample, at least a window)."""
        now = self._clock()
        self._purge(now)
        if not self._samples:
            return 0.0
        window = float(self.config["replication.quota.window.size.seconds"])
        return sum(s[1] for s in self._samples) / max(now - self._samples[0][0], window)

    def _purge(self, now: float) -> None:
        keep = int(self.config["replication.quota.window.num"]) * float(
            self.config["replication.quota.window.size.seconds"])
        while self._samples and now - self._samples[0][0] >= keep:
            self._samples.popleft()

    def forget(self, topic: str) -> None:
        self._parsed.pop(topic, None)


class ReplicationQuotas:
    """The leader and follower quotas of one broker (held by the replica manager)."""

    def __init__(self, config: BrokerConfig, topic_configs: Callable[[str], Mapping[str, str] | None],
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self.leader = ReplicationQuota(LEADER, config, topic_configs, clock=clock)
        self.follower = ReplicationQuota(FOLLOWER, config, topic_configs, clock=clock)

    def should_throttle(self, quota: ReplicationQuota, topic: str, partition: int, in_sync: bool) -> bool:
        """Kafka's `shouldLeaderThrottle` / `shouldFollowerThrottle`: out of sync, listed, and over the bound."""
        return not in_sync and quota.is_throttled(topic, partition) and quota.exceeded()
