"""SASL/OAUTHBEARER: Kafka's client initial response, JWT validation, and the server exchange.

Message cases are Kafka's OAuthBearerClientInitialResponseTest; validation follows Kafka's
ValidatorAccessTokenValidator and ClaimValidationUtils (jose4j: `exp` and `iat` required, `none` never,
audience and issuer when configured, the sub claim trimmed), and the exchange OAuthBearerSaslServer
(`{"status":"invalid_token"}`, then %x01, then the failure). Time is a fixed clock, never the wall clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kelp.security.oauthbearer import (
    INVALID_TOKEN_RESPONSE,
    JwtKeySet,
    JwtValidator,
    JwtValidatorSettings,
    OAuthBearerConfigError,
    OAuthBearerError,
    OAuthBearerServer,
    client_initial_response,
    parse_client_initial_response,
)

NOW_S = 1_700_000_000


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _jwk(key: Any, kid: str, **extra: str) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPublicKey) else jwt.algorithms.ECAlgorithm
    data: dict[str, Any] = json.loads(algorithm.to_jwk(key))
    return {**data, "kid": kid, **extra}


@pytest.fixture(scope="module")
def keys(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> JwtKeySet:
    return JwtKeySet.from_jwks({"keys": [_jwk(rsa_key.public_key(), "rsa1", use="sig"),
                                         _jwk(ec_key.public_key(), "ec1"),
                                         {**_jwk(rsa_key.public_key(), "enc1"), "use": "enc"}]})


def _claims(**overrides: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {"sub": "alice", "iat": NOW_S - 10, "exp": NOW_S + 3600, "scope": "kafka"}
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def _token(key: Any, claims: dict[str, Any] | None = None, *, alg: str = "RS256", kid: str | None = "rsa1") -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(_claims() if claims is None else claims, key, algorithm=alg, headers=headers)


def _validator(keys: JwtKeySet, **settings: Any) -> JwtValidator:
    return JwtValidator(keys, JwtValidatorSettings(**settings), clock_ms=lambda: NOW_S * 1000)


# --- the client's message (OAuthBearerClientInitialResponseTest) ------------------------------------------

def test_build_client_response() -> None:
    assert client_initial_response("123.345.567", extensions={"nineteen": "42"}) == (
        b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01")


def test_invalid_extension_key_is_refused() -> None:
    with pytest.raises(OAuthBearerError, match="Extension name 19 is invalid"):
        client_initial_response("123.345.567", extensions={"19": "42"})


def test_token_and_authorization_id() -> None:
    response = parse_client_initial_response(b"n,,\x01auth=Bearer 123.345.567\x01\x01")
    assert (response.token, response.authorization_id) == ("123.345.567", "")
    response = parse_client_initial_response(b"n,a=myuser,\x01auth=Bearer 345\x01\x01")
    assert (response.token, response.authorization_id) == ("345", "myuser")
    assert "345" not in repr(response)


def test_extensions() -> None:
    message = b"n,,\x01propA=valueA1, valueA2\x01auth=Bearer 567\x01propB=valueB\x01\x01"
    response = parse_client_initial_response(message)
    assert response.token == "567" and dict(response.extensions) == {"propA": "valueA1, valueA2", "propB": "valueB"}


@pytest.mark.parametrize("token", ["vF9dft4qmTc2Nvb3RlckBhbHRhdmlzdGEuY29tCg",
                                   "vF-9.df_t4qm~Tc2Nvb3RlckBhbHR+hdmlzdGEuY29/tCg=="])
def test_rfc7628_example_and_rfc6750_token_characters(token: str) -> None:
    message = f"n,a=user@example.com,\x01host=server.example.com\x01port=143\x01auth=Bearer {token}\x01\x01"
    response = parse_client_initial_response(message.encode())
    assert (response.token, response.authorization_id) == (token, "user@example.com")
    assert dict(response.extensions) == {"host": "server.example.com", "port": "143"}


@pytest.mark.parametrize("message", [
    b"y,,\x01auth=Bearer abc\x01\x01",            # only gs2 flag n
    b"n,,\x01auth=Bearer abc\x01",                # not terminated by two ^A
    b"n,,\x01host=x\x01\x01",                     # no auth
    b"n,,\x01auth=Basic abc\x01\x01",             # not Bearer
    b"n,,\x01auth=Bearer a b\x01\x01",            # not a token
    b"n,,\x0119=42\x01auth=Bearer abc\x01\x01",   # extension key not letters
    b"n,,\x01auth=Bearer abc\x01\x01\xff",
])
def test_malformed_messages_are_refused(message: bytes) -> None:
    with pytest.raises(OAuthBearerError):
        parse_client_initial_response(message)


def test_scheme_is_case_insensitive() -> None:
    assert parse_client_initial_response(b"n,,\x01auth=BEARER abc\x01\x01").token == "abc"


# --- JWT validation ---------------------------------------------------------------------------------------

def test_a_valid_token(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    validated = _validator(keys).validate(_token(rsa_key, _claims(scope=["kafka", "admin"])))
    assert validated.principal == "alice" and validated.scopes == {"kafka", "admin"}
    assert validated.expiry_ms == (NOW_S + 3600) * 1000 and validated.issued_at_ms == (NOW_S - 10) * 1000


def test_ec_key_and_a_string_scope(keys: JwtKeySet, ec_key: ec.EllipticCurvePrivateKey) -> None:
    validated = _validator(keys).validate(_token(ec_key, _claims(scope="a b"), alg="ES256", kid="ec1"))
    assert validated.scopes == {"a b"}  # Kafka takes a string scope claim as one scope


def _unsigned(claims: dict[str, Any], alg: str) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    return f"{part({'alg': alg, 'typ': 'JWT', 'kid': 'rsa1'})}.{part(claims)}."


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_alg_none_is_refused(keys: JwtKeySet, alg: str) -> None:
    with pytest.raises(OAuthBearerError, match="not allowed"):
        _validator(keys).validate(_unsigned(_claims(), alg))


def test_alg_none_can_never_be_configured() -> None:
    with pytest.raises(OAuthBearerConfigError, match="'none' can never be allowed"):
        JwtValidatorSettings(algorithms=("RS256", "none"))


def test_a_token_signed_by_another_key_is_refused(keys: JwtKeySet, other_rsa_key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(OAuthBearerError, match="signature verification failed"):
        _validator(keys).validate(_token(other_rsa_key))


def test_hmac_with_the_rsa_public_key_as_secret_is_refused(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    secret = rsa_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT","kid":"rsa1"}').rstrip(b"=")
    payload = base64.urlsafe_b64encode(json.dumps(_claims()).encode()).rstrip(b"=")
    digest = hmac.new(secret, header + b"." + payload, hashlib.sha256).digest()
    signature = base64.urlsafe_b64encode(digest).rstrip(b"=")
    token = (header + b"." + payload + b"." + signature).decode()
    with pytest.raises(OAuthBearerError, match="not allowed"):
        _validator(keys).validate(token)
    with pytest.raises(OAuthBearerError, match="no key for alg HS256"):  # even when HS256 is allowed
        _validator(keys, algorithms=("RS256", "HS256")).validate(token)


def test_hmac_with_a_symmetric_jwks_key_when_allowed() -> None:
    secret = b"k" * 32
    keys = JwtKeySet.from_jwks({"keys": [{"kty": "oct", "kid": "h", "k": base64.urlsafe_b64encode(secret).decode()}]})
    token = jwt.encode(_claims(), secret, algorithm="HS256", headers={"kid": "h"})
    with pytest.raises(OAuthBearerError, match="not allowed"):
        _validator(keys).validate(token)  # not in the default allow-list
    assert _validator(keys, algorithms=("HS256",)).validate(token).principal == "alice"


@pytest.mark.parametrize(("claims", "match"), [
    (_claims(exp=NOW_S - 31), "expired"),                     # past exp + 30 s of skew
    (_claims(nbf=NOW_S + 31), "not valid before"),
    (_claims(iat=NOW_S + 31), "issued in the future"),
    (_claims(exp=None), 'Token is missing the "exp" claim'),
    (_claims(iat=None), 'Token is missing the "iat" claim'),
    (_claims(exp="soon"), "exp"),
    (_claims(sub=None), "sub value must be non-null"),
    (_claims(sub=""), "sub value must be non-empty"),
    (_claims(sub="   "), "sub value must not contain only whitespace"),
    (_claims(scope=["a", "a"]), "must not contain duplicates"),
    (_claims(aud="someone"), "audience"),                     # aud present, none expected: refused (jose4j, PyJWT)
])
def test_claims_refused(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey, claims: dict[str, Any], match: str) -> None:
    with pytest.raises(OAuthBearerError, match=match):
        _validator(keys).validate(_token(rsa_key, claims))


def test_clock_skew_is_honoured(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    _validator(keys).validate(_token(rsa_key, _claims(exp=NOW_S - 29, nbf=NOW_S + 29, iat=NOW_S + 29)))
    with pytest.raises(OAuthBearerError, match="expired"):
        _validator(keys, clock_skew_s=0).validate(_token(rsa_key, _claims(exp=NOW_S)))


def test_audience_and_issuer(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    validator = _validator(keys, expected_audience=("kafka", "other"), expected_issuer="https://idp")
    ok = _token(rsa_key, _claims(aud=["x", "kafka"], iss="https://idp"))
    assert validator.validate(ok).principal == "alice"
    for claims, match in ((_claims(aud="wrong", iss="https://idp"), "Audience doesn't match"),
                          (_claims(iss="https://idp"), "aud"),
                          (_claims(aud="kafka", iss="https://evil"), "Invalid issuer"),
                          (_claims(aud="kafka"), "iss")):
        with pytest.raises(OAuthBearerError, match=match):
            validator.validate(_token(rsa_key, claims))


def test_configured_subject_claim(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    validator = _validator(keys, sub_claim_name="preferred_username")
    assert validator.validate(_token(rsa_key, _claims(preferred_username=" bob "))).principal == "bob"
    with pytest.raises(OAuthBearerError, match="preferred_username value must be non-null"):
        validator.validate(_token(rsa_key))


def test_key_selection(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> None:
    with pytest.raises(OAuthBearerError, match="no key for alg RS256 and kid 'nope'"):
        _validator(keys).validate(_token(rsa_key, kid="nope"))
    with pytest.raises(OAuthBearerError, match="no key for alg RS256 and kid 'enc1'"):  # use=enc is skipped
        _validator(keys).validate(_token(rsa_key, kid="enc1"))
    with pytest.raises(OAuthBearerError, match="no key for alg ES256 and kid 'rsa1'"):  # wrong family for the kid
        _validator(keys).validate(_token(ec_key, alg="ES256", kid="rsa1"))
    assert _validator(keys).validate(_token(rsa_key, kid=None)).principal == "alice"  # no kid: any fitting key


def test_a_jwk_alg_restricts_its_key(rsa_key: rsa.RSAPrivateKey) -> None:
    keys = JwtKeySet.from_jwk(_jwk(rsa_key.public_key(), "r", alg="RS512"))
    with pytest.raises(OAuthBearerError, match="no key"):
        _validator(keys).validate(_token(rsa_key, kid="r"))
    assert _validator(keys).validate(_token(rsa_key, alg="RS512", kid="r")).principal == "alice"


def test_static_pem_keys(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    pem = rsa_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "key.pem").write_bytes(pem)
    keys = JwtKeySet.from_pem_file(tmp_path / "key.pem")
    assert _validator(keys).validate(_token(rsa_key, kid=None)).principal == "alice"
    ed = ed25519.Ed25519PrivateKey.generate()
    both = JwtKeySet.from_pem(pem + ed.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    assert _validator(both).validate(_token(ed, alg="EdDSA", kid=None)).principal == "alice"
    with pytest.raises(OAuthBearerConfigError, match="no PEM public key"):
        JwtKeySet.from_pem(b"nothing here")
    with pytest.raises(OAuthBearerConfigError, match="neither a public key nor a certificate"):
        JwtKeySet.from_pem(b"-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n")


def test_jwks_file_and_urls(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [_jwk(rsa_key.public_key(), "rsa1")]}))
    for source in (JwtKeySet.from_jwks_file(path), JwtKeySet.from_jwks_url(f"file:{path}"),
                   JwtKeySet.from_jwks_url(f"file://{path}")):
        assert _validator(source).validate(_token(rsa_key)).principal == "alice"
    with pytest.raises(OAuthBearerConfigError, match="does not fetch keys over the network"):
        JwtKeySet.from_jwks_url("https://idp.example.com/jwks")
    with pytest.raises(OAuthBearerConfigError, match="cannot read the JWKS file"):
        JwtKeySet.from_jwks_file(tmp_path / "missing.json")
    with pytest.raises(OAuthBearerConfigError, match="no verification keys"):
        JwtKeySet.from_jwks({"keys": []})


def test_settings_from_kafka_config() -> None:
    settings = JwtValidatorSettings.from_kafka_config({
        "sasl.oauthbearer.expected.audience": "kafka, other", "sasl.oauthbearer.expected.issuer": "https://idp",
        "sasl.oauthbearer.clock.skew.seconds": "5", "sasl.oauthbearer.sub.claim.name": "client_id"})
    assert settings == JwtValidatorSettings(expected_audience=("kafka", "other"), expected_issuer="https://idp",
                                            clock_skew_s=5, sub_claim_name="client_id")
    assert JwtValidatorSettings.from_kafka_config({}) == JwtValidatorSettings()  # Kafka's defaults: 30 s, sub, scope


# --- the exchange (OAuthBearerSaslServer) -----------------------------------------------------------------

def test_exchange_success(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    server = OAuthBearerServer(_validator(keys))
    assert server.evaluate(client_initial_response(_token(rsa_key), extensions={"traceId": "abc"})) == b""
    outcome = server.outcome
    assert (outcome.mechanism, outcome.authorization_id) == ("OAUTHBEARER", "alice")
    assert outcome.credential_expiry_ms == (NOW_S + 3600) * 1000 and dict(outcome.extensions) == {"traceId": "abc"}


def test_exchange_invalid_token(keys: JwtKeySet, other_rsa_key: rsa.RSAPrivateKey) -> None:
    server = OAuthBearerServer(_validator(keys))
    token = _token(other_rsa_key)
    assert server.evaluate(client_initial_response(token)) == b'{"status":"invalid_token"}'
    assert not server.complete and server.failure_detail and token not in server.failure_detail
    with pytest.raises(OAuthBearerError) as raised:
        server.evaluate(b"\x01")
    assert raised.value.client_message("OAUTHBEARER") == INVALID_TOKEN_RESPONSE
    with pytest.raises(OAuthBearerError, match="the exchange is over"):
        server.evaluate(b"\x01")


def test_after_the_error_only_the_acknowledgement_is_accepted(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    server = OAuthBearerServer(_validator(keys))
    server.evaluate(client_initial_response("not.a.jwt"))
    with pytest.raises(OAuthBearerError):
        server.evaluate(client_initial_response(_token(rsa_key)))  # Kafka would take a second token; Kelp does not
    assert not server.complete


def test_exchange_authorization_id(keys: JwtKeySet, rsa_key: rsa.RSAPrivateKey) -> None:
    server = OAuthBearerServer(_validator(keys))
    server.evaluate(client_initial_response(_token(rsa_key), authorization_id="alice"))
    assert server.outcome.authorization_id == "alice"
    with pytest.raises(OAuthBearerError, match="authorization id \\(bob\\) that is different") as raised:
        OAuthBearerServer(_validator(keys)).evaluate(client_initial_response(_token(rsa_key), authorization_id="bob"))
    assert raised.value.public


def test_exchange_malformed_message_gets_the_generic_message(keys: JwtKeySet) -> None:
    with pytest.raises(OAuthBearerError) as raised:
        OAuthBearerServer(_validator(keys)).evaluate(b"garbage")
    assert raised.value.client_message("OAUTHBEARER").startswith("Authentication failed during authentication")
