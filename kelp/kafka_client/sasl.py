"""The client side of Kafka's SASL authentication: mechanisms, and the exchange a connection runs after connecting.

Why: the replica fetcher must authenticate to the inter-broker listener, and the Spark source to a SASL
listener, with the mechanisms Kafka clients use — PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802/7677) and
OAUTHBEARER (RFC 7628, with a token the caller has). The blocking and the asyncio connection must do it
identically, so the exchange is written once here, free of I/O: `authentication(credentials, address)` is a
generator that yields each request (SaslHandshake v1, then SaslAuthenticate v1 until the mechanism is done)
and is sent each response; it returns the session lifetime the broker announced (KIP-368, 0: none), after
which the connection re-authenticates before it runs out (`reauthenticate_after_s`). The protocol core
(`protocol.ClientProtocol`) drives it on the replies, for both connections.

A SCRAM client checks what the server may ask of it: its nonce must extend the client's, its iteration count
lie within Kafka's 4096..16384 (a server asking for more wants the client's CPU), and the server's final
signature must verify, so a broker that does not know the password cannot pass for one that does.

The broker's own test client (`kelp.security.scram.ScramClient`) is the same RFC; this one is what
Kelp's clients run (this package may not import the broker). Nothing here logs or keeps a password beyond
the salted password a SCRAM exchange needs until its last message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from .errors import AuthenticationFailed, error_name

__all__ = ["MECHANISMS", "SaslCredentials", "SaslMechanismClient", "mechanism_client", "authentication",
           "reauthenticate_after_s", "HANDSHAKE_VERSION", "AUTHENTICATE_VERSION"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1  # v1 carries the session lifetime (KIP-368); v2 only makes it flexible
SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 16384
_MAX_CHALLENGE = 16384
_SERVER_FIRST = re.compile(r"(?:m=[^,]*,)?r=(?P<nonce>[\x21-\x2B\x2D-\x7E]+),s=(?P<salt>[A-Za-z0-9+/=]+),"
                           r"i=(?P<iterations>\d{1,9})(?:,.*)?")
_SERVER_FINAL = re.compile(r"(?:e=(?P<error>[^,]*)|v=(?P<signature>[A-Za-z0-9+/=]+))(?:,.*)?")


@dataclass(frozen=True)
class SaslCredentials:
    """What a client authenticates with: the mechanism, a user name and password (PLAIN, SCRAM), or a bearer
    token (OAUTHBEARER). Secrets are not in the repr."""

    mechanism: str
    username: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r} is not one Kelp's clients speak "
                             f"({', '.join(MECHANISMS)})")
        if self.mechanism == "OAUTHBEARER" and not self.token:
            raise ValueError("SASL/OAUTHBEARER needs a token")
        if self.mechanism != "OAUTHBEARER" and (not self.username or not self.password):
            raise ValueError(f"SASL/{self.mechanism} needs a user name and a password")


class SaslMechanismClient(Protocol):
    def first_message(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The answer to the server's token, or None when the exchange is complete."""
        ...


class _Plain:
    def __init__(self, username: str, password: str) -> None:
        self._message = f"\x00{username}\x00{password}".encode()

    def first_message(self) -> bytes:
        message, self._message = self._message, b""
        return message

    def evaluate(self, challenge: bytes) -> bytes | None:
        return None


class _OAuthBearer:
    def __init__(self, token: str) -> None:
        self._token = token

    def first_message(self) -> bytes:
        return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        # A non-empty challenge is the server's error (RFC 7628 §3.2.3): acknowledge it, the server then fails.
        return b"\x01" if challenge else None


class _Scram:
    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self._mechanism = mechanism
        self._hash = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        self._password: str | None = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._bare = f"n={name},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._done = False

    def first_message(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if len(challenge) > _MAX_CHALLENGE:
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server's message is {len(challenge)} bytes")
        text = challenge.decode("utf-8", "replace")
        if self._server_signature is None:
            return self._final(text)
        if self._done:
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server sent a message after the exchange ended")
        match = _SERVER_FINAL.fullmatch(text)
        if match is None:
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server's final message is malformed")
        if match.group("error") is not None:
            raise AuthenticationFailed(f"SASL/{self._mechanism} failed: {match.group('error')}")
        if not hmac.compare_digest(base64.b64decode(match.group("signature")), self._server_signature):
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server's signature does not verify (it does not "
                                       "know this user's credential)")
        self._done = True
        return None

    def _final(self, text: str) -> bytes:
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server's first message is malformed")
        nonce, iterations = match.group("nonce"), int(match.group("iterations"))
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server's nonce does not extend the client's")
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server asks for {iterations} iterations, outside "
                                       f"{SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}")
        password, self._password = self._password, None
        if password is None:
            raise AuthenticationFailed(f"SASL/{self._mechanism}: the server sent its first message twice")
        salted = hashlib.pbkdf2_hmac(self._hash, password.encode(), base64.b64decode(match.group("salt")), iterations)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self._hash).digest()
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = hmac.new(stored_key, auth_message, self._hash).digest()
        server_key = hmac.new(salted, b"Server Key", self._hash).digest()
        self._server_signature = hmac.new(server_key, auth_message, self._hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def mechanism_client(credentials: SaslCredentials) -> SaslMechanismClient:
    """A new client of one exchange with `credentials`' mechanism."""
    if credentials.mechanism == "PLAIN":
        return _Plain(credentials.username, credentials.password)
    if credentials.mechanism == "OAUTHBEARER":
        return _OAuthBearer(credentials.token)
    return _Scram(credentials.mechanism, credentials.username, credentials.password)


Exchange = Generator[tuple[ApiMessage, int], ApiMessage, int]
"""Yields (request, version) to send; is sent each response; returns the session lifetime in ms (0: none)."""


def authentication(credentials: SaslCredentials, *, address: str) -> Exchange:
    """The SASL exchange with the broker at `address` (see the module docstring); raises AuthenticationFailed."""
    mechanism = credentials.mechanism
    handshake = yield SaslHandshakeRequest(mechanism=mechanism), HANDSHAKE_VERSION
    if handshake.error_code:
        enabled = ", ".join(handshake.mechanisms or []) or "none"
        raise AuthenticationFailed(f"broker at {address} refused SASL/{mechanism}: {error_name(handshake.error_code)} "
                                   f"(it enables {enabled})", handshake.error_code, address=address)
    client = mechanism_client(credentials)
    token: bytes | None = client.first_message()
    lifetime = 0
    while token is not None:
        answer = yield SaslAuthenticateRequest(auth_bytes=token), AUTHENTICATE_VERSION
        if answer.error_code:
            detail = f": {answer.error_message}" if answer.error_message else ""
            raise AuthenticationFailed(f"broker at {address} refused SASL/{mechanism} authentication as "
                                       f"{credentials.username or 'the token'}{detail}", answer.error_code,
                                       address=address)
        lifetime = int(answer.session_lifetime_ms or 0)
        try:
            token = client.evaluate(bytes(answer.auth_bytes or b""))
        except AuthenticationFailed as exc:
            raise AuthenticationFailed(f"broker at {address}: {exc}", address=address) from None
    return lifetime


def reauthenticate_after_s(lifetime_ms: int) -> float | None:
    """When to re-authenticate a session of `lifetime_ms` (None: never): at 85% of it, as Kafka's clients
    re-authenticate between 85% and 95%."""
    return None if lifetime_ms <= 0 else lifetime_ms * 0.85 / 1000.0
