"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka does them: credentials, the server exchange, a client.

Why: SCRAM is how Kafka users authenticate without a password ever resting on the broker. Kelp keeps
Kafka's choices so its clients, `kafka-configs` and `kafka-storage format --add-scram` work unchanged:

- `ScramCredential` holds salt, StoredKey, ServerKey and iterations, never the password nor the salted
  password (Kafka's ScramCredential); `make_credential` derives one (ScramFormatter.generateCredential,
  with Kafka's salt shape: a base-36 string of 130 random bits); `credential_from_salted_password` is what
  AlterUserScramCredentials carries (the client salts, the controller derives the keys:
  ScramControlManager.finishUpsertion). Iterations 4096..16384 (ScramMechanism's minimum,
  ScramControlManager.MAX_ITERATIONS) with Kafka's UNACCEPTABLE_CREDENTIAL messages.
- Forms: `to_record`/`from_record` for the metadata store (base64 fields), `to_kafka_string` (Kafka's
  ScramCredentialUtils `salt=...,stored_key=...,server_key=...,iterations=N`), `ScramCredentialInfo` and
  `describe_text` as DescribeUserScramCredentials and `kafka-configs --describe` report them
  (`SCRAM-SHA-512=iterations=8192`), `parse_add_scram` for `SCRAM-SHA-512=[name=alice,password=...]` and
  `[name=...,iterations=...,salt="...",saltedpassword="..."]` (Kafka's ScramParser), and
  `parse_config_credential` for `kafka-configs --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'`.
- `ScramServer` follows ScramSaslServer and ScramMessages: the client-first message must match Kafka's
  pattern (gs2 header `n,` only, so `y` and `p=` channel binding are refused; optional `a=` authzid equal
  to the user; extensions `,key=value`, of which `tokenauth=true` selects a delegation token); the
  server-first carries the client nonce plus the server's; the client-final must carry exactly that nonce
  and a proof checked in constant time; the server-final is `v=<ServerSignature>`. After completion or a
  failure the exchange accepts nothing more, so a replayed final message is refused, and a new exchange
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
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kelp.errors import ErrorCode

from .sasl import MAX_RECEIVE_SIZE, SaslAuthenticationError, SaslOutcome, check_token_size

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "DelegationTokenCredential",
    "ScramClient",
    "ScramCredential",
    "ScramCredentialInfo",
    "ScramError",
    "ScramMechanism",
    "ScramServer",
    "ScramUpsertion",
    "UnacceptableCredentialError",
    "credential_from_salted_password",
    "make_credential",
    "parse_add_scram",
    "parse_config_credential",
    "salted_password",
    "validate_iterations",
]

MIN_ITERATIONS = 4096
"""ScramMechanism.minIterations for both mechanisms."""
MAX_ITERATIONS = 16384
"""ScramControlManager.MAX_ITERATIONS (and ScramMechanism.maxIterations)."""
DEFAULT_ITERATIONS = 4096
"""kafka-configs' and kafka-storage's default."""
MAX_MESSAGE_BYTES = 16384
"""Kelp's bound on one SCRAM message: names and nonces are short; Kafka's frame bound is far larger."""


class ScramError(SaslAuthenticationError):
    """A SCRAM exchange failed (bad message, nonce, proof or state). Only this type leaves ScramServer."""


class UnacceptableCredentialError(ScramError):
    """A credential Kafka refuses to store (iterations out of range, empty user name)."""

    code = ErrorCode.UNACCEPTABLE_CREDENTIAL
    http_status = 400


@enum.unique
class ScramMechanism(enum.Enum):
    """Kafka's SCRAM mechanisms; `type_code` is the int8 of DescribeUserScramCredentials and the records."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", 1, "sha256")
    SCRAM_SHA_512 = ("SCRAM-SHA-512", 2, "sha512")

    def __init__(self, mechanism_name: str, type_code: int, hash_name: str) -> None:
        self.mechanism_name = mechanism_name
        self.type_code = type_code
        self.hash_name = hash_name

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        for mechanism in cls:
            if mechanism.mechanism_name == name:
                return mechanism
        raise ScramError(f"Unknown SCRAM mechanism {name!r}; Kafka's are SCRAM-SHA-256 and SCRAM-SHA-512")

    @classmethod
    def from_type(cls, code: int) -> ScramMechanism:
        for mechanism in cls:
            if mechanism.type_code == code:
                return mechanism
        raise ScramError(f"Unknown SCRAM mechanism type {code}")


# --- the computations (ScramFormatter), parameterised by hash so RFC 5802's SHA-1 vectors test them -------

def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def _hi(hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    # RFC 5802's Hi() is PBKDF2 with HMAC and dkLen = the hash length.
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def _client_key(hash_name: str, salted: bytes) -> bytes:
    return _hmac(hash_name, salted, b"Client Key")


def _server_key(hash_name: str, salted: bytes) -> bytes:
    return _hmac(hash_name, salted, b"Server Key")


def _stored_key(hash_name: str, client_key: bytes) -> bytes:
    return hashlib.new(hash_name, client_key).digest()


def _xor(first: bytes, second: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(first, second, strict=True))


def salted_password(password: str, salt: bytes, iterations: int, mechanism: ScramMechanism) -> bytes:
    """SaltedPassword = Hi(password, salt, i); Kafka normalises the password as its UTF-8 bytes only."""
    return _hi(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def _kafka_salt() -> bytes:
    """ScramFormatter.secureRandomBytes: `new BigInteger(130, random).toString(36)` as UTF-8."""
    return _base36(secrets.randbits(130)).encode("ascii")


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if number == 0:
        return "0"
    out: list[str] = []
    while number:
        number, rest = divmod(number, 36)
        out.append(digits[rest])
    return "".join(reversed(out))


# --- credentials ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScramCredentialInfo:
    """What DescribeUserScramCredentials reports for one user and mechanism."""

    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True)
class ScramCredential:
    """A stored SCRAM credential: salt, StoredKey, ServerKey, iterations. Never a password."""

    mechanism: ScramMechanism
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    @property
    def info(self) -> ScramCredentialInfo:
        return ScramCredentialInfo(self.mechanism, self.iterations)

    def describe_text(self) -> str:
        """`kafka-configs --describe --entity-type users` prints `SCRAM-SHA-512=iterations=8192`."""
        return f"{self.mechanism.mechanism_name}=iterations={self.iterations}"

    def to_record(self) -> dict[str, str | int]:
        """A JSON-able form for the metadata store."""
        return {
            "mechanism": self.mechanism.mechanism_name,
            "salt": base64.b64encode(self.salt).decode("ascii"),
            "stored_key": base64.b64encode(self.stored_key).decode("ascii"),
            "server_key": base64.b64encode(self.server_key).decode("ascii"),
            "iterations": self.iterations,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> ScramCredential:
        try:
            mechanism = ScramMechanism.from_name(str(record["mechanism"]))
            iterations = record["iterations"]
            if not isinstance(iterations, int) or isinstance(iterations, bool):
                raise ScramError(f"SCRAM credential record: iterations must be an integer, got {iterations!r}")
            return cls(mechanism, _b64(str(record["salt"])), _b64(str(record["stored_key"])),
                       _b64(str(record["server_key"])), iterations)
        except KeyError as missing:
            raise ScramError(f"SCRAM credential record lacks {missing}") from None

    def to_kafka_string(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        record = self.to_record()
        return (f"salt={record['salt']},stored_key={record['stored_key']},server_key={record['server_key']},"
                f"iterations={self.iterations}")

    @classmethod
    def from_kafka_string(cls, mechanism: ScramMechanism, text: str) -> ScramCredential:
        """Kafka's ScramCredentialUtils.credentialFromString: exactly the four keys."""
        props: dict[str, str] = {}
        for token in text.split(","):
            index = token.find("=")
            if index <= 0:
                raise ScramError("Credentials not valid: a component without a key")
            props[token[:index]] = token[index + 1:]
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ScramError(f"Credentials not valid: keys {sorted(props)}")
        try:
            iterations = int(props["iterations"])
        except ValueError:
            raise ScramError("Credentials not valid: iterations is not a number") from None
        return cls(mechanism, _b64(props["salt"]), _b64(props["stored_key"]), _b64(props["server_key"]), iterations)


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError("not valid base64") from None


def validate_iterations(iterations: int) -> None:
    """ScramControlManager.validateUpsertion's iteration bounds (the same for both mechanisms), with its messages."""
    if iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError("Too few iterations", public=True)
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredentialError("Too many iterations", public=True)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential an AlterUserScramCredentials upsertion (salt, salted password, iterations) stores."""
    validate_iterations(iterations)
    hash_name = mechanism.hash_name
    return ScramCredential(mechanism, salt, _stored_key(hash_name, _client_key(hash_name, salted)),
                           _server_key(hash_name, salted), iterations)


def make_credential(password: str, mechanism: ScramMechanism, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for `password` (a fresh Kafka-shaped salt unless one is given)."""
    validate_iterations(iterations)
    salt = _kafka_salt() if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(password, salt, iterations, mechanism),
                                           iterations)


@dataclass(frozen=True)
class ScramUpsertion:
    """One `--add-scram` or `--add-config` credential before it is derived. `password` and `salted_password`
    are secrets: not in the repr, and gone once `credential()` has been derived and this object dropped."""

    mechanism: ScramMechanism
    name: str | None
    iterations: int
    salt: bytes | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    salted_password: bytes | None = field(default=None, repr=False)

    def credential(self) -> ScramCredential:
        if self.salted_password is not None:
            assert self.salt is not None
            return credential_from_salted_password(self.mechanism, self.salt, self.salted_password, self.iterations)
        assert self.password is not None
        return make_credential(self.password, self.mechanism, self.iterations, self.salt)


def parse_add_scram(argument: str) -> ScramUpsertion:
    """`kafka-storage format --add-scram` (Kafka's ScramParser): `SCRAM-SHA-256=[name=alice,password=...]` or
    `SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]`. Components are split at
    commas (a password cannot contain one here, as in Kafka) and a value in double quotes is unquoted."""
    text = argument.strip()
    equals = text.find("=")
    if equals < 0:
        raise ScramError("Failed to find equals sign in SCRAM argument", public=True)
    try:
        mechanism = ScramMechanism.from_name(text[:equals])
    except ScramError:
        raise ScramError(f"The add-scram mechanism {text[:equals]} is not supported.", public=True) from None
    config = text[equals + 1:]
    if not config.startswith("["):
        raise ScramError("Expected configuration string to start with [", public=True)
    if not config.endswith("]"):
        raise ScramError("Expected configuration string to end with ]", public=True)
    components: dict[str, str] = {}
    for component in config[1:-1].split(","):
        if "=" not in component:
            raise ScramError(f"No equals sign found in SCRAM component: {component.split('=')[0]!r}", public=True)
        key, value = component.split("=", 1)
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        components[key] = value
    name = components.pop("name", None)
    if name is None:
        raise ScramError("You must supply 'name' to add-scram", public=True)
    salt_text = components.pop("salt", None)
    salt = _b64_named(salt_text, "salt") if salt_text is not None else None
    iterations_text = components.pop("iterations", None)
    try:
        iterations = DEFAULT_ITERATIONS if iterations_text is None else int(iterations_text)
    except ValueError:
        raise ScramError(f"Failed to parse iterations count: {iterations_text}", public=True) from None
    password = components.pop("password", None)
    salted_text = components.pop("saltedpassword", None)
    if password is None and salted_text is None:
        raise ScramError("You must supply one of 'password' or 'saltedpassword' to add-scram", public=True)
    if password is None and salt is None:
        raise ScramError("You must supply 'salt' with 'saltedpassword' to add-scram", public=True)
    if components:
        raise ScramError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}", public=True)
    if iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError(
            f"The 'iterations' value must be >= {MIN_ITERATIONS} for add-scram using {mechanism.mechanism_name}",
            public=True)
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram using {mechanism.mechanism_name}",
            public=True)
    salted = _b64_named(salted_text, "saltedPassword") if password is None and salted_text is not None else None
    return ScramUpsertion(mechanism, name, iterations, salt, password, salted)


def _b64_named(text: str, what: str) -> bytes:
    try:
        return _b64(text)
    except ScramError:
        raise ScramError(f"Failed to decode given {what}: not valid base64", public=True) from None


_CONFIG_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def parse_config_credential(mechanism_name: str, value: str) -> ScramUpsertion:
    """One `kafka-configs --add-config` SCRAM value (ConfigCommand.alterUserScramCredentialConfigs): the text
    inside `SCRAM-SHA-256=[...]`, `iterations=N,password=P` or `password=P`; -1 or no iterations: 4096."""
    mechanism = ScramMechanism.from_name(mechanism_name)
    match = _CONFIG_CREDENTIAL.fullmatch(value)
    if match is None:
        raise ScramError(f"Invalid credential property {mechanism.mechanism_name}=<redacted>", public=True)
    iterations_text = match.group(1)
    iterations = int(iterations_text) if iterations_text not in (None, "", "-1") else DEFAULT_ITERATIONS
    if iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError(
            f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for "
            f"{mechanism.mechanism_name}", public=True)
    return ScramUpsertion(mechanism, None, iterations, password=match.group(2))


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
        salt = _base36(int.from_bytes(digest[:17], "big") >> 6).encode("ascii")
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
        client_signature = _hmac(hash_name, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("Invalid client credentials")
        computed_stored_key = _stored_key(hash_name, _xor(client_signature, proof))
        if not hmac.compare_digest(computed_stored_key, credential.stored_key) or not self._known:
            raise ScramError("Invalid client credentials")
        server_signature = _hmac(hash_name, credential.server_key, auth_message)
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
        client_key = _client_key(hash_name, salted)
        client_signature = _hmac(hash_name, _stored_key(hash_name, client_key), auth_message)
        self._server_signature = _hmac(hash_name, _server_key(hash_name, salted), auth_message)
        proof = base64.b64encode(_xor(client_key, client_signature)).decode()
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
