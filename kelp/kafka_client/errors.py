"""What can go wrong when Kelp speaks the Kafka protocol as a client, as exception classes.

Why: the Spark source, the replica fetcher and (issue 22) the REST consumers
react to the same few failures — a broker that cannot be reached or stopped
answering, a reply that is out of step with the request, an error code in a
reply, retries used up — and a retry helper must tell them apart by class,
never by parsing a message. Every message names the broker address (or the
bootstrap list) it concerns.

These are a client's errors, apart from `kelp.errors.KelpError` (which the
broker raises and turns into an error code of its own reply). This module
must never do I/O or import anything of the broker.
"""

from __future__ import annotations

__all__ = ["KafkaClientError", "BrokerUnavailable", "BrokerTimeout", "BadResponse", "ErrorResponse",
           "RetriesExhausted", "AuthenticationFailed", "error_name"]


class KafkaClientError(Exception):
    """Base class. `code` is the Kafka error code when a broker answered one; `address` the broker asked."""

    def __init__(self, message: str, code: int | None = None, *, address: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.address = address


class BrokerUnavailable(KafkaClientError, ConnectionError):
    """The broker could not be reached, closed the connection, or the connection fell out of step.

    The connection has been dropped; the next request on it connects again, so a retry may succeed.
    """

    def __init__(self, message: str, *, address: str | None = None) -> None:
        super().__init__(message, None, address=address)


class BrokerTimeout(BrokerUnavailable, TimeoutError):
    """Connecting, sending or reading the reply took longer than the timeout allowed."""


class BadResponse(BrokerUnavailable):
    """A reply that cannot belong to the request: a frame size out of bounds, another correlation id, or
    bytes that do not decode as the request's response at its version."""


class ErrorResponse(KafkaClientError):
    """The broker answered, with a Kafka error code for (part of) the request."""

    code: int

    def __init__(self, message: str, code: int, *, address: str | None = None) -> None:
        super().__init__(message, code, address=address)


class AuthenticationFailed(KafkaClientError):
    """The broker refused this client's SASL authentication (wrong credentials, a mechanism it does not enable),
    or its answers could not be trusted (a SCRAM signature that does not verify). Not retried: the same
    credentials fail the same way. The connection has been dropped."""


class RetriesExhausted(KafkaClientError):
    """A request kept failing in a retriable way until the retry bound; `code` is the last error code."""


def error_name(code: int) -> str:
    """kafka-python's class name for an error code ("NotLeaderForPartitionError"), for messages."""
    try:
        from kafka.errors import for_code

        return str(for_code(code).__name__)
    except Exception:  # a name is only decoration for the message
        return f"error {code}"
