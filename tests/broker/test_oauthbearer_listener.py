"""SASL/OAUTHBEARER on a broker listener: JWTs checked against the public key the broker is given.

The broker's SASL_PLAINTEXT listener enables OAUTHBEARER with a PEM public key
(`sasl.oauthbearer.public.key.location`, Kelp's static-key setting) and an expected audience; a token signed
by the matching private key authenticates as its `sub`, and `connections.max.reauth.ms` plus the token's
expiry give the session its lifetime. A token signed by another key, or for another audience, or already
expired, gets Kafka's `{"status":"invalid_token"}` exchange and is refused.
"""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from kafka.protocol.metadata import MetadataRequest

from kelp.kafka_client import AuthenticationFailed, BlockingConnection, ConnectionSecurity, SaslCredentials

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def token(key: rsa.RSAPrivateKey, *, sub: str = "svc-orders", aud: str = "kelp", exp_in: int = 600) -> str:
    now = int(time.time())
    return jwt.encode({"sub": sub, "aud": aud, "iat": now, "exp": now + exp_in}, key, algorithm="RS256")


def test_a_signed_token_authenticates_as_its_subject_and_others_are_refused(broker_factory, tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = tmp_path / "issuer.pem"
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    b = broker_factory(settings={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.public.key.location": str(public),
        "sasl.oauthbearer.expected.audience": "kelp",
        "connections.max.reauth.ms": 3_600_000,
    })
    assert b.ready_info is not None
    host, port = str(b.ready_info["listeners"]["SASL_PLAINTEXT"]).rsplit(":", 1)

    def metadata(bearer: str) -> object:
        security = ConnectionSecurity(None, SaslCredentials("OAUTHBEARER", token=bearer))
        with BlockingConnection(host, int(port), client_id="t", timeout_s=10, security=security) as conn:
            return conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9)

    assert metadata(token(key)).brokers
    b.wait_for_log("authenticated as User:svc-orders (SASL/OAUTHBEARER)")
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for bad in (token(other), token(key, aud="someone-else"), token(key, exp_in=-120)):
        with pytest.raises(AuthenticationFailed, match='invalid_token'):
            metadata(bad)
    assert b.log_text().count("mechanism OAUTHBEARER") >= 3
