"""Client byte-rate quotas enforced (KIP-13, KIP-55): how much a producer may write and a consumer read per second.

Why: one client producing or fetching as fast as the network allows takes the disk, the replication and the
event loop from everyone else; Kafka bounds it with `producer_byte_rate` / `consumer_byte_rate` quotas set by
`kafka-configs` (recorded in the metadata image: `cluster.client_quotas`). This module is Kafka's
ClientQuotaManager: the quota of a request's (user, client id) is the most specific entity that sets the key,
in Kafka's order

    user + client id, user + default client id, user, default user + client id,
    default user + default client id, default user, client id, default client id

and the bytes are counted in a sensor per matched entity with the request's own names where the entity
names a default (so `--entity-default` gives every user its own allowance; `--entity-name alice` is shared
by all of alice's clients). A sensor keeps `quota.window.num` samples (11) of `quota.window.size.seconds` (1),
Kafka's keys and defaults; its rate is the bytes over the samples' span, at least `quota.window.num - 1`
windows. Once a request takes the rate over the quota, the client is told to wait
`(rate - quota) / quota * span` (`throttle_time_ms` in its answer) and its connection reads nothing more for
that long (Kafka mutes the channel, KIP-219): the request itself is never dropped. A throttled fetch is
answered without records (its bytes are not counted), as Kafka does.

`controller_mutation_rate` (KIP-599) counts partitions created or deleted in a token bucket per matched entity:
it holds `quota x quota.window.num x quota.window.size.seconds` mutations, refills at the quota, and may go
negative by one request; while it is negative, CreateTopics v6+ answers each further topic
THROTTLING_QUOTA_EXCEEDED (older versions are served and throttled), the throttle time being what refills it.

This module must never do I/O or sleep: it counts and computes; the listener does the muting.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping

from .cluster.client_quotas import CLIENT_ID, USER, Entity, QuotaTable

__all__ = ["ClientQuotaManager", "PRODUCE", "FETCH", "MUTATIONS", "quota_of"]

PRODUCE, FETCH, MUTATIONS = "producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate"
IDLE_S = 3600.0  # a sensor unused this long is dropped (Kafka expires quota sensors after an hour)

# (user component, client-id component) in Kafka's order: a name, the default (None), or absent ("-")
_ORDER: tuple[tuple[str, str], ...] = (
    ("name", "name"), ("name", "default"), ("name", "-"), ("default", "name"), ("default", "default"),
    ("default", "-"), ("-", "name"), ("-", "default"),
)

Tags = tuple[str, str]  # the sensor's (user, client id); "" for a component the entity does not name


def quota_of(table: QuotaTable, key: str, user: str, client_id: str) -> tuple[Tags, float] | None:
    """The sensor tags and bound of `key` for this (user, client id), or None when no entity sets it."""
    for user_part, client_part in _ORDER:
        parts: list[tuple[str, str | None]] = []
        if user_part != "-":
            parts.append((USER, user if user_part == "name" else None))
        if client_part != "-":
            parts.append((CLIENT_ID, client_id if client_part == "name" else None))
        entity: Entity = tuple(sorted(parts))
        values = table.get(entity)
        if values is not None and key in values:
            return (user if user_part != "-" else "", client_id if client_part != "-" else ""), values[key]
    return None


class _Sensor:
    """Bytes per window, `windows` windows of `window_s` kept (Kafka's SampledStat with a Rate over it)."""

    __slots__ = ("samples", "used", "windows", "window_s")

    def __init__(self, now: float, windows: int, window_s: float) -> None:
        self.samples: deque[list[float]] = deque()  # [window start, bytes]
        self.used = now
        self.windows, self.window_s = windows, window_s

    def record(self, value: float, now: float) -> None:
        self.used = now
        if not self.samples or now - self.samples[-1][0] >= self.window_s:
            self.samples.append([now, 0.0])
        self.samples[-1][1] += value
        while now - self.samples[0][0] >= self.windows * self.window_s:
            self.samples.popleft()

    def span(self, now: float) -> float:
        """Kafka's Rate.windowSize: the time since the oldest sample began, plus whole windows up to
        `windows - 1` full ones."""
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed // self.window_s)
        if full < self.windows - 1:
            elapsed += (self.windows - 1 - full) * self.window_s
        return max(elapsed, self.window_s)

    def rate(self, now: float) -> float:
        return sum(s[1] for s in self.samples) / self.span(now)


class _Bucket:
    """Kafka's TokenBucket: `burst` tokens at most, refilled at `rate` per second, negative once overdrawn."""

    __slots__ = ("tokens", "at", "used")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens, self.at, self.used = burst, now, now

    def refill(self, rate: float, burst: float, now: float) -> float:
        self.tokens = min(burst, self.tokens + rate * (now - self.at))
        self.at = self.used = now
        return self.tokens


class ClientQuotaManager:
    """Byte-rate sensors of one broker; `table` reads the current quotas (the metadata image's)."""

    def __init__(self, table: Callable[[], QuotaTable], *, windows: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if windows < 1 or window_s <= 0:
            raise ValueError(f"quota windows: {windows} of {window_s} s; at least one window of some length is needed")
        self._table = table
        self._windows, self._window_s = windows, window_s
        self._clock = clock
        self._sensors: dict[tuple[str, Tags], _Sensor] = {}
        self._buckets: dict[Tags, _Bucket] = {}
        self._swept = clock()
        self.throttled: dict[str, int] = {PRODUCE: 0, FETCH: 0, MUTATIONS: 0}  # answers throttled, by quota key
        self.throttle_s: dict[str, float] = {PRODUCE: 0.0, FETCH: 0.0, MUTATIONS: 0.0}  # time clients were told

    def record(self, key: str, user: str, client_id: str, size: int) -> int:
        """Count `size` bytes for this client; the throttle time in ms (0: within its quota, or none set)."""
        found = quota_of(self._table(), key, user, client_id)
        if found is None:
            return 0
        tags, bound = found
        now = self._clock()
        self._sweep(now)
        sensor = self._sensors.get((key, tags))
        if sensor is None:
            sensor = self._sensors[(key, tags)] = _Sensor(now, self._windows, self._window_s)
        sensor.record(size, now)
        rate = sensor.rate(now)
        if rate <= bound:
            return 0
        if bound <= 0:
            throttle_s = sensor.span(now)
        else:
            throttle_s = (rate - bound) / bound * sensor.span(now)
        ms = int(min(throttle_s, self._windows * self._window_s) * 1000)
        if ms > 0:
            self.throttled[key] += 1
            self.throttle_s[key] += ms / 1000
        return ms

    def unrecord(self, key: str, user: str, client_id: str, size: int) -> None:
        """Take back bytes `record` counted (a throttled fetch answered without them)."""
        found = quota_of(self._table(), key, user, client_id)
        sensor = self._sensors.get((key, found[0])) if found is not None else None
        if sensor is not None:
            sensor.record(-size, self._clock())

    # -- controller_mutation_rate (KIP-599) ---------------------------------------------------------------------
    def _bucket(self, user: str, client_id: str) -> tuple[_Bucket, float, float] | None:
        found = quota_of(self._table(), MUTATIONS, user, client_id)
        if found is None:
            return None
        tags, rate = found
        now = self._clock()
        self._sweep(now)
        burst = rate * self._windows * self._window_s
        bucket = self._buckets.get(tags)
        if bucket is None:
            bucket = self._buckets[tags] = _Bucket(burst, now)
        bucket.refill(rate, burst, now)
        return bucket, rate, burst

    def mutations_exceeded(self, user: str, client_id: str) -> bool:
        """Whether this client's mutation bucket is overdrawn (a strict request refuses its next topic)."""
        found = self._bucket(user, client_id)
        return found is not None and found[0].tokens < 0

    def record_mutations(self, user: str, client_id: str, count: int) -> None:
        """`count` partitions created or deleted by this client."""
        found = self._bucket(user, client_id)
        if found is not None:
            found[0].tokens -= count

    def mutation_throttle_ms(self, user: str, client_id: str) -> int:
        """How long until the client's bucket is no longer overdrawn (0: it is not); counted as a throttle."""
        found = self._bucket(user, client_id)
        if found is None or found[0].tokens >= 0:
            return 0
        bucket, rate, _burst = found
        ms = int(-bucket.tokens / rate * 1000) if rate > 0 else int(self._windows * self._window_s * 1000)
        if ms > 0:
            self.throttled[MUTATIONS] += 1
            self.throttle_s[MUTATIONS] += ms / 1000
        return ms

    def sensors(self) -> Mapping[tuple[str, Tags], float]:
        """Each sensor's current rate in bytes per second, by (quota key, (user, client id))."""
        now = self._clock()
        return {k: s.rate(now) for k, s in self._sensors.items()}

    def _sweep(self, now: float) -> None:
        if now - self._swept < 60.0:
            return
        self._swept = now
        for k in [k for k, s in self._sensors.items() if now - s.used > IDLE_S]:
            del self._sensors[k]
        for tags in [t for t, b in self._buckets.items() if now - b.used > IDLE_S]:
            del self._buckets[tags]
