"""Bounds of the Kafka listener: the request memory pool and the connection quotas.

Why: without them a client decides how much memory the broker uses. A
connection that declares a 100 MiB frame and trickles its bytes, or many
such connections, or thousands of sockets opened and left alone, each cost
the broker memory it never agreed to. Kafka bounds these with
`queued.max.request.bytes` (a memory pool for requests), `max.connections`,
`max.connections.per.ip` and `connections.max.idle.ms`; this module holds the
accounting, the server (`server.py`) does the I/O.

The pool (`MemoryPool`) counts the bytes of frames being received (the
capacity of their buffers, which grow as bytes arrive) and of frames
received and not yet answered. A connection that needs more than the pool
has stops reading (its transport is paused) and waits in line; released
bytes wake the waiters in order. Two rules keep it live:

- Requests that fit the staging buffer (64 KiB: metadata, fetches, commits,
  small produces) may use the whole pool; frames being received beyond that
  (large frames) only the pool minus its last eighth. Connections stuck in
  the middle of large frames can therefore never starve small requests.
- One large frame at a time may grow beyond the pool (the "overdraft",
  counted apart so it takes nothing from small requests), so a frame larger
  than the pool is served and frames that each hold part of the pool and all
  need more cannot wait for each other forever. Kafka lets one request
  larger than the pool through when the pool is empty; Kelp lets one through
  whenever no other is over, so the worst case is the pool plus one
  `socket.request.max.bytes` frame (plus at most 1 KiB per connection that
  reads while the pool is full: such a read is cut to that size, and the
  connection then stops reading).

This module must never do I/O; a connection is what `PoolWaiter` says it is
(`connection._Connection`), and to the connection quota what `Admitted` says
(its bounds, `connection_bounds.ConnectionBounds`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol

__all__ = ["MemoryPool", "ConnectionQuota", "CreationRate", "RateLimitedLog", "UNBOUNDED", "Admitted"]

# Kafka's "no limit" for max.connections / max.connections.per.ip (Int.MaxValue).
UNBOUNDED = 2**31 - 1
# The share of the pool only requests that fit staging may use.
SMALL_REQUEST_SHARE = 8  # 1/8


class PoolWaiter(Protocol):
    """A connection waiting in the pool's line (`connection._Connection`); the pool calls it back."""

    def pool_grow(self) -> bool:
        """Bytes were released: take the next growth of the large frame; True once served (or gone)."""
        ...

    def pool_overdraft(self) -> None:
        """This connection's frame may now grow beyond the pool, until it is answered."""
        ...

    def pool_resume(self) -> None:
        """The pool is below its limit again: read on."""
        ...


class MemoryPool:
    """Bytes held by requests being received or waiting to be answered; None limit: unbounded."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.large_limit = None if limit is None else limit - limit // SMALL_REQUEST_SHARE
        self.used = 0
        self.over = 0  # bytes of the overdraft frame beyond the pool
        self.peak = 0  # highest used + over
        self.overdraft: PoolWaiter | None = None  # the connection whose frame may grow beyond the pool
        self._grow_waiters: deque[PoolWaiter] = deque()  # connections waiting to grow a large frame, in order
        self._read_waiters: deque[PoolWaiter] = deque()  # connections paused until the pool is below its limit

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    @property
    def waiting(self) -> int:
        return len(self._grow_waiters) + len(self._read_waiters)

    def charge(self, n: int) -> None:
        """Count bytes that are already held (read into staging) or granted without a check."""
        self.used += n
        if self.used + self.over > self.peak:
            self.peak = self.used + self.over

    def charge_over(self, n: int) -> None:
        """Growth of the overdraft frame, beyond the pool."""
        self.over += n
        if self.used + self.over > self.peak:
            self.peak = self.used + self.over

    def release(self, n: int) -> None:
        self.used -= n
        if self._grow_waiters or self._read_waiters:
            self._wake()

    def try_grow(self, want: int, at_least: int) -> int:
        """Grant up to `want` bytes to a large frame if at least `at_least` fit; 0 if not."""
        if self.large_limit is None:
            self.charge(want)
            return want
        room = self.large_limit - self.used
        if room < at_least:
            return 0
        grant = min(want, room)
        self.charge(grant)
        return grant

    def wait_to_grow(self, conn: PoolWaiter) -> None:
        self._grow_waiters.append(conn)
        self._grant_overdraft()

    def wait_to_read(self, conn: PoolWaiter) -> None:
        self._read_waiters.append(conn)

    def forget(self, conn: PoolWaiter) -> None:
        """A closed connection leaves the queues (its bytes are released by the caller)."""
        for queue in (self._grow_waiters, self._read_waiters):
            try:
                queue.remove(conn)
            except ValueError:
                pass

    def end_overdraft(self, conn: PoolWaiter, over: int) -> None:
        """The overdraft frame is answered or dropped: its `over` bytes go, the next may overdraw."""
        if self.overdraft is conn:
            self.over -= over
            self.overdraft = None
            self._wake()

    def _wake(self) -> None:
        grow = self._grow_waiters
        while grow and grow[0].pool_grow():
            grow.popleft()
        self._grant_overdraft()
        read = self._read_waiters
        while read and not self.exhausted:
            read.popleft().pool_resume()

    def _grant_overdraft(self) -> None:
        if self.overdraft is None and self._grow_waiters:
            conn = self._grow_waiters.popleft()
            self.overdraft = conn
            conn.pool_overdraft()


class RateLimitedLog:
    """At most one log line per key and interval; the next one says how many were left out."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._last[key] = now
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            msg += f" ({skipped} more like this in the last {self.interval_s:.0f} s not logged)"
        self.logger.warning(msg, *args)


class Admitted(Protocol):
    """An open connection as the connection quota sees it: its bounds (`connection_bounds.ConnectionBounds`)."""

    @property
    def last_active(self) -> float:
        """Monotonic seconds of its last read, answer or write."""
        ...

    def eviction_rank(self) -> int | None:
        """0: not authenticated yet, 1: an idle client's; None: never evicted (a broker's, or busy)."""
        ...

    def evict(self, limit: str) -> None:
        """Close it now to make room under `limit` (a config key)."""
        ...


class CreationRate:
    """Kafka's `max.connection.creation.rate`: new connections per second, a token bucket one second deep."""

    def __init__(self, per_second: int, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self._monotonic = monotonic
        self._tokens = float(per_second)
        self._at = monotonic()

    def take(self) -> bool:
        if self.per_second >= UNBOUNDED:
            return True
        now = self._monotonic()
        self._tokens = min(float(self.per_second), self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


MAX_IP_BUCKETS = 100_000  # addresses whose connection rate is tracked at once


class ConnectionQuota:
    """Open connections against Kafka's connection limits, shared by every listener of a broker.

    - `max.connections.per.ip` (and its `max.connections.per.ip.overrides`): a new connection beyond it is closed
      at once, as Kafka closes it.
    - `max.connection.creation.rate`, broker-wide and per listener (`listener.name.<l>.max.connection.creation.rate`,
      KIP-612): a connection beyond the rate is closed at once (Kafka delays its acceptor instead).
    - the `connection_creation_rate` client quota of an address (`kafka-configs --entity-type ips`, KIP-612), its
      own else the default address's (`ip_rates`): a connection beyond it is closed at once, as Kafka closes it.
    - `max.connections`, broker-wide, and `listener.name.<l>.max.connections`: at the limit the least recently used
      idle client connection (one not yet authenticated first) is closed to make room, so one client holding
      every slot cannot lock the others out; when none can be closed the new connection is. The inter-broker
      listener (`protected`, when it is a listener of its own) is exempt from the broker-wide limit, as in Kafka
      (KIP-402), and connections of brokers are never evicted.
    """

    def __init__(self, max_connections: int, max_per_ip: int, *, per_ip_overrides: Mapping[str, int] | None = None,
                 listener_max: Mapping[str, int] | None = None, creation_rate: int = UNBOUNDED,
                 listener_rates: Mapping[str, int] | None = None, protected: str | None = None,
                 ip_rates: Callable[[str], float | None] = lambda _ip: None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.listener_max = dict(listener_max or {})
        self.protected = protected
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.per_listener: dict[str, int] = {}
        self.open: dict[Admitted, tuple[str, str]] = {}  # connection -> (its listener, its address)
        self._rate = CreationRate(creation_rate, monotonic=monotonic)
        self._listener_rates = {name: CreationRate(rate, monotonic=monotonic)
                                for name, rate in (listener_rates or {}).items()}
        self.ip_rates = ip_rates  # an address's connection_creation_rate quota (None: none set)
        self._ip_buckets: dict[str, CreationRate] = {}
        self._monotonic = monotonic

    def limit_for_ip(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_per_ip)

    def admit(self, ip: str, listener: str = "", conn: Admitted | None = None) -> str | None:
        """Count the connection and return None, or return the config key that refused it (it is to be closed).
        Reaching `max.connections` or the listener's limit evicts an idle client connection instead, if any."""
        if self.per_ip.get(ip, 0) >= self.limit_for_ip(ip):
            return "max.connections.per.ip"
        exempt = listener == self.protected
        if not exempt and not self._ip_rate_allows(ip):
            return "connection_creation_rate"
        rate = self._listener_rates.get(listener)
        if rate is not None and not rate.take():
            return f"listener.name.{listener.lower()}.max.connection.creation.rate"
        if not exempt and not self._rate.take():
            return "max.connection.creation.rate"
        cap = self.listener_max.get(listener)
        if cap is not None and self.per_listener.get(listener, 0) >= cap \
                and not self._evict(listener, f"listener.name.{listener.lower()}.max.connections"):
            return f"listener.name.{listener.lower()}.max.connections"
        if self.total >= self.max_connections and not self._evict(None, "max.connections") and not exempt:
            return "max.connections"
        self.total += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        self.per_listener[listener] = self.per_listener.get(listener, 0) + 1
        if conn is not None:
            self.open[conn] = (listener, ip)
        return None

    def _ip_rate_allows(self, ip: str) -> bool:
        quota = self.ip_rates(ip)
        if quota is None:
            self._ip_buckets.pop(ip, None)
            return True
        per_second = int(quota)
        bucket = self._ip_buckets.get(ip)
        if bucket is None or bucket.per_second != per_second:
            if len(self._ip_buckets) >= MAX_IP_BUCKETS:  # forget addresses with nothing open (a burst at worst)
                self._ip_buckets = {a: b for a, b in self._ip_buckets.items() if self.per_ip.get(a)}
            bucket = self._ip_buckets[ip] = CreationRate(per_second, monotonic=self._monotonic)
        return bucket.take()

    def _evict(self, listener: str | None, limit: str) -> bool:
        """Close the least recently used evictable connection (of `listener`, or of any but the protected one)."""
        victim: Admitted | None = None
        best: tuple[int, float] | None = None
        for conn, (where, _ip) in self.open.items():
            if (listener is not None and where != listener) or (listener is None and where == self.protected):
                continue
            rank = conn.eviction_rank()
            if rank is None:
                continue
            key = (rank, conn.last_active)
            if best is None or key < best:
                victim, best = conn, key
        if victim is None:
            return False
        self.leave_conn(victim)
        victim.evict(limit)
        return True

    def leave_conn(self, conn: Admitted) -> None:
        """Forget an admitted connection (its slot counted free now; `leave` is not called again for it)."""
        where = self.open.pop(conn, None)
        if where is not None:
            self._count_down(where[1], where[0])

    def leave(self, ip: str, listener: str = "", conn: Admitted | None = None) -> None:
        if conn is not None:
            if conn not in self.open:
                return  # evicted: counted down then
            del self.open[conn]
        self._count_down(ip, listener)

    def _count_down(self, ip: str, listener: str) -> None:
        self.total -= 1
        n = self.per_ip.get(ip, 0) - 1
        if n > 0:
            self.per_ip[ip] = n
        else:
            self.per_ip.pop(ip, None)
        m = self.per_listener.get(listener, 0) - 1
        if m > 0:
            self.per_listener[listener] = m
        else:
            self.per_listener.pop(listener, None)
