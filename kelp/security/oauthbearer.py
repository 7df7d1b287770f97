"""SASL/OAUTHBEARER (RFC 7628) as Kafka serves it, with JWT validation against keys Kelp is given (never a URL).

Why: Kafka clients authenticate with a JWT from an identity provider (KIP-768), and the broker checks it
against the provider's public keys. Kelp reproduces Kafka's server side:

- `parse_client_initial_response`: Kafka's OAuthBearerClientInitialResponse pattern
  `n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A]*^A` (gs2 header `n` only; extension keys are
  letters, values printable ASCII, `auth` is no extension); the scheme is `Bearer` in any case.
- `JwtValidator`: Kafka's ValidatorAccessTokenValidator (jose4j) rules: an algorithm from the allow-list,
  never `none`, and only with a key of its family (RS*/PS* with RSA, ES* with the matching EC curve, EdDSA
  with Ed25519/Ed448, HS* only with a symmetric JWKS key and only if allowed explicitly, so an RSA public
  key can never serve as an HMAC secret); `exp` and `iat` required; `exp`, `nbf` and `iat` (not in the
  future) checked with `sasl.oauthbearer.clock.skew.seconds` (default 30) against an injectable clock;
  `aud` must contain one of `sasl.oauthbearer.expected.audience` when set and is refused when present but
  none is configured (jose4j's and PyJWT's rule); `iss` must equal `sasl.oauthbearer.expected.issuer` when
  set; the principal is the claim `sasl.oauthbearer.sub.claim.name` (default `sub`), trimmed, non-empty
  (ClaimValidationUtils); scopes from `sasl.oauthbearer.scope.claim.name` (a string is one scope, as in
  Kafka). The token's `exp` is the credential expiry a KIP-368 re-authentication needs.
- `OAuthBearerServer`: Kafka's OAuthBearerSaslServer: a token that does not validate gets the challenge
  `{"status":"invalid_token"}` (OAuthBearerValidatorCallbackHandler), the client answers `%x01`, and the
  exchange fails with that JSON as the message the client sees; an authzid that is not the principal is
  refused with Kafka's message; extensions are accepted as Kafka's default handler accepts them.

Keys: a JWKS file (`sasl.oauthbearer.jwks.endpoint.url=file:/path`, as Kafka allows; read once, when the
loader is called), or static PEM public keys or certificates, or JWK dicts. An `http(s)` JWKS URL is
refused: Kelp does no network I/O for authentication (a provider's keys are fetched by whoever deploys
the broker, e.g. a sidecar writing the JWKS file). Where Kelp is stricter: after the error challenge only
`%x01` is accepted (Kafka lets the client retry with another token in the same exchange).

This module must never log or keep a bearer token beyond the validation, and does no I/O except the file
loaders, which read the one file named.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kelp.clock import WallClockMs, wall_clock_ms
from kelp.errors import ConfigError

from .sasl import MAX_RECEIVE_SIZE, SaslAuthenticationError, SaslOutcome, SaslServerBase, check_token_size

__all__ = [
    "DEFAULT_ALGORITHMS",
    "ClientInitialResponse",
    "JwtKey",
    "JwtKeySet",
    "JwtValidator",
    "JwtValidatorSettings",
    "OAuthBearerConfigError",
    "OAuthBearerError",
    "OAuthBearerServer",
    "ValidatedToken",
    "client_initial_response",
    "parse_client_initial_response",
]

MECHANISM = "OAUTHBEARER"
DEFAULT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""Asymmetric algorithms only; HS* must be listed explicitly and then needs a symmetric (`oct`) JWKS key."""
INVALID_TOKEN_RESPONSE = '{"status":"invalid_token"}'
"""Kafka's error challenge for a token that does not validate."""
MAX_TOKEN_CHARS = 65536
"""Kelp's bound on one bearer token (Kafka bounds only the whole frame)."""

_SEPARATOR = "\x01"
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_CLIENT_INITIAL_RESPONSE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_SEPARATOR}(?P<kvpairs>(?:{_KEY}={_VALUE}{_SEPARATOR})*){_SEPARATOR}")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)
_FAMILIES: dict[str, tuple[str, ...]] = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "P-256": ("ES256",), "P-384": ("ES384",), "P-521": ("ES512",), "secp256k1": ("ES256K",),
    "OKP": ("EdDSA",),
    "oct": ("HS256", "HS384", "HS512"),
}
_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521", "secp256k1": "secp256k1"}


class OAuthBearerError(SaslAuthenticationError):
    """An OAUTHBEARER exchange or token failed. Only this type leaves this module's parser, validator and server."""


class OAuthBearerConfigError(ConfigError):
    """Keys or validation settings Kelp cannot use."""


# --- the client's message ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClientInitialResponse:
    """A parsed client initial response; the token is not in the repr."""

    token: str = field(repr=False)
    authorization_id: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)


def _decode_saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def parse_client_initial_response(message: bytes) -> ClientInitialResponse:
    """Kafka's OAuthBearerClientInitialResponse(byte[])."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: not UTF-8") from None
    match = _CLIENT_INITIAL_RESPONSE.fullmatch(text)
    if match is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message")
    properties: dict[str, str] = {}
    for pair in match.group("kvpairs").split(_SEPARATOR):
        if pair:
            key, value = pair.split("=", 1)
            properties[key] = value
    auth = properties.pop("auth", None)
    if auth is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if auth_match.group("scheme").lower() != "bearer":
        raise OAuthBearerError("Invalid scheme in OAUTHBEARER client first message")
    authzid = match.group("authzid")
    return ClientInitialResponse(auth_match.group("token"), _decode_saslname(authzid) if authzid else "", properties)


def client_initial_response(token: str, *, authorization_id: str = "",
                            extensions: Mapping[str, str] | None = None) -> bytes:
    """The client's initial response (Kafka's OAuthBearerClientInitialResponse.toBytes), for tests and tools;
    extension names must be letters and not `auth`, values printable ASCII (validateExtensions)."""
    for key, value in (extensions or {}).items():
        if key == "auth" or not re.fullmatch(_KEY, key):
            raise OAuthBearerError(f"Extension name {key} is invalid")
        if not re.fullmatch(_VALUE, value):
            raise OAuthBearerError(f"Extension value for extension {key} is invalid")
    extras = "".join(f"{_SEPARATOR}{k}={v}" for k, v in (extensions or {}).items())
    authzid = f"a={authorization_id}" if authorization_id else ""
    return f"n,{authzid},{_SEPARATOR}auth=Bearer {token}{extras}{_SEPARATOR}{_SEPARATOR}".encode()


# --- keys -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JwtKey:
    """One verification key: its family (`RSA`, `P-256`, ..., `OKP`, `oct`), optional `kid` and `alg`."""

    family: str
    key: Any = field(repr=False)  # a cryptography public key, or bytes for `oct`
    kid: str | None = None
    alg: str | None = None

    def allows(self, algorithm: str) -> bool:
        if self.alg is not None and self.alg != algorithm:
            return False
        return algorithm in _FAMILIES.get(self.family, ())


def _family_of(key: object) -> str:
    # PyJWT and cryptography are imported on first use, here and below: a broker without an OAUTHBEARER
    # listener never loads them (about 5 MiB and 150 modules at start, issue 38).
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, rsa.RSAPublicKey):
        return "RSA"
    if isinstance(key, ec.EllipticCurvePublicKey):
        curve = _CURVES.get(key.curve.name)
        if curve is None:
            raise OAuthBearerConfigError(f"unsupported elliptic curve {key.curve.name}")
        return curve
    if isinstance(key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        return "OKP"
    raise OAuthBearerConfigError(f"unsupported key type {type(key).__name__}; use an RSA, EC or Ed25519/Ed448 key")


def _public(key: object) -> object:
    """A private key given by mistake verifies as its public half (nothing secret is kept)."""
    public_key = getattr(key, "public_key", None)
    return public_key() if callable(public_key) else key


class JwtKeySet:
    """The keys tokens are verified with. Build it with one of the loaders."""

    def __init__(self, keys: Sequence[JwtKey]) -> None:
        if not keys:
            raise OAuthBearerConfigError("no verification keys: a JWKS file or PEM keys are needed for OAUTHBEARER")
        self.keys = tuple(keys)

    @classmethod
    def from_jwks(cls, jwks: Mapping[str, object] | str) -> JwtKeySet:
        """A JWK Set (`{"keys": [...]}`), as a dict or JSON text. Keys with `use` other than `sig` are skipped."""
        try:
            data = json.loads(jwks) if isinstance(jwks, str) else jwks
        except json.JSONDecodeError as exc:
            raise OAuthBearerConfigError(f"JWKS is not JSON: {exc}") from None
        keys = data.get("keys") if isinstance(data, Mapping) else None
        if not isinstance(keys, list):
            raise OAuthBearerConfigError('JWKS has no "keys" list')
        return cls([k for k in (cls._from_jwk(item) for item in keys) if k is not None])

    @classmethod
    def from_jwk(cls, jwk_data: Mapping[str, object]) -> JwtKeySet:
        key = cls._from_jwk(jwk_data)
        if key is None:
            raise OAuthBearerConfigError("the JWK is not a signature key (use is not sig)")
        return cls([key])

    @staticmethod
    def _from_jwk(jwk_data: object) -> JwtKey | None:
        if not isinstance(jwk_data, Mapping):
            raise OAuthBearerConfigError("a JWKS entry is not an object")
        if jwk_data.get("use") not in (None, "sig"):
            return None
        kid, alg = jwk_data.get("kid"), jwk_data.get("alg")
        if alg == "none":
            raise OAuthBearerConfigError(f"JWK {kid!r} names alg none")
        import jwt

        try:
            parsed = jwt.PyJWK(dict(jwk_data))
        except jwt.exceptions.PyJWTError as exc:
            raise OAuthBearerConfigError(f"JWK {kid!r}: {exc}") from None
        key = parsed.key
        family = "oct" if isinstance(key, bytes) else _family_of(_public(key))
        return JwtKey(family, key if isinstance(key, bytes) else _public(key),
                      kid if isinstance(kid, str) else None, alg if isinstance(alg, str) else None)

    @classmethod
    def from_pem(cls, pem: bytes | str, *, kid: str | None = None) -> JwtKeySet:
        """Static keys: every PEM public key or certificate in `pem`."""
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import load_pem_public_key

        text = pem.decode("ascii", errors="replace") if isinstance(pem, bytes) else pem
        keys: list[JwtKey] = []
        for block in re.finditer(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----", text, re.DOTALL):
            kind, body = block.group(1), block.group(0).encode("ascii")
            try:
                if kind == "CERTIFICATE":
                    key: object = x509.load_pem_x509_certificate(body).public_key()
                elif kind == "PUBLIC KEY":
                    key = load_pem_public_key(body)
                else:
                    raise OAuthBearerConfigError(f"PEM block {kind!r} is neither a public key nor a certificate")
            except ValueError as exc:
                raise OAuthBearerConfigError(f"PEM {kind.lower()} cannot be read: {exc}") from None
            keys.append(JwtKey(_family_of(key), key, kid))
        if not keys:
            raise OAuthBearerConfigError("no PEM public key or certificate found")
        return cls(keys)

    @classmethod
    def from_jwks_file(cls, path: str | Path) -> JwtKeySet:
        """Reads the JWKS file once."""
        try:
            return cls.from_jwks(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise OAuthBearerConfigError(f"cannot read the JWKS file {path}: {exc.strerror}") from None

    @classmethod
    def from_pem_file(cls, path: str | Path, *, kid: str | None = None) -> JwtKeySet:
        """Reads the PEM file once."""
        try:
            return cls.from_pem(Path(path).read_bytes(), kid=kid)
        except OSError as exc:
            raise OAuthBearerConfigError(f"cannot read the PEM file {path}: {exc.strerror}") from None

    @classmethod
    def from_jwks_url(cls, url: str) -> JwtKeySet:
        """Kafka's `sasl.oauthbearer.jwks.endpoint.url`, for `file:` URLs only (read once)."""
        if re.match(r"(?i)https?:", url):
            raise OAuthBearerConfigError(
                f"sasl.oauthbearer.jwks.endpoint.url={url}: Kelp does not fetch keys over the network; write the "
                "provider's JWKS to a file and give file:/path/to/jwks.json (or static PEM keys)")
        if not url.lower().startswith("file:"):
            raise OAuthBearerConfigError(f"sasl.oauthbearer.jwks.endpoint.url={url}: expected a file: URL")
        path = re.sub(r"(?i)^file:(//localhost|//)?", "", url)
        return cls.from_jwks_file(path)

    def candidates(self, algorithm: str, kid: str | None) -> list[JwtKey]:
        """The keys that may verify a token signed with `algorithm` and naming `kid` (any key when it names none)."""
        return [k for k in self.keys if k.allows(algorithm) and (kid is None or k.kid == kid)]


# --- validation -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JwtValidatorSettings:
    """Kafka's broker-side OAUTHBEARER validation settings (names in `from_kafka_config`)."""

    expected_audience: tuple[str, ...] = ()
    """sasl.oauthbearer.expected.audience: the token's `aud` must contain one of these (empty: no `aud`)."""
    expected_issuer: str | None = None
    """sasl.oauthbearer.expected.issuer."""
    clock_skew_s: int = 30
    """sasl.oauthbearer.clock.skew.seconds: seconds of leeway for `exp`, `nbf` and `iat`."""
    sub_claim_name: str = "sub"
    """sasl.oauthbearer.sub.claim.name: the claim that names the principal."""
    scope_claim_name: str = "scope"
    """sasl.oauthbearer.scope.claim.name."""
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    """The signature algorithms accepted (Kelp's; Kafka accepts whatever the key allows, never `none`)."""

    def __post_init__(self) -> None:
        for name in self.algorithms:
            if name.lower() == "none":
                raise OAuthBearerConfigError("the JWT algorithm 'none' can never be allowed")
            if not any(name in family for family in _FAMILIES.values()):
                raise OAuthBearerConfigError(f"unknown JWT algorithm {name!r}")
        if self.clock_skew_s < 0:
            raise OAuthBearerConfigError("sasl.oauthbearer.clock.skew.seconds must not be negative")

    @classmethod
    def from_kafka_config(cls, config: Mapping[str, str]) -> JwtValidatorSettings:
        audience = config.get("sasl.oauthbearer.expected.audience", "")
        try:
            skew = int(config.get("sasl.oauthbearer.clock.skew.seconds", "30"))
        except ValueError:
            raise OAuthBearerConfigError("sasl.oauthbearer.clock.skew.seconds must be an integer") from None
        return cls(expected_audience=tuple(a.strip() for a in audience.split(",") if a.strip()),
                   expected_issuer=config.get("sasl.oauthbearer.expected.issuer") or None,
                   clock_skew_s=skew,
                   sub_claim_name=config.get("sasl.oauthbearer.sub.claim.name", "sub"),
                   scope_claim_name=config.get("sasl.oauthbearer.scope.claim.name", "scope"))


@dataclass(frozen=True)
class ValidatedToken:
    """What a valid token says: the principal name, scopes, and its times in wall-clock milliseconds."""

    principal: str
    scopes: frozenset[str]
    expiry_ms: int
    issued_at_ms: int


def _numeric_date(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OAuthBearerError(f"the {name} claim is not a number")
    if value < 0:
        raise OAuthBearerError(f"{name} value must be non-negative")
    return float(value)


class JwtValidator:
    """Validates a JWT with a key set and settings; `clock_ms` is the wall clock (injectable for tests)."""

    def __init__(self, keys: JwtKeySet, settings: JwtValidatorSettings | None = None, *,
                 clock_ms: WallClockMs = wall_clock_ms) -> None:
        self._keys = keys
        self._settings = settings or JwtValidatorSettings()
        self._clock_ms = clock_ms

    @classmethod
    def from_kafka_config(cls, settings: Mapping[str, str], *, clock_ms: WallClockMs = wall_clock_ms) -> JwtValidator:
        """The validator of a listener's `sasl.oauthbearer.*` settings: its signing keys from a JWKS file
        (`sasl.oauthbearer.jwks.endpoint.url=file:...`) and/or PEM keys (`sasl.oauthbearer.public.key.location`),
        read once here, and its claim checks."""
        keys: list[JwtKey] = []
        url = settings.get("sasl.oauthbearer.jwks.endpoint.url")
        if url:
            keys.extend(JwtKeySet.from_jwks_url(str(url)).keys)
        pem = settings.get("sasl.oauthbearer.public.key.location")
        if pem:
            keys.extend(JwtKeySet.from_pem_file(str(pem)).keys)
        return cls(JwtKeySet(keys), JwtValidatorSettings.from_kafka_config(settings), clock_ms=clock_ms)

    def validate(self, token: str) -> ValidatedToken:
        """The token's principal, scopes and times; OAuthBearerError (only) when it must be refused."""
        try:
            return self._validate(token)
        except OAuthBearerError:
            raise
        except Exception as exc:  # a library's surprise on hostile input is a refusal, never another error type
            raise OAuthBearerError(f"Could not validate the access token: {type(exc).__name__}") from None

    def _validate(self, token: str) -> ValidatedToken:
        import jwt  # loaded already: the key set this validator holds was built with it

        settings = self._settings
        if len(token) > MAX_TOKEN_CHARS:
            raise OAuthBearerError(f"the token has {len(token)} characters, more than {MAX_TOKEN_CHARS}")
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.exceptions.PyJWTError, ValueError, TypeError) as exc:
            raise OAuthBearerError(f"Could not validate the access token: malformed JWT ({exc})") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm.lower() == "none" or algorithm not in settings.algorithms:
            raise OAuthBearerError(f"Could not validate the access token: algorithm {algorithm!r} is not allowed")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise OAuthBearerError("Could not validate the access token: kid is not a string")
        candidates = self._keys.candidates(algorithm, kid)
        if not candidates:
            raise OAuthBearerError(f"Could not validate the access token: no key for alg {algorithm} and kid {kid!r}")
        claims: dict[str, Any] | None = None
        last_error = ""
        for candidate in candidates:
            try:
                claims = jwt.decode(
                    token, candidate.key, algorithms=[algorithm],
                    audience=list(settings.expected_audience) or None, issuer=settings.expected_issuer,
                    options={"require": ["exp", "iat"], "verify_exp": False, "verify_nbf": False,
                             "verify_iat": False})
                break
            except jwt.exceptions.InvalidSignatureError:
                last_error = "signature verification failed"
            except (jwt.exceptions.PyJWTError, ValueError, TypeError) as exc:
                raise OAuthBearerError(f"Could not validate the access token: {exc}") from None
        if claims is None:
            raise OAuthBearerError(f"Could not validate the access token: {last_error}")
        return self._check(claims)

    def _check(self, claims: Mapping[str, Any]) -> ValidatedToken:
        settings = self._settings
        now_s = self._clock_ms() / 1000.0
        skew = settings.clock_skew_s
        expiry = _numeric_date(claims, "exp")
        issued_at = _numeric_date(claims, "iat")
        if now_s >= expiry + skew:
            raise OAuthBearerError(f"the token expired at {expiry:.0f} (now {now_s:.0f}, skew {skew} s)")
        if "nbf" in claims and now_s + skew < _numeric_date(claims, "nbf"):
            raise OAuthBearerError(f"the token is not valid before {claims['nbf']} (now {now_s:.0f}, skew {skew} s)")
        if issued_at > now_s + skew:
            raise OAuthBearerError(f"the token was issued in the future at {issued_at:.0f} (now {now_s:.0f}, "
                                   f"skew {skew} s)")
        subject = claims.get(settings.sub_claim_name)
        if not isinstance(subject, str):
            raise OAuthBearerError(f"{settings.sub_claim_name} value must be non-null")
        if not subject:
            raise OAuthBearerError(f"{settings.sub_claim_name} value must be non-empty")
        if not subject.strip():
            raise OAuthBearerError(f"{settings.sub_claim_name} value must not contain only whitespace")
        return ValidatedToken(subject.strip(), self._scopes(claims.get(settings.scope_claim_name)),
                              int(expiry * 1000), int(issued_at * 1000))

    def _scopes(self, raw: object) -> frozenset[str]:
        name = self._settings.scope_claim_name
        items: list[object] = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
        scopes: set[str] = set()
        for item in items:
            if not isinstance(item, str) or not item.strip():
                raise OAuthBearerError(f"{name} values must be non-empty strings")
            if item.strip() in scopes:
                raise OAuthBearerError(f"{name} value must not contain duplicates - {item.strip()} already present")
            scopes.add(item.strip())
        return frozenset(scopes)


# --- the server exchange ----------------------------------------------------------------------------------

class OAuthBearerServer(SaslServerBase):
    """The broker side of one OAUTHBEARER exchange (a new object per authentication).

    `failure_detail` says why a token was refused (for the broker's log; it never contains the token).
    """

    MECHANISM = MECHANISM
    ERROR = OAuthBearerError

    def __init__(self, validator: JwtValidator, *, max_message_bytes: int = MAX_RECEIVE_SIZE) -> None:
        super().__init__()
        self._validator = validator
        self._max_message_bytes = max_message_bytes
        self._error_sent = False
        self._done = False
        self.failure_detail: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise OAuthBearerError("Unexpected OAUTHBEARER message: the exchange is over")
        if self._error_sent:
            self._done = True
            # Kafka: the client acknowledges the error challenge with %x01, and the exchange fails with it.
            raise OAuthBearerError(INVALID_TOKEN_RESPONSE, public=True)
        check_token_size(token, self._max_message_bytes, error=OAuthBearerError)
        try:
            response = parse_client_initial_response(token)
        except OAuthBearerError:
            self._done = True
            raise
        try:
            validated = self._validator.validate(response.token)
        except OAuthBearerError as exc:
            self.failure_detail = exc.detail
            self._error_sent = True
            return INVALID_TOKEN_RESPONSE.encode()
        self._done = True
        if response.authorization_id and response.authorization_id != validated.principal:
            raise OAuthBearerError(
                f"Authentication failed: Client requested an authorization id ({response.authorization_id}) that is "
                f"different from the token's principal name ({validated.principal})", public=True)
        self._outcome = SaslOutcome(mechanism=MECHANISM, authorization_id=validated.principal,
                                    credential_expiry_ms=validated.expiry_ms, extensions=dict(response.extensions))
        return b""
