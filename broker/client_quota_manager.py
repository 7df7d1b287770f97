"""Client byte-rate quotas enforced (KIP-13, KIP-55): how much a producer may write and a consumer read per second.

Why: one client producing or fetching as fast as the network allows takes the disk, the replication and the
event loop from everyone else; Kafka bounds it with `producer_byte_rate` / `consumer_byte_rate` quotas set by
`kafka-configs` (recorded in the metadata image: `metadata.client_quotas`). This module is Kafka's
ClientQuotaManager: the quota of a request's (user, client id) is the most specific entity that sets the key,
in Kafka's order

    user + client id, user + default client id, user, default user + client id,
    default user + default client id, default user, client id, default client id

and the bytes are counted in a sensor per matched entity with the request's own names where the entity
names a default (so `--entity-default` gives every user its own allowance; `--entity-name alice` is shared
by all of alice's clients). A sensor keeps `quota.window.num` samples (11) of `quota.window.size.seconds` (1),
Kafka's keys and defaults, exactly as Kafka 4.4's SampledStat keeps them (a ring of one sample more, reset
rather than dropped once idle for the whole window); its rate is the bytes over the samples' span, at least
`quota.window.num - 1` windows (Rate.windowSize). Once a request takes the rate over the quota, the client is told
to wait `(rate - quota) / quota * span` ms, rounded (`throttle_time_ms` in its answer; the same milliseconds as
Kafka's for the same bytes at the same times, tests/broker/test_client_quota_manager.py), but never more than the
whole quota window (Kafka's byte-rate quotas set no bound: a 1 GB request under a 1 kB/s quota would mute the
connection for 11 days) and its connection reads nothing more for
that long (Kafka mutes the channel, KIP-219): the request itself is never dropped. A throttled fetch is
answered without records (its bytes are not counted), as Kafka does.

`request_percentage` (KIP-124) counts the broker's time spent on a client's requests, in percent of one second:
the loop's own steps of the request (Kafka: the request handler thread's time) plus the CPU its work took on the
CPU pool. 100 is the whole event loop. Once over, the answer carries the throttle time and the connection is
muted for it, bounded by one quota window (Kafka's ClientRequestQuotaManager). A follower's fetch and the
brokers' own WriteTxnMarkers are exempt (counted, never throttled), as in Kafka.

`controller_mutation_rate` (KIP-599) counts partitions created or deleted in a token bucket per matched entity:
it holds `quota x quota.window.num x quota.window.size.seconds` mutations, refills at the quota, and may go
negative by one request; while it is negative, CreateTopics v6+ answers each further topic
THROTTLING_QUOTA_EXCEEDED (older versions are served and throttled), the throttle time being what refills it.

This module must never do I/O or sleep: it counts and computes; the listener does the muting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from .metadata.client_quotas import CLIENT_ID, USER, Entity, QuotaTable

__all__ = ["ClientQuotaManager", "PRODUCE", "FETCH", "MUTATIONS", "REQUEST", "quota_of"]

PRODUCE, FETCH, MUTATIONS = "producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate"
REQUEST = "request_percentage"
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
    """Bytes per window: Kafka's SampledStat with a Rate over it (4.4), on integer milliseconds as Kafka keeps them.

    A ring of at most `windows + 1` samples, each [start ms, last record ms, bytes]: a record past its sample's
    window advances to the next slot of the ring (reusing the oldest); a sample without a record for a whole
    `windows` windows is reset to (now, now, 0) rather than dropped, and such an empty sample still marks where the
    rate's span begins (Rate.windowSize measures from the oldest sample's start), as in Kafka."""

    __slots__ = ("samples", "current", "used", "windows", "window_ms")

    def __init__(self, now: float, windows: int, window_s: float) -> None:
        self.windows, self.window_ms = windows, max(1, round(window_s * 1000))
        at = _ms(now)
        self.samples: list[list[float]] = [[at, at, 0.0]]
        self.current = 0
        self.used = now

    def record(self, value: float, now: float) -> None:
        self.used = now
        at = _ms(now)
        sample = self.samples[self.current]
        if at - sample[0] >= self.window_ms:  # Sample.isComplete: SampledStat.advance, one slot more than windows
            self.current = (self.current + 1) % (self.windows + 1)
            if self.current >= len(self.samples):
                self.samples.append([at, at, 0.0])
            else:
                self.samples[self.current][:] = [at, at, 0.0]
            sample = self.samples[self.current]
        sample[2] += value
        sample[1] = at

    def _purge(self, at: int) -> None:
        """SampledStat.purgeObsoleteSamples: a sample with no record in the last `windows` windows starts over."""
        for sample in self.samples:
            if at - sample[1] >= self.windows * self.window_ms:
                sample[:] = [at, at, 0.0]

    def span_ms(self, at: int) -> int:
        """Kafka's Rate.windowSize: from the oldest sample's start, at least `windows - 1` whole windows."""
        self._purge(at)
        elapsed = at - min(s[0] for s in self.samples)
        full = elapsed // self.window_ms
        if full < self.windows - 1:
            elapsed += (self.windows - 1 - full) * self.window_ms
        return max(int(elapsed), 1)

    def rate(self, now: float) -> float:
        at = _ms(now)
        self._purge(at)
        return sum(s[2] for s in self.samples) / (self.span_ms(at) / 1000)


def _ms(now: float) -> int:
    return round(now * 1000)


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
        # answers throttled, and the time clients were told to wait, by quota key
        self.throttled: dict[str, int] = {PRODUCE: 0, FETCH: 0, MUTATIONS: 0, REQUEST: 0}
        self.throttle_s: dict[str, float] = {PRODUCE: 0.0, FETCH: 0.0, MUTATIONS: 0.0, REQUEST: 0.0}
        self.exempt_s = 0.0  # broker time of exempt requests (Kafka's exempt-request-time)
        self._request_table: QuotaTable | None = None
        self._requests_limited = False

    def record(self, key: str, user: str, client_id: str, size: int) -> int:
        """Count `size` bytes for this client; the throttle time in ms (0: within its quota, or none set)."""
        return self._record(key, user, client_id, size, round(self._windows * self._window_s * 1000))

    def limits_requests(self) -> bool:
        """Whether any entity sets `request_percentage` (else no request's time is measured at all)."""
        table = self._table()
        if table is not self._request_table:
            self._request_table = table
            self._requests_limited = any(REQUEST in values for values in table.values())
        return self._requests_limited

    def record_request(self, user: str, client_id: str, seconds: float, *, throttle: bool = True) -> int:
        """`seconds` of the broker's time spent on this client's request; the throttle time in ms, at most one
        quota window (0: within its request_percentage, or none set). `throttle=False` only counts (Kafka's
        recordNoThrottle: the time an answer took after its throttle was decided)."""
        return self._record(REQUEST, user, client_id, seconds * 100, round(self._window_s * 1000), throttle)

    def record_exempt(self, seconds: float) -> None:
        """Broker time of a request exempt from request quotas (a follower's fetch, inter-broker markers)."""
        self.exempt_s += seconds

    def _record(self, key: str, user: str, client_id: str, size: float, max_ms: int, throttle: bool = True) -> int:
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
        if not throttle:
            return 0
        rate = sensor.rate(now)
        if rate <= bound:
            return 0
        span_ms = sensor.span_ms(_ms(now))
        # QuotaUtils.throttleTime: (rate - bound) / bound x the span, rounded; at most max_ms
        throttle_ms = span_ms if bound <= 0 else round((rate - bound) / bound * span_ms)
        ms = int(min(throttle_ms, max_ms))
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
