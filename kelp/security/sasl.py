"""What every SASL mechanism server shares: its interface, its outcome, the one error, Kafka's bounds.

Why: PLAIN, SCRAM and OAUTHBEARER are separate state machines, but the connection layer drives them
alike (SaslHandshake picks one, each SaslAuthenticate feeds it a token and sends back its answer) and
must answer a failure the way Kafka's SaslServerAuthenticator does. So the shape lives here once:

- `SaslServer`: `evaluate(token) -> bytes` until `complete`, then `outcome`; `SaslServerBase` holds the
  name, `complete` and `outcome` of a server that is complete once it has an outcome (PLAIN, OAUTHBEARER).
- `SaslAuthenticationError`: the only exception a mechanism raises on bad input. `detail` is for the
  broker's log; `client_message()` is what the client may read. Kafka sends a mechanism's own message
  only for a `SaslAuthenticationException` (`public=True` here: PLAIN's messages, SCRAM's authorization-id
  mismatch, OAUTHBEARER's JSON status), and otherwise the fixed text "Authentication failed during
  authentication due to invalid credentials with SASL mechanism X", so nothing reveals whether a user
  exists (SaslServerAuthenticator.handleSaslToken).
- `MAX_RECEIVE_SIZE`: Kafka's `sasl.server.max.receive.size` default, 524288 bytes.
- `session_lifetime_ms`: KIP-368's session lifetime from `connections.max.reauth.ms` and a credential's
  expiry (SaslServerAuthenticator.ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs).

It must never hold a password beyond the call that checks it, put one in a message or a log, or do
I/O: mechanisms are pure state machines fed bytes by the connection layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from kelp.errors import ErrorCode, KelpError

__all__ = [
    "MAX_RECEIVE_SIZE",
    "SaslAuthenticationError",
    "SaslOutcome",
    "SaslServer",
    "SaslServerBase",
    "check_token_size",
    "session_lifetime_ms",
]

MAX_RECEIVE_SIZE = 524288
"""Kafka's `sasl.server.max.receive.size` default: the largest SASL token a broker accepts, in bytes."""


class SaslAuthenticationError(KelpError):
    """A SASL exchange failed. `detail` names what was wrong, for the broker's log (never a secret);
    `public` says whether `detail` may reach the client (Kafka's SaslAuthenticationException) or the
    client gets Kafka's generic message instead (Kafka's SaslException)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    http_status = 401

    def __init__(self, detail: str, *, public: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.public = public

    def client_message(self, mechanism: str, *, reauthenticating: bool = False) -> str:
        """The error message the SaslAuthenticate response carries, as Kafka words it."""
        if self.public:
            return self.detail
        what = "re-authentication" if reauthenticating else "authentication"
        return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


@dataclass(frozen=True)
class SaslOutcome:
    """A completed exchange: who authenticated, and what the connection layer needs afterwards.

    `authorization_id` is the principal name (`User:<authorization_id>`); `credential_expiry_ms` is the
    wall-clock time the credential stops being valid (a JWT's `exp`, a delegation token's expiry) or
    None, for KIP-368 re-authentication; `extensions` are the SASL extensions the mechanism accepted.
    """

    mechanism: str
    authorization_id: str
    credential_expiry_ms: int | None = None
    token_authenticated: bool = False
    extensions: Mapping[str, str] = field(default_factory=dict)


class SaslServer(Protocol):
    """One SASL exchange on one connection (a new object per authentication and re-authentication)."""

    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool: ...

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's token; raises SaslAuthenticationError (or a subclass) on failure,
        after which the exchange is over."""
        ...

    @property
    def outcome(self) -> SaslOutcome:
        """Only once `complete`."""
        ...


class SaslServerBase:
    """A `SaslServer` complete once `evaluate` sets `_outcome`: a subclass names its `MECHANISM` and the
    `ERROR` type it raises, and keeps the exchange's own state."""

    MECHANISM: ClassVar[str]
    ERROR: ClassVar[type[SaslAuthenticationError]] = SaslAuthenticationError

    def __init__(self) -> None:
        self._outcome: SaslOutcome | None = None

    @property
    def mechanism(self) -> str:
        return self.MECHANISM

    @property
    def complete(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> SaslOutcome:
        if self._outcome is None:
            raise self.ERROR("Authentication exchange has not completed")
        return self._outcome


def check_token_size(token: bytes, limit: int, *, error: type[SaslAuthenticationError]) -> None:
    """Refuse a token larger than `limit` bytes with the mechanism's own error type."""
    if len(token) > limit:
        raise error(f"SASL token of {len(token)} bytes exceeds the limit of {limit} bytes")


def session_lifetime_ms(*, credential_expiry_ms: int | None, max_reauth_ms: int | None, now_ms: int) -> int:
    """KIP-368: the session lifetime a SaslAuthenticate response announces (0 = no re-authentication).

    `max_reauth_ms` is `connections.max.reauth.ms` for the listener and mechanism (0 or None: unset). With
    neither bound the answer is 0; with both, the smaller; never negative (an already expired credential
    gives 0, and the connection layer then closes the connection at its next request, as Kafka does).
    """
    reauth_set = max_reauth_ms is not None and max_reauth_ms > 0
    if credential_expiry_ms is None and not reauth_set:
        return 0
    if credential_expiry_ms is None:
        assert max_reauth_ms is not None
        return max(0, max_reauth_ms)
    remaining = credential_expiry_ms - now_ms
    if not reauth_set:
        return max(0, remaining)
    assert max_reauth_ms is not None
    return max(0, min(remaining, max_reauth_ms))
