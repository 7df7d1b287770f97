"""HTTP Basic checked against the broker's SASL users: the same user names and passwords as the Kafka listeners.

Why: an HTTP client (the operator, a script, another broker's control-plane calls, which carry the inter-broker
SASL credentials: `cluster.inter_broker`) proves who it is with the credentials it uses on Kafka. PLAIN users
are the listeners' JAAS users (`user_NAME="password"`); SCRAM users are the credentials of the metadata log
(salt, StoredKey, iterations — never a password): the password is salted with the credential's salt and
iterations and its StoredKey compared, as a SCRAM exchange would prove it. The principal is `User:<name>`, as
after SASL on a Kafka listener.

Salting costs a few milliseconds (PBKDF2, 4096+ iterations), so it runs in a worker thread, and a user's
verified password is remembered — as an HMAC under a key of this process, never the password — for as long
as its credential is the one it was verified against (a changed or deleted credential is checked again).

This module must never log or keep a password.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable, Mapping

from ..security.principal import KafkaPrincipal
from ..security.scram import ScramCredential, ScramMechanism, derive_client_key, derive_stored_key, salted_password

__all__ = ["SaslUsersCheck", "ScramCredentials"]

ScramCredentials = Callable[[], Mapping[tuple[str, str], ScramCredential]]
"""The SCRAM credentials now, (user, mechanism name) -> credential (the metadata image's table)."""

REMEMBERED = 1024  # verified (user, mechanism, password HMAC) kept


def _scram_matches(credential: ScramCredential, password: str) -> bool:
    hash_name = credential.mechanism.hash_name
    salted = salted_password(password, credential.salt, credential.iterations, credential.mechanism)
    stored = derive_stored_key(hash_name, derive_client_key(hash_name, salted))
    return hmac.compare_digest(stored, credential.stored_key)


class SaslUsersCheck:
    """`await check(user, password)` -> `User:<user>` when they match a PLAIN or SCRAM user, else None."""

    def __init__(self, *, plain: Mapping[str, str], scram: ScramCredentials) -> None:
        self._plain = dict(plain)
        self._scram = scram
        self._key = secrets.token_bytes(32)
        self._verified: dict[tuple[str, str, bytes], bytes] = {}  # -> the StoredKey it was verified against

    @classmethod
    def of(cls, plain_tables: Iterable[Mapping[str, str]], scram: ScramCredentials) -> SaslUsersCheck:
        """The PLAIN users of every listener (the first one naming a user wins) and the SCRAM credentials."""
        plain: dict[str, str] = {}
        for table in plain_tables:
            for user, password in table.items():
                plain.setdefault(user, password)
        return cls(plain=plain, scram=scram)

    async def __call__(self, user: str, password: str) -> KafkaPrincipal | None:
        expected = self._plain.get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return KafkaPrincipal.user(user)
        table = self._scram()
        for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
            credential = table.get((user, mechanism.mechanism_name))
            if credential is None:
                continue
            key = (user, mechanism.mechanism_name, hmac.new(self._key, password.encode(), hashlib.sha256).digest())
            if self._verified.get(key) == credential.stored_key:
                return KafkaPrincipal.user(user)
            if await asyncio.to_thread(_scram_matches, credential, password):
                if len(self._verified) >= REMEMBERED:
                    self._verified.clear()
                self._verified[key] = credential.stored_key
                return KafkaPrincipal.user(user)
        return None
