"""HTTP Basic checked against the broker's SASL users: the same user names and passwords as the Kafka listeners.

Why: an HTTP client (the operator, a script, another broker's control-plane calls, which carry the inter-broker
SASL credentials: `cluster.state.inter_broker`) proves who it is with the credentials it uses on Kafka. PLAIN users
are the listeners' JAAS users (`user_NAME="password"`); SCRAM users are the credentials of the metadata log
(salt, StoredKey, iterations — never a password): the password is salted with the credential's salt and
iterations and its StoredKey compared, as a SCRAM exchange would prove it. The principal is `User:<name>`, as
after SASL on a Kafka listener.

Salting costs a few milliseconds (PBKDF2, 4096+ iterations), so it never runs on the event loop: it runs on
the bounded CPU pool (`cpu_work`), one salting at a time (`HASHING_AT_ONCE`), so a flood of wrong passwords
costs the broker at most one core and queues, and each address may have `PER_ADDRESS_AT_ONCE` checks under
way (issue 33, item 7). A user's verified password is remembered — as an HMAC under a key of this process,
never the password — for as long as its credential is the one it was verified against (a changed or deleted
credential is checked again), so a valid client pays the salting once and then skips the queue. A failure
costs what a success against a SCRAM credential costs: an unknown user, or a PLAIN user's wrong password, is
salted too (a process-random salt, the iterations of a credential the broker holds), so timing tells no one
which user names exist; the failure is answered after `connection.failed.authentication.delay.ms`
(`HttpAuthenticator`), as a Kafka listener answers one.

This module must never log or keep a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Mapping

from kelp.security.principal import KafkaPrincipal
from kelp.security.scram import ScramCredential, ScramMechanism, derive_client_key, derive_stored_key, salted_password

from ...cpu_work import run_cpu

__all__ = ["SaslUsersCheck", "ScramCredentials"]

ScramCredentials = Callable[[], Mapping[tuple[str, str], ScramCredential]]
"""The SCRAM credentials now, (user, mechanism name) -> credential (the metadata image's table)."""

REMEMBERED = 1024  # verified (user, mechanism, password HMAC) kept
HASHING_AT_ONCE = 1  # PBKDF2 runs at once, broker-wide (each on the CPU pool)
PER_ADDRESS_AT_ONCE = 2  # checks under way from one client address; more wait
DEFAULT_ITERATIONS = 4096  # Kafka's SCRAM default, for the salting of a failure when the broker has no credential


def _scram_matches(credential: ScramCredential, password: str) -> bool:
    hash_name = credential.mechanism.hash_name
    salted = salted_password(password, credential.salt, credential.iterations, credential.mechanism)
    stored = derive_stored_key(hash_name, derive_client_key(hash_name, salted))
    return hmac.compare_digest(stored, credential.stored_key)


class SaslUsersCheck:
    """`await check(user, password, address)` -> `User:<user>` when they match a PLAIN or SCRAM user, else None."""

    def __init__(self, *, plain: Mapping[str, str], scram: ScramCredentials) -> None:
        self._plain = dict(plain)
        self._scram = scram
        self._key = secrets.token_bytes(32)
        self._decoy_salt = secrets.token_bytes(32)
        self._verified: dict[tuple[str, str, bytes], bytes] = {}  # -> the StoredKey it was verified against
        self._hashing: asyncio.Semaphore | None = None
        self._per_address: dict[str, asyncio.Semaphore] = {}
        self._per_address_users: dict[str, int] = {}

    @classmethod
    def of(cls, plain_tables: Iterable[Mapping[str, str]], scram: ScramCredentials) -> SaslUsersCheck:
        """The PLAIN users of every listener (the first one naming a user wins) and the SCRAM credentials."""
        plain: dict[str, str] = {}
        for table in plain_tables:
            for user, password in table.items():
                plain.setdefault(user, password)
        return cls(plain=plain, scram=scram)

    async def __call__(self, user: str, password: str, address: str = "") -> KafkaPrincipal | None:
        expected = self._plain.get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return KafkaPrincipal.user(user)
        table = self._scram()
        credentials = [(m, c) for m in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256)
                       if (c := table.get((user, m.mechanism_name))) is not None]
        digest = hmac.new(self._key, password.encode(), hashlib.sha256).digest()
        for mechanism, credential in credentials:
            if self._verified.get((user, mechanism.mechanism_name, digest)) == credential.stored_key:
                return KafkaPrincipal.user(user)
        async with self._address_slot(address):
            for mechanism, credential in credentials:
                if await self._salted(_scram_matches, credential, password):
                    if len(self._verified) >= REMEMBERED:
                        self._verified.clear()
                    self._verified[(user, mechanism.mechanism_name, digest)] = credential.stored_key
                    return KafkaPrincipal.user(user)
            if not credentials:  # an unknown user, or a PLAIN user's wrong password: as costly as a SCRAM one
                await self._salted(self._decoy, password, self._decoy_iterations(table))
        return None

    def _decoy(self, password: str, iterations: int) -> bool:
        salted_password(password, self._decoy_salt, iterations, ScramMechanism.SCRAM_SHA_512)
        return False

    @staticmethod
    def _decoy_iterations(table: Mapping[tuple[str, str], ScramCredential]) -> int:
        for credential in table.values():
            return credential.iterations
        return DEFAULT_ITERATIONS

    async def _salted(self, fn: Callable[..., bool], *args: object) -> bool:
        if self._hashing is None:
            self._hashing = asyncio.Semaphore(HASHING_AT_ONCE)
        async with self._hashing:
            return await run_cpu(fn, *args)

    @contextlib.asynccontextmanager
    async def _address_slot(self, address: str) -> AsyncIterator[None]:
        """At most PER_ADDRESS_AT_ONCE checks from `address` under way; the table holds only addresses in use."""
        slot = self._per_address.get(address)
        if slot is None:
            slot = self._per_address[address] = asyncio.Semaphore(PER_ADDRESS_AT_ONCE)
        self._per_address_users[address] = self._per_address_users.get(address, 0) + 1
        try:
            async with slot:
                yield
        finally:
            left = self._per_address_users[address] - 1
            if left:
                self._per_address_users[address] = left
            else:
                del self._per_address_users[address], self._per_address[address]
