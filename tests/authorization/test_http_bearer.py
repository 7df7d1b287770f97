"""HTTP bearer tokens (`http.authentication.methods=bearer`) checked by a Kafka listener's OAUTHBEARER validator.

A broker with an OAUTHBEARER listener (its key a PEM public key, audience `kelp`): a token it would accept on
Kafka opens the HTTP API as `User:<sub>`, with that principal's ACLs; an expired token, one signed by another
key, one with `alg: none` or for another audience is answered 401 with the validator's reason in JSON and an
RFC 6750 `invalid_token` challenge. Which listener's validator is used: `http.authentication.oauthbearer
.listener`, else the first enabling OAUTHBEARER; a wrong name, or `bearer` with no such listener, stops the
broker at start.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import aiohttp
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kelp.broker.http.access.authentication import HttpAuthenticator
from kelp.broker.http.access.bearer_tokens import bearer_check, bearer_listener
from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError
from tests.authorization.harness import InProcessBroker

OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def oauth_settings(public: Path, *, listeners: str = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                   listener: str = "sasl_plaintext") -> dict[str, object]:
    return {
        "listeners": listeners, "inter.broker.listener.name": "PLAINTEXT",
        f"listener.name.{listener}.sasl.enabled.mechanisms": "OAUTHBEARER",
        f"listener.name.{listener}.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
        "sasl.oauthbearer.public.key.location": str(public),
        "sasl.oauthbearer.expected.audience": "kelp",
    }


def public_key_file(key: rsa.RSAPrivateKey, path: Path) -> Path:
    path.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    return path


def token(key: rsa.RSAPrivateKey, *, sub: str = "alice", aud: str = "kelp", exp_in: int = 600) -> str:
    now = int(time.time())
    return jwt.encode({"sub": sub, "aud": aud, "iat": now - 5, "exp": now + exp_in}, key, algorithm="RS256")


def unsigned(sub: str = "admin") -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'sub': sub, 'aud': 'kelp', 'iat': now, 'exp': now + 600})}."


async def test_a_bearer_token_is_checked_as_the_oauthbearer_listener_checks_it(key: rsa.RSAPrivateKey,
                                                                              tmp_path: Path) -> None:
    public = public_key_file(key, tmp_path / "issuer.pem")
    settings = {**oauth_settings(public), "http.authentication.methods": "bearer"}
    async with InProcessBroker(tmp_path / "broker", **settings) as b:  # super user: User:admin
        await b.parts.topics.create_topic("orders", 1, 1)
        await b.parts.acls.create([{"resourceType": "TOPIC", "resourceName": "orders", "principal": "User:alice",
                                    "operation": "DESCRIBE", "permission": "ALLOW"}])
        base = f"http://127.0.0.1:{b.broker.http_port}"

        async def get(path: str, bearer: str | None, scheme: str = "Bearer") -> tuple[int, dict, str]:
            headers = {"Authorization": f"{scheme} {bearer}"} if bearer is not None else {}
            async with aiohttp.ClientSession() as session, session.get(base + path, headers=headers) as r:
                return r.status, await r.json(), r.headers.get("WWW-Authenticate", "")

        assert (await get("/admin/v1/acls", token(key, sub="admin")))[0] == 200
        status, body, _ = await get("/admin/v1/topics/orders", token(key, sub="alice"))
        assert status == 200 and body["name"] == "orders"
        status, body, _ = await get("/admin/v1/acls", token(key, sub="alice"))
        assert status == 403 and "User:alice is not authorized" in body["message"]

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for bad, reason in ((token(key, sub="admin", exp_in=-120), "the token expired at"),
                            (token(other, sub="admin"), "signature verification failed"),
                            (unsigned("admin"), "algorithm 'none' is not allowed"),
                            (token(key, sub="admin", aud="someone-else"), "Could not validate the access token"),
                            ("not-a-jwt", "malformed JWT"),
                            ("", "carries no token")):
            status, body, challenge = await get("/admin/v1/acls", bad)
            assert status == 401, (bad, body)
            assert body["error_code"] == 401 and body["message"].startswith("the bearer token was refused: ")
            assert reason in body["message"], body
            assert challenge == 'Bearer realm="kelp", error="invalid_token"'
            assert bad == "" or bad not in body["message"]  # the token itself is never echoed
        status, body, challenge = await get("/admin/v1/acls", None)
        assert status == 401 and "a bearer token" in body["message"] and challenge == 'Bearer realm="kelp"'
        status, body, _ = await get("/admin/v1/acls", base64.b64encode(b"admin:x").decode(), scheme="Basic")
        assert status == 401 and "not accepted" in body["message"]


def config(**settings: object) -> BrokerConfig:
    return BrokerConfig.load(env={}, overrides=settings)


def test_which_listeners_validator_checks_http_tokens(key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    public = public_key_file(key, tmp_path / "issuer.pem")
    two = {**oauth_settings(public, listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                                              "SASL_SSL://127.0.0.1:0"),
           "ssl.keystore.location": str(tmp_path / "unused.pem"),
           "listener.name.sasl_ssl.sasl.enabled.mechanisms": "OAUTHBEARER",
           "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;"}
    assert bearer_listener(config(**two)) == "SASL_PLAINTEXT"  # the first enabling OAUTHBEARER
    assert bearer_listener(config(**two, **{"http.authentication.oauthbearer.listener": "sasl_ssl"})) == "SASL_SSL"
    with pytest.raises(ConfigError, match="no such listener"):
        bearer_listener(config(**two, **{"http.authentication.oauthbearer.listener": "external"}))
    with pytest.raises(ConfigError, match="does not enable SASL/OAUTHBEARER"):
        bearer_listener(config(**two, **{"http.authentication.oauthbearer.listener": "plaintext"}))
    plain = config(**{"http.authentication.methods": "bearer"})
    assert bearer_check(plain) is None
    with pytest.raises(ConfigError, match="OAUTHBEARER"):
        HttpAuthenticator.from_config(plain, bearer=bearer_check(plain))
