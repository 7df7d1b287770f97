"""One connection's authentication: who it is, what it may send before it has proved it, and for how long.

Why: Kafka authenticates per connection, in the connection's own request stream (Kafka's
SaslServerAuthenticator). This module is that state machine, kept apart from sockets so every rule is
tested without one:

- A PLAINTEXT or SSL listener needs no SASL: the connection is the ANONYMOUS principal, or, on SSL with a
  client certificate, the principal `ssl.principal.mapping.rules` makes of its subject. SaslHandshake and
  SaslAuthenticate are answered ILLEGAL_SASL_STATE there, as Kafka answers them.
- On a SASL listener, before authentication, only ApiVersions and SaslHandshake are served, then only
  SaslAuthenticate (after SaslHandshake v1) or the raw tokens of the old exchange (after SaslHandshake v0,
  size-prefixed tokens without a request header); any other request closes the connection, as in Kafka.
  Frames are bounded by `sasl.server.max.receive.size` until authentication succeeds.
- A mechanism the listener does not enable gets UNSUPPORTED_SASL_MECHANISM with the enabled ones; a failed
  exchange gets SASL_AUTHENTICATION_FAILED with the message Kafka would send; both are answered after
  `connection.failed.authentication.delay.ms` and close the connection, and the failure is logged once
  with the peer, the listener, the mechanism and the user name tried (never a password or token).
- KIP-368: a successful SaslAuthenticate (v1+) announces the session lifetime (`connections.max.reauth.ms`,
  and a token's expiry); a connection whose session ran out is closed at its next request unless it
  re-authenticated before (SaslHandshake then SaslAuthenticate again, with the same mechanism and the same
  principal, while the old session serves its other requests).

The Kafka server drives it (`server.py`), the SASL handlers answer through it (`handlers/sasl.py`). It must
never log or keep a token beyond the call that hands it to a mechanism.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.errors import ErrorCode
from kelp.security.principal import ANONYMOUS, KafkaPrincipal
from kelp.security.sasl import SaslAuthenticationError, SaslServer, session_lifetime_ms

from .listener_security import ListenerSecurity

__all__ = ["Session", "SaslAnswer", "API_VERSIONS", "SASL_HANDSHAKE", "SASL_AUTHENTICATE"]

log = logging.getLogger("kelp.broker.kafka.auth")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
# Kafka's frames are at least a request header; a raw SASL token (SaslHandshake v0) may be shorter.
MIN_REQUEST_BYTES = 8
# Distinct principals whose first authentication on a listener is logged at INFO (later ones at DEBUG).
_LOGGED_PRINCIPALS_MAX = 1000
_SCRAM_USER = re.compile(rb"^n,(?:a=[^,]*)?,n=([^,]{1,256}),")


class State(enum.Enum):
    HANDSHAKE = "waiting for SaslHandshake"  # ApiVersions and SaslHandshake only
    AUTHENTICATE = "waiting for SaslAuthenticate"
    RAW = "waiting for raw SASL tokens"  # after SaslHandshake v0
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True)
class SaslAnswer:
    """What a SASL request is answered with: an error code and message (or 0 and None), the mechanism's token,
    the KIP-368 session lifetime, and whether the connection closes after it (a failure, answered after the
    failed-authentication delay)."""

    error_code: int = ErrorCode.NONE
    message: str | None = None
    token: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False
    delay_s: float = 0.0


class Session:
    """The authentication state of one connection on listener `security` (see the module docstring)."""

    def __init__(self, security: ListenerSecurity, peer: str, *, principal: KafkaPrincipal = ANONYMOUS,
                 clock_ms: WallClockMs = wall_clock_ms) -> None:
        self.security = security
        self.listener = security.name
        self.peer = peer
        self.principal = principal
        self._clock_ms = clock_ms
        self.state = State.HANDSHAKE if security.uses_sasl else State.AUTHENTICATED
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        self._reauthenticating = False
        self._attempted: str | None = None  # the user name the exchange's first message named, for the log
        self._expires_ms: int | None = None
        self.closing = False  # the connection closes after the answers already queued
        if not security.uses_sasl:
            self._remember(principal)

    # -- frames ---------------------------------------------------------------------------------------
    @property
    def max_frame_bytes(self) -> int:
        """`sasl.server.max.receive.size` until authenticated, then `socket.request.max.bytes`."""
        if self.state is State.AUTHENTICATED:
            return self.security.max_request_bytes
        return self.security.max_receive_size

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    @property
    def min_frame_bytes(self) -> int:
        return 0 if self.state is State.RAW else MIN_REQUEST_BYTES

    @property
    def raw_tokens(self) -> bool:
        """The next frame is a raw SASL token (SaslHandshake v0), not a request."""
        return self.state is State.RAW

    # -- the gate ---------------------------------------------------------------------------------------
    def refusal(self, api_key: int, api_name: str) -> str | None:
        """Why a request with `api_key` closes the connection instead of being served, or None."""
        if self.state is State.FAILED:
            return "its authentication failed"
        if self.state is State.AUTHENTICATED:
            if self._expires_ms is not None and self._clock_ms() >= self._expires_ms:
                return (f"its session of {self.principal} expired (connections.max.reauth.ms or the credential's "
                        "lifetime) and it did not re-authenticate")
            return None
        if self.state is State.HANDSHAKE and api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return None
        if self.state is State.AUTHENTICATE and api_key == SASL_AUTHENTICATE:
            return None
        return f"it sent {api_name} (API key {api_key}) {self.state.value}, before SASL authentication completed"

    # -- SaslHandshake ----------------------------------------------------------------------------------------
    def handshake(self, version: int, mechanism: str) -> SaslAnswer:
        """A SaslHandshake: the error code and, in `message`, nothing; the enabled mechanisms are `security`'s."""
        if not self.security.uses_sasl:
            return SaslAnswer(ErrorCode.ILLEGAL_SASL_STATE, f"listener {self.listener} does not use SASL")
        if self.state is State.AUTHENTICATED:  # KIP-368: a re-authentication begins
            if mechanism != self.mechanism:
                return self._fail(f"re-authentication with {mechanism} after {self.mechanism}",
                                  ErrorCode.ILLEGAL_SASL_STATE, mechanism=mechanism)
            self._reauthenticating = True
            self._attempted = None
            self._server = self.security.server_for(mechanism)
            return SaslAnswer()
        if mechanism not in self.security.mechanisms:
            return self._fail(f"unsupported mechanism {mechanism[:64]!r} (enabled: "
                              f"{', '.join(self.security.mechanisms)})", ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              mechanism=mechanism[:64])
        self.mechanism = mechanism
        self._server = self.security.server_for(mechanism)
        self.state = State.RAW if version == 0 else State.AUTHENTICATE
        return SaslAnswer()

    # -- SaslAuthenticate (and raw tokens) ------------------------------------------------------------------
    def authenticate(self, token: bytes, *, version: int) -> SaslAnswer:
        """One SaslAuthenticate: the mechanism's answer, a failure, or the completed session."""
        server = self._server
        reauth = self._reauthenticating
        if not self.security.uses_sasl or server is None:
            return SaslAnswer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful "
                                                            "authentication" if self.state is State.AUTHENTICATED
                              else "SaslAuthenticate without a SaslHandshake first")
        attempted = self._attempted = self._attempted_user(token) or self._attempted
        try:
            answer = server.evaluate(token)
            if not server.complete:
                return SaslAnswer(token=answer)
            outcome = server.outcome
        except SaslAuthenticationError as exc:
            return self._fail(exc.detail, ErrorCode.SASL_AUTHENTICATION_FAILED, user=attempted,
                              message=exc.client_message(server.mechanism, reauthenticating=reauth))
        principal = KafkaPrincipal("User", outcome.authorization_id, token_authenticated=outcome.token_authenticated)
        if reauth and principal != self.principal:
            return self._fail(f"re-authentication as {principal} on a connection of {self.principal}",
                              ErrorCode.SASL_AUTHENTICATION_FAILED, user=outcome.authorization_id,
                              message=f"Cannot change principals during re-authentication from {self.principal}: "
                                      f"{principal}")
        now = self._clock_ms()
        lifetime = session_lifetime_ms(credential_expiry_ms=outcome.credential_expiry_ms,
                                       max_reauth_ms=self.security.max_reauth_ms(outcome.mechanism) or None,
                                       now_ms=now)
        bounded = outcome.credential_expiry_ms is not None or self.security.max_reauth_ms(outcome.mechanism) > 0
        self._expires_ms = now + lifetime if bounded else None
        self.principal = principal
        self.state = State.AUTHENTICATED
        self._server = None
        self._reauthenticating = False
        self._remember(principal)
        return SaslAnswer(token=answer, session_lifetime_ms=lifetime if version >= 1 else 0)

    def raw_token(self, token: bytes) -> SaslAnswer:
        """One token of the exchange after SaslHandshake v0 (answered raw; a failure closes without an answer)."""
        return self.authenticate(token, version=0)

    # -- helpers --------------------------------------------------------------------------------------------
    def _fail(self, detail: str, code: int, *, mechanism: str | None = None, user: str | None = None,
              message: str | None = None) -> SaslAnswer:
        self.state = State.FAILED
        self._server = None
        self.closing = True
        who = f"User:{user}" if user else str(self.principal)
        log.warning("authentication failed on listener %s from %s (principal %s, mechanism %s): %s",
                    self.listener, self.peer, who, mechanism or self.mechanism or "-", detail)
        return SaslAnswer(code, message if message is not None else detail, close=True,
                          delay_s=self.security.failed_delay_s)

    def _attempted_user(self, token: bytes) -> str | None:
        """The user name a PLAIN or SCRAM first message names, for the failure log (never its password)."""
        if self.mechanism == "PLAIN":
            fields = token.split(b"\x00")
            return fields[1].decode("utf-8", "replace")[:256] if len(fields) == 3 else None
        if self.mechanism is not None and self.mechanism.startswith("SCRAM-"):
            match = _SCRAM_USER.match(token)
            return match.group(1).decode("utf-8", "replace") if match else None
        return None

    def _remember(self, principal: KafkaPrincipal) -> None:
        """Log the first connection of each principal (and mechanism) on each listener at INFO (bounded), later ones
        at DEBUG."""
        seen = self.security.seen_principals
        how = f" (SASL/{self.mechanism})" if self.mechanism else ""
        level = logging.DEBUG
        if f"{principal}{how}" not in seen and len(seen) < _LOGGED_PRINCIPALS_MAX:
            seen.add(f"{principal}{how}")
            level = logging.INFO
        log.log(level, "listener %s: connection from %s authenticated as %s%s", self.listener, self.peer, principal,
                how)
