"""SCRAM-SHA-256 and SCRAM-SHA-512 credentials (RFC 5802, RFC 7677) as Kafka keeps them.

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
- The key derivations (ScramFormatter) the exchange (`scram_exchange`) computes with.

This module must never keep or log a password or a salted password, and does no I/O.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from kelp.errors import ErrorCode

from .sasl import SaslAuthenticationError

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "ScramCredential",
    "ScramCredentialInfo",
    "ScramError",
    "ScramMechanism",
    "ScramUpsertion",
    "UnacceptableCredentialError",
    "base36",
    "credential_from_salted_password",
    "make_credential",
    "parse_add_scram",
    "parse_config_credential",
    "salted_password",
    "validate_iterations",
    "derive_client_key",
    "derive_server_key",
    "derive_stored_key",
    "hmac_digest",
    "xor_bytes",
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

def hmac_digest(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def _hi(hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    # RFC 5802's Hi() is PBKDF2 with HMAC and dkLen = the hash length.
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def derive_client_key(hash_name: str, salted: bytes) -> bytes:
    return hmac_digest(hash_name, salted, b"Client Key")


def derive_server_key(hash_name: str, salted: bytes) -> bytes:
    return hmac_digest(hash_name, salted, b"Server Key")


def derive_stored_key(hash_name: str, client_key: bytes) -> bytes:
    return hashlib.new(hash_name, client_key).digest()


def xor_bytes(first: bytes, second: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(first, second, strict=True))


def salted_password(password: str, salt: bytes, iterations: int, mechanism: ScramMechanism) -> bytes:
    """SaltedPassword = Hi(password, salt, i); Kafka normalises the password as its UTF-8 bytes only."""
    return _hi(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def _kafka_salt() -> bytes:
    """ScramFormatter.secureRandomBytes: `new BigInteger(130, random).toString(36)` as UTF-8."""
    return base36(secrets.randbits(130)).encode("ascii")


def base36(number: int) -> str:
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
    return ScramCredential(mechanism, salt, derive_stored_key(hash_name, derive_client_key(hash_name, salted)),
                           derive_server_key(hash_name, salted), iterations)


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
