"""How often and how long a client retries, and which failures a retry can cure.

Why: the Spark source retries a request after a metadata refresh when
leadership moved (as Kafka's clients do on NOT_LEADER_OR_FOLLOWER), REST
consumers (issue 22) after finding the group's coordinator again, and both
must stop after a bounded number of attempts with an error that says what
failed and why. The decisions live here, free of I/O, so the blocking and the
asyncio client drive the same rules (`BlockingClient.retrying`,
`AsyncClient.retrying`): attempt, and on a failure `Attempts.failed` either
re-raises (not retriable), raises `RetriesExhausted` (bound reached) or says
how long to back off before the caller recovers (refreshes metadata, forgets
a coordinator) and attempts again.

A failure is retriable when the broker could not be reached or fell out of
step (`BrokerUnavailable`: the connection reconnects) or answered an error
code of the policy's set. What this module must never do: sleep, do I/O, or
allow an unbounded number of attempts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kelp.errors import ErrorCode

from .errors import BrokerUnavailable, ErrorResponse, KafkaClientError, RetriesExhausted

__all__ = ["LEADER_MOVED", "COORDINATOR_MOVED", "RetryPolicy", "Attempts"]

# Answers after which fresh metadata (a new leader, a created topic, a caught-up ISR) may let the request
# through; the Spark source's set since it was written.
LEADER_MOVED: frozenset[int] = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
})
# Answers after which the group's coordinator must be found again (FindCoordinator) before retrying.
COORDINATOR_MOVED: frozenset[int] = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`retries` attempts after the first; before attempt n+1 the client backs off
    min(`backoff_s` × n, `max_backoff_s`) seconds; `retriable_codes` are the error codes worth retrying."""

    retries: int = 10
    backoff_s: float = 0.2
    max_backoff_s: float = 2.0
    retriable_codes: frozenset[int] = LEADER_MOVED

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError(f"a retry policy needs retries, backoff_s and max_backoff_s >= 0, not {self}")

    def retriable(self, exc: KafkaClientError) -> bool:
        if isinstance(exc, BrokerUnavailable):
            return True
        return isinstance(exc, ErrorResponse) and exc.code in self.retriable_codes

    def delay(self, failures: int) -> float:
        """Seconds to back off after the `failures`-th failed attempt."""
        return min(self.backoff_s * failures, self.max_backoff_s)

    def start(self, what: str) -> Attempts:
        return Attempts(what, self)


class Attempts:
    """The attempts of one operation (`what`, for the final message) under one policy."""

    __slots__ = ("what", "policy", "failures", "recovery_error")

    def __init__(self, what: str, policy: RetryPolicy) -> None:
        self.what = what
        self.policy = policy
        self.failures = 0
        self.recovery_error: KafkaClientError | None = None

    def failed(self, exc: KafkaClientError) -> float:
        """Count a failed attempt: the seconds to back off before recovering and attempting again.

        Raises `exc` itself when it is not retriable, `RetriesExhausted` (carrying its code and broker)
        when it was the last attempt allowed."""
        if not self.policy.retriable(exc):
            raise exc
        self.failures += 1
        if self.failures > self.policy.retries:
            also = f" (and the last recovery failed: {self.recovery_error})" if self.recovery_error else ""
            raise RetriesExhausted(f"{self.what} failed after {self.failures} attempts: {exc}{also}", exc.code,
                                   address=exc.address) from exc
        return self.policy.delay(self.failures)

    def recovered(self, error: KafkaClientError | None = None) -> None:
        """The recovery between attempts went through (`error` None) or failed with `error`; the next attempt
        goes ahead either way, and a failure is reported if the attempts run out."""
        self.recovery_error = error
