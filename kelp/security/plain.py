"""SASL/PLAIN (RFC 4616) as Kafka serves it, and the broker's PLAIN user table from `sasl.jaas.config`.

Why: PLAIN is the simplest Kafka mechanism and the one a `server.properties` configures inline
(`user_alice="alice-secret"` options of PlainLoginModule), so Kelp must read that table and answer
exactly as Kafka's PlainSaslServer does:

- the message is `authzid NUL authcid NUL passwd`, UTF-8; anything but three fields is "Invalid SASL/PLAIN
  response: expected 3 tokens, got N";
- an empty user or password is refused with Kafka's messages; then the password is checked (in constant
  time, PlainServerCallbackHandler); then an authzid that is not empty must equal the user;
- every PLAIN failure message is sent to the client as it is (Kafka throws SaslAuthenticationException),
  and none says whether the user exists ("Invalid username or password").

Kelp adds size limits Kafka leaves to its 512 KiB frame bound: the message at most `max_message_bytes`
(64 KiB by default; RFC 4616 asks for at least 255 bytes a field, and tokens used as passwords are long),
refused before it is decoded. Fields must be valid UTF-8 (Kafka replaces bad bytes; a password with them
could never match anyway).

This module must never log, repr or keep a password beyond the comparison, and does no I/O.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .jaas import PLAIN_LOGIN_MODULE, JaasConfigError, JaasEntry, parse_jaas_config
from .sasl import SaslAuthenticationError, SaslOutcome, SaslServerBase, check_token_size

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PlainCredentials",
    "PlainError",
    "PlainServer",
    "parse_plain_message",
    "plain_client_message",
    "plain_users",
]

MECHANISM = "PLAIN"
MAX_MESSAGE_BYTES = 65536
"""Kelp's default bound on one SASL/PLAIN message, in bytes."""
JAAS_USER_PREFIX = "user_"
"""PlainServerCallbackHandler's option prefix for broker-side users."""


class PlainError(SaslAuthenticationError):
    """A SASL/PLAIN exchange failed. Only this type leaves this module's parser and server."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, public=True)  # Kafka sends every PLAIN failure message to the client


@dataclass(frozen=True)
class PlainCredentials:
    """One parsed PLAIN message. The password is not in the repr."""

    authorization_id: str
    username: str
    password: str = field(repr=False)


def parse_plain_message(message: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> PlainCredentials:
    """`[authzid] NUL authcid NUL passwd` (PlainSaslServer.extractTokens, then its empty-field checks)."""
    check_token_size(message, max_bytes, error=PlainError)
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
    tokens = text.split("\x00", 3)
    if len(tokens) != 3:
        raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
    authorization_id, username, password = tokens
    if not username:
        raise PlainError("Authentication failed: username not specified")
    if not password:
        raise PlainError("Authentication failed: password not specified")
    return PlainCredentials(authorization_id, username, password)


def plain_client_message(username: str, password: str, authorization_id: str = "") -> bytes:
    """The client's PLAIN message (for tests and Kelp's own tools)."""
    return f"{authorization_id}\x00{username}\x00{password}".encode()


def plain_users(entries: list[JaasEntry] | str) -> dict[str, str]:
    """The broker's PLAIN users: every `user_NAME="password"` option of the PlainLoginModule entries of a
    `sasl.jaas.config` value (or its parsed entries), as Kafka's PlainServerCallbackHandler reads them."""
    parsed = parse_jaas_config(entries) if isinstance(entries, str) else entries
    plain = [e for e in parsed if e.login_module == PLAIN_LOGIN_MODULE]
    if not plain:
        raise JaasConfigError(f"no {PLAIN_LOGIN_MODULE} entry in the JAAS config for SASL/PLAIN")
    users: dict[str, str] = {}
    for entry in plain:
        for key, value in entry.options.items():
            if key.startswith(JAAS_USER_PREFIX) and len(key) > len(JAAS_USER_PREFIX):
                users.setdefault(key[len(JAAS_USER_PREFIX):], value)  # Kafka takes the first entry's option
    return users


class PlainServer(SaslServerBase):
    """The broker side of one SASL/PLAIN exchange: one message, then complete or failed.

    `users` is the user table (name -> password, e.g. `plain_users(...)`), or a function
    `(username, password) -> bool` for another source of truth.
    """

    MECHANISM = MECHANISM
    ERROR = PlainError

    def __init__(self, users: Mapping[str, str] | Callable[[str, str], bool], *,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        super().__init__()
        self._users = users
        self._max_message_bytes = max_message_bytes
        self._done = False

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise PlainError("Unexpected SASL/PLAIN message: the exchange is over")
        self._done = True
        credentials = parse_plain_message(token, max_bytes=self._max_message_bytes)
        if not self._authenticate(credentials.username, credentials.password):
            raise PlainError("Authentication failed: Invalid username or password")
        if credentials.authorization_id and credentials.authorization_id != credentials.username:
            raise PlainError("Authentication failed: Client requested an authorization id that is different from "
                             "username")
        self._outcome = SaslOutcome(mechanism=MECHANISM, authorization_id=credentials.username)
        return b""

    def _authenticate(self, username: str, password: str) -> bool:
        if callable(self._users):
            try:
                return bool(self._users(username, password))
            except Exception:
                raise PlainError("Authentication failed: credentials for user could not be verified") from None
        expected = self._users.get(username)
        # Compared in constant time, and a missing user costs the same comparison as a wrong password.
        known = expected is not None
        return hmac.compare_digest((expected or "").encode(), password.encode()) and known
