"""Client byte-rate quotas (issue 33, KIP-13/KIP-55): which quota applies, and how long a client is throttled.

The rules on a scripted clock: Kafka's precedence of the eight entity forms, per key; a sensor per matched
entity with the request's own names for defaults; a client that waits out every throttle time it is given
averages its quota (±10%) however fast it would go; the bytes of a throttled fetch are taken back.
"""

from __future__ import annotations

import pytest

from kelp.broker.client_quota_manager import FETCH, MUTATIONS, PRODUCE, REQUEST, ClientQuotaManager, quota_of
from kelp.broker.metadata.client_quotas import checked_entity


def ent(user: str | None | bool = False, client: str | None | bool = False):
    parts = []
    if user is not False:
        parts.append(("user", user))
    if client is not False:
        parts.append(("client-id", client))
    return checked_entity(parts)


KAFKA_ORDER = [  # most specific first (Kafka's docs, "Quotas")
    (ent("alice", "app"), ("alice", "app")),
    (ent("alice", None), ("alice", "app")),
    (ent("alice"), ("alice", "")),
    (ent(None, "app"), ("alice", "app")),
    (ent(None, None), ("alice", "app")),
    (ent(None), ("alice", "")),
    (ent(client="app"), ("", "app")),
    (ent(client=None), ("", "app")),
]


def test_kafkas_precedence_and_the_sensor_each_entity_gives() -> None:
    table = {entity: {PRODUCE: float(i + 1)} for i, (entity, _) in enumerate(KAFKA_ORDER)}
    for i, (entity, tags) in enumerate(KAFKA_ORDER):
        assert quota_of(table, PRODUCE, "alice", "app") == (tags, float(i + 1)), entity
        del table[entity]  # the next one down applies once this one is gone
    assert quota_of(table, PRODUCE, "alice", "app") is None


def test_each_key_is_looked_up_on_its_own() -> None:
    table = {ent("alice", "app"): {FETCH: 5.0}, ent(client=None): {PRODUCE: 7.0}}
    assert quota_of(table, FETCH, "alice", "app") == (("alice", "app"), 5.0)
    assert quota_of(table, PRODUCE, "alice", "app") == (("", "app"), 7.0)
    assert quota_of(table, FETCH, "bob", "app") is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("bound, chunk, tries_per_s", [(1_000_000, 65536, 200), (50_000, 16384, 50)])
def test_a_client_that_waits_out_its_throttle_averages_its_quota(bound: int, chunk: int, tries_per_s: int) -> None:
    clock = Clock()
    manager = ClientQuotaManager(lambda: {ent(client="greedy"): {PRODUCE: float(bound)}}, clock=clock)
    sent, start, throttles = 0, clock.now, 0
    while clock.now - start < 60:
        ms = manager.record(PRODUCE, "u", "greedy", chunk)
        sent += chunk
        throttles += ms > 0
        clock.now += ms / 1000 + 1 / tries_per_s  # it waits as told, else sends again at once
    rate = sent / (clock.now - start)
    assert throttles > 0
    # the first span's allowance (up to span x bound) spread over a minute, as Kafka's sawtooth allows
    assert bound * 0.9 <= rate <= bound * 1.2, rate


def test_clients_under_a_default_each_get_their_own_allowance_and_others_none() -> None:
    clock = Clock()
    manager = ClientQuotaManager(lambda: {ent(None): {PRODUCE: 1000.0}}, clock=clock)
    assert manager.record(PRODUCE, "alice", "a", 10_000) == 0  # exactly span x bound: within
    assert manager.record(PRODUCE, "alice", "b", 1) > 0  # alice's clients share her sensor
    assert manager.record(PRODUCE, "bob", "a", 10_000) == 0  # bob has his own
    unlimited = ClientQuotaManager(lambda: {}, clock=clock)
    assert unlimited.record(PRODUCE, "alice", "a", 1 << 40) == 0 and not unlimited.sensors()


def test_a_throttled_fetch_gives_its_bytes_back() -> None:
    clock = Clock()
    manager = ClientQuotaManager(lambda: {ent(client="c"): {FETCH: 100.0}}, clock=clock)
    assert manager.record(FETCH, "u", "c", 1000) == 0
    ms = manager.record(FETCH, "u", "c", 5000)
    assert ms > 0
    manager.unrecord(FETCH, "u", "c", 5000)
    assert manager.sensors()[(FETCH, ("", "c"))] == pytest.approx(1000 / 10)
    assert manager.throttled == {PRODUCE: 0, FETCH: 1, MUTATIONS: 0, REQUEST: 0}


def test_a_throttle_is_at_most_the_quota_window() -> None:
    clock = Clock()
    manager = ClientQuotaManager(lambda: {ent(client="c"): {PRODUCE: 1.0}}, windows=3, window_s=2.0, clock=clock)
    assert manager.record(PRODUCE, "u", "c", 1 << 30) == 6000
    with pytest.raises(ValueError, match="at least one window"):
        ClientQuotaManager(lambda: {}, windows=0)


def test_the_mutation_bucket_lets_one_request_overdraw_then_refills_at_the_quota() -> None:
    clock = Clock()
    manager = ClientQuotaManager(lambda: {ent("churn"): {MUTATIONS: 2.0}}, windows=3, clock=clock)
    assert not manager.mutations_exceeded("churn", "c")  # a full bucket: 2/s x 3 windows of 1 s = 6
    manager.record_mutations("churn", "c", 10)  # one request may take it below zero
    assert manager.mutations_exceeded("churn", "c")
    assert manager.mutation_throttle_ms("churn", "c") == 2000  # 4 missing at 2/s
    clock.now += 2.0
    assert not manager.mutations_exceeded("churn", "c") and manager.mutation_throttle_ms("churn", "c") == 0
    assert not manager.mutations_exceeded("other", "c")  # no quota: never
    assert manager.throttled[MUTATIONS] == 1


class KafkaRate:
    """Kafka 4.4's SampledStat and Rate (org.apache.kafka.common.metrics.stats, read from its kafka-clients jar) and
    QuotaUtils.throttleTime, transcribed on integer milliseconds as Kafka computes them: the oracle the sensor is
    checked against. Kelp's one addition, the throttle's bound at the whole quota window, is applied at the end."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.n, self.window_ms = samples, window_ms
        self.samples: list[list[float]] = []  # Sample: [startTimeMs, lastEventMs, value]
        self.current = 0

    def record(self, value: float, now: int) -> None:
        if not self.samples:
            self.samples.append([now, now, 0.0])
        sample = self.samples[self.current]
        if now - sample[0] >= self.window_ms:  # Sample.isComplete: SampledStat.advance (samples + 1 slots)
            self.current = (self.current + 1) % (self.n + 1)
            if self.current >= len(self.samples):
                self.samples.append([now, now, 0.0])
            else:
                self.samples[self.current][:] = [now, now, 0.0]
            sample = self.samples[self.current]
        sample[2] += value
        sample[1] = now

    def _purge(self, now: int) -> None:  # SampledStat.purgeObsoleteSamples
        for sample in self.samples:
            if now - sample[1] >= self.n * self.window_ms:
                sample[:] = [now, now, 0.0]

    def window_size(self, now: int) -> int:  # Rate.windowSize
        self._purge(now)
        elapsed = now - min(s[0] for s in self.samples)
        full = elapsed // self.window_ms
        if full < self.n - 1:
            elapsed += (self.n - 1 - full) * self.window_ms
        return max(int(elapsed), 1)

    def throttle_ms(self, value: float, bound: float, now: int) -> int:
        self.record(value, now)
        self._purge(now)
        rate = sum(s[2] for s in self.samples) / (self.window_size(now) / 1000)
        if rate <= bound:
            return 0
        return min(round((rate - bound) / bound * self.window_size(now)), self.n * self.window_ms)


@pytest.mark.parametrize("windows, window_ms", [(11, 1000), (3, 1000), (4, 500)])
def test_throttle_times_are_kafkas_to_the_millisecond(windows: int, window_ms: int) -> None:
    """Every throttle time of a random workload — bursts, clients that wait as told, idle gaps longer than every
    sample — equals Kafka's for the same bytes at the same times (to its rounding)."""
    import random

    rnd = random.Random(33)
    bound = 1_000_000.0
    clock = Clock()
    now = 0
    manager = ClientQuotaManager(lambda: {ent(client="c"): {PRODUCE: bound}}, windows=windows,
                                 window_s=window_ms / 1000, clock=clock)
    kafka = KafkaRate(windows, window_ms)
    throttled = 0
    for _ in range(5000):
        size = rnd.choice([100, 16_384, 65_636, 1_000_000])
        clock.now = now / 1000
        ours, theirs = manager.record(PRODUCE, "u", "c", size), kafka.throttle_ms(size, bound, now)
        assert abs(ours - theirs) <= 1, (now, size, ours, theirs)
        throttled += theirs > 0
        gap = rnd.random()
        now += theirs + (2 if gap < 0.8 else rnd.randrange(window_ms) if gap < 0.97 else rnd.randrange(15_000))
    assert throttled > 500
