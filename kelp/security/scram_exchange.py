"""The SCRAM exchange (RFC 5802, RFC 7677) as Kafka runs it: `ScramServer` for the broker, `ScramClient`.

Why: the exchange is what an unauthenticated peer reaches, so it is kept apart from the credentials it
checks (`scram`). `ScramServer` follows ScramSaslServer and ScramMessages: the client-first message must
match Kafka's pattern (gs2 header `n,` only, so `y` and `p=` channel binding are refused; optional `a=`
authzid equal to the user; extensions `,key=value`, of which `tokenauth=true` selects a delegation token);
the server-first carries the client nonce plus the server's; the client-final must carry exactly that
nonce and a proof checked in constant time; the server-final is `v=<ServerSignature>`. After completion or
a failure the exchange accepts nothing more, so a replayed final message is refused, and a new exchange
has a new server nonce, so a final message from an old one never verifies.

Where Kelp is stricter than Kafka (each follows RFC 5802, and no Kafka client is affected): the channel
binding `c=` must be the base64 of the gs2 header the client sent (Kafka does not check it); the final
nonce must equal the combined nonce (Kafka checks only that it ends with it); `m=` is refused (RFC 5802
§5.1: its presence MUST fail authentication; Kafka skips it); the auth message uses the
client-first-message-bare exactly as sent (Kafka rebuilds it from a map of extensions); and an unknown user
gets a server-first with a salt derived from the name (RFC 5802 §5.1's "mock" exchange) and fails at the
final step like a wrong password, so neither the answer nor the step reveals whether the user exists
(Kafka fails the first step with the same generic message).

This module must never keep or log a password, a salted password or a proof, and does no I/O.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .sasl import MAX_RECEIVE_SIZE, SaslOutcome, check_token_size
from .scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MAX_MESSAGE_BYTES,
    MIN_ITERATIONS,
    ScramCredential,
    ScramError,
    ScramMechanism,
    base36,
    derive_client_key,
    derive_server_key,
    derive_stored_key,
    hmac_digest,
    salted_password,
    xor_bytes,
)

__all__ = ["DelegationTokenCredential", "ScramClient", "ScramServer"]

# --- messages (ScramMessages) -----------------------------------------------------------------------------

# Kafka's building blocks; Java's `[\x01-\x7F&&[^=,]]` intersections written out.
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_BASE64_CHAR = r"[a-zA-Z0-9/+]"
_BASE64 = rf"(?:{_BASE64_CHAR}{{4}})*(?:{_BASE64_CHAR}{{3}}=|{_BASE64_CHAR}{{2}}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?P<reserved>m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})),"
    rf"p=(?P<proof>{_BASE64})")
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}")
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[\x01-\x2B\x2D-\x3C\x3E-\x7F]+)|v=(?P<signature>{_BASE64})){_EXTENSIONS}")


def _decode(message: bytes, what: str) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"Invalid SCRAM {what} message: not UTF-8") from None


def _username(saslname: str) -> str:
    """ScramFormatter.username: `=2C` is a comma, `=3D` an equals sign, any other `=` is invalid."""
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ScramError("Invalid username in the SCRAM client first message")
    return name.replace("=3D", "=")


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _extensions(text: str) -> dict[str, str]:
    # Utils.parseMap(text, "=", ","): later keys win, as in Kafka's HashMap.
    out: dict[str, str] = {}
    if text:
        for item in text[1:].split(","):
            key, value = item.split("=", 1)
            out[key] = value
    return out


TOKEN_AUTH_EXTENSION = "tokenauth"
"""ScramLoginModule.TOKEN_AUTH_CONFIG: `tokenauth=true` authenticates with a delegation token."""


@dataclass(frozen=True)
class DelegationTokenCredential:
    """What a delegation-token lookup gives: the owner the token authenticates as, its SCRAM credential (the
    token's HMAC as password) and its expiry, for KIP-368."""

    owner: str
    credential: ScramCredential
    expiry_ms: int


class _State(enum.Enum):
    CLIENT_FIRST = "RECEIVE_CLIENT_FIRST_MESSAGE"
    CLIENT_FINAL = "RECEIVE_CLIENT_FINAL_MESSAGE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class ScramServer:
    """The broker side of one SCRAM exchange (a new object per authentication).

    `lookup(username)` returns the user's credential for this mechanism, or None; `token_lookup(token_id)`
    serves `tokenauth=true` (None: delegation tokens are not served, and such a client fails like a wrong
    password). `mock_secret` keys the salts shown for unknown users (one per broker, so a probe sees the same
    salt each time); `nonce` is for tests only.
    """

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None], *,
                 token_lookup: Callable[[str], DelegationTokenCredential | None] | None = None,
                 mock_secret: bytes | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 nonce: str | None = None) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._mock_secret = mock_secret if mock_secret is not None else secrets.token_bytes(32)
        self._max_message_bytes = min(max_message_bytes, MAX_RECEIVE_SIZE)
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._state = _State.CLIENT_FIRST
        self._credential: ScramCredential | None = None
        self._known = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._outcome: SaslOutcome | None = None
        self._authorization_id = ""
        self._token_expiry_ms: int | None = None
        self._extensions: dict[str, str] = {}

    @property
    def mechanism(self) -> str:
        return self._mechanism.mechanism_name

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def outcome(self) -> SaslOutcome:
        if self._outcome is None:
            raise ScramError("Authentication exchange has not completed")
        return self._outcome

    def evaluate(self, token: bytes) -> bytes:
        try:
            check_token_size(token, self._max_message_bytes, error=ScramError)
            if self._state is _State.CLIENT_FIRST:
                answer = self._client_first(token)
                self._state = _State.CLIENT_FINAL
                return answer
            if self._state is _State.CLIENT_FINAL:
                answer = self._client_final(token)
                self._state = _State.COMPLETE
                return answer
            raise ScramError(f"Unexpected SCRAM message in state {self._state.value}")
        except ScramError:
            self._fail()
            raise
        except Exception as exc:  # a bug must not leave the exchange usable, nor escape as another type
            self._fail()
            raise ScramError(f"SCRAM exchange failed: {type(exc).__name__}") from exc

    def _fail(self) -> None:
        self._state = _State.FAILED
        self._credential = None

    def _client_first(self, token: bytes) -> bytes:
        message = _decode(token, "client first")
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            raise ScramError("Invalid SCRAM client first message format")
        if match.group("reserved"):
            raise ScramError("Invalid SCRAM client first message: the reserved m= attribute is set")
        username = _username(match.group("saslname"))
        authzid = match.group("authzid")
        if authzid is not None and _username(authzid) != username:
            raise ScramError("Authentication failed: Client requested an authorization id that is different from "
                             "username", public=True)
        self._extensions = _extensions(match.group("extensions"))
        credential: ScramCredential | None
        if self._extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true":
            token_credential = self._token_lookup(username) if self._token_lookup is not None else None
            credential = token_credential.credential if token_credential is not None else None
            if token_credential is not None:
                self._authorization_id = token_credential.owner
                self._token_expiry_ms = token_credential.expiry_ms
        else:
            credential = self._lookup(username)
            self._authorization_id = username
        if credential is not None and credential.mechanism is not self._mechanism:
            credential = None
        if credential is not None and credential.iterations < MIN_ITERATIONS:
            raise ScramError(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                             f"for {self.mechanism}")
        self._known = credential is not None
        self._credential = credential if credential is not None else self._mock_credential(username)
        self._gs2_header = match.group("gs2")
        self._client_first_bare = match.group("bare")
        self._nonce = match.group("nonce") + self._server_nonce
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first.encode("ascii")

    def _mock_credential(self, username: str) -> ScramCredential:
        """RFC 5802 §5.1: answer an unknown user as if it existed. The salt is derived from the name, so it is
        the same on every attempt; the keys are random, so no proof verifies."""
        digest = hmac.new(self._mock_secret, f"{self.mechanism}\0{username}".encode(), "sha256").digest()
        salt = base36(int.from_bytes(digest[:17], "big") >> 6).encode("ascii")
        size = hashlib.new(self._mechanism.hash_name).digest_size
        return ScramCredential(self._mechanism, salt, secrets.token_bytes(size), secrets.token_bytes(size),
                               DEFAULT_ITERATIONS)

    def _client_final(self, token: bytes) -> bytes:
        message = _decode(token, "client final")
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None:
            raise ScramError("Invalid SCRAM client final message format")
        if not hmac.compare_digest(match.group("nonce").encode(), self._nonce.encode()):
            raise ScramError("Invalid client nonce in the final client message.")
        expected_channel = base64.b64encode(self._gs2_header.encode()).decode("ascii")
        if match.group("channel") != expected_channel:
            raise ScramError("Invalid channel binding in the final client message (only gs2 header 'n' is served)")
        credential = self._credential
        assert credential is not None
        hash_name = self._mechanism.hash_name
        proof = base64.b64decode(match.group("proof"))
        auth_message = f"{self._client_first_bare},{self._server_first},{match.group('without_proof')}".encode()
        client_signature = hmac_digest(hash_name, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("Invalid client credentials")
        computed_stored_key = derive_stored_key(hash_name, xor_bytes(client_signature, proof))
        if not hmac.compare_digest(computed_stored_key, credential.stored_key) or not self._known:
            raise ScramError("Invalid client credentials")
        server_signature = hmac_digest(hash_name, credential.server_key, auth_message)
        self._credential = None
        self._outcome = SaslOutcome(
            mechanism=self.mechanism, authorization_id=self._authorization_id,
            credential_expiry_ms=self._token_expiry_ms, token_authenticated=self._token_expiry_ms is not None,
            extensions={k: v for k, v in self._extensions.items() if k == TOKEN_AUTH_EXTENSION})
        return ("v=" + base64.b64encode(server_signature).decode("ascii")).encode("ascii")


class ScramClient:
    """The client side of one SCRAM exchange, for tests and Kelp's own tools.

    `first_message()`, then `final_message(server_first)`, then `verify_server_final(server_final)`.
    The password is turned into the salted password when the server's salt arrives and dropped.
    """

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None,
                 extensions: Mapping[str, str] | None = None) -> None:
        self._mechanism = mechanism
        self._username = username
        self._password: str | None = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._extensions = dict(extensions or {})
        self._bare = ""
        self._server_signature = b""

    def first_message(self) -> bytes:
        extensions = "".join(f",{k}={v}" for k, v in self._extensions.items())
        self._bare = f"n={_saslname(self._username)},r={self._nonce}{extensions}"
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        check_token_size(server_first, MAX_MESSAGE_BYTES, error=ScramError)
        text = _decode(server_first, "server first")
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise ScramError("Invalid SCRAM server first message format")
        nonce = match.group("nonce")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("Invalid server nonce: does not start with client nonce")
        iterations = int(match.group("iterations"))
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"Requested iterations {iterations} is less than the minimum {MIN_ITERATIONS} for "
                             f"{self._mechanism.mechanism_name}")
        if iterations > MAX_ITERATIONS:  # no Kafka broker stores more; a server asking for more wants our CPU
            raise ScramError(f"Requested iterations {iterations} is more than the maximum {MAX_ITERATIONS} for "
                             f"{self._mechanism.mechanism_name}")
        if self._password is None:
            raise ScramError("final_message already called")
        hash_name = self._mechanism.hash_name
        salted = salted_password(self._password, base64.b64decode(match.group("salt")), iterations, self._mechanism)
        self._password = None
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = derive_client_key(hash_name, salted)
        client_signature = hmac_digest(hash_name, derive_stored_key(hash_name, client_key), auth_message)
        self._server_signature = hmac_digest(hash_name, derive_server_key(hash_name, salted), auth_message)
        proof = base64.b64encode(xor_bytes(client_key, client_signature)).decode()
        return f"{without_proof},p={proof}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        check_token_size(server_final, MAX_MESSAGE_BYTES, error=ScramError)
        text = _decode(server_final, "server final")
        match = _SERVER_FINAL.fullmatch(text)
        if match is None:
            raise ScramError("Invalid SCRAM server final message format")
        if match.group("error") is not None:
            raise ScramError(f"Sasl authentication using {self._mechanism.mechanism_name} failed with error: "
                             f"{match.group('error')}", public=True)
        if not hmac.compare_digest(base64.b64decode(match.group("signature")), self._server_signature):
            raise ScramError("Invalid server signature in server final message")
