"""Fuzzing what unauthenticated peers control: every parser and SASL server raises only its module's error.

Random bytes, every truncation of a valid message, byte flips, inserted separators and oversized inputs go
to PLAIN, SCRAM (both steps, and the client's view of server messages), OAUTHBEARER (message and token),
the JAAS parser, the principal mapper and the DER name reader. Seeded: a failure reproduces.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterator

import pytest

from kelp.security.jaas import JaasConfigError, parse_jaas_config
from kelp.security.oauthbearer import (
    JwtKeySet,
    JwtValidator,
    JwtValidatorSettings,
    OAuthBearerError,
    OAuthBearerServer,
    client_initial_response,
    parse_client_initial_response,
)
from kelp.security.plain import PlainError, PlainServer, plain_client_message
from kelp.security.principal import PrincipalMappingError, SslPrincipalMapper, dn_from_der_name
from kelp.security.scram import ScramError, ScramMechanism, make_credential, parse_add_scram
from kelp.security.scram_exchange import ScramClient, ScramServer

SEED = 20_2024
CREDENTIAL = make_credential("pencil", ScramMechanism.SCRAM_SHA_256, 4096, b"salt")
SPECIALS = [b"\x00", b"\x01", b",", b"=", b"=2C", b"=3D", b"\xff", b"\xc3", b";", b'"', b"\\", b"/*", b"\n", b"r=",
            b"p=", b"c=", b"a=", b"n,", b"\x30", b"\x31", b"\x06", b"\x84"]


def mutations(valid: bytes, rng: random.Random, count: int = 300) -> Iterator[bytes]:
    """Truncations at every position, byte flips, inserted specials, duplications, random bytes, oversize."""
    for end in range(len(valid)):
        yield valid[:end]
    for _ in range(count):
        data = bytearray(valid)
        choice = rng.randrange(5)
        if choice == 0 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif choice == 1:
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.choice(SPECIALS)
        elif choice == 2 and data:
            start = rng.randrange(len(data))
            data[start:start] = data[start:start + rng.randrange(1, 8)]
        elif choice == 3:
            data = bytearray(rng.randbytes(rng.randrange(0, 200)))
        else:
            data += rng.randbytes(rng.randrange(1, 20))
        yield bytes(data)
    yield valid * 5000  # far past every size bound
    yield b"\x00" * 600_000


def check(call: Callable[[bytes], object], inputs: Iterator[bytes], error: type[Exception]) -> int:
    """Feed every input; anything but `error` (or success) fails the test."""
    seen = 0
    for data in inputs:
        seen += 1
        try:
            call(data)
        except error:
            pass
    return seen


def test_plain_server() -> None:
    rng = random.Random(SEED)
    valid = plain_client_message("alice", "pw")
    assert check(lambda d: PlainServer({"alice": "pw"}).evaluate(d), mutations(valid, rng), PlainError) > 300


def test_scram_client_first() -> None:
    rng = random.Random(SEED + 1)
    server = lambda: ScramServer(ScramMechanism.SCRAM_SHA_256, {"alice": CREDENTIAL}.get)  # noqa: E731
    valid = b"n,,n=alice,r=abcdef,tokenauth=true"
    assert check(lambda d: server().evaluate(d), mutations(valid, rng), ScramError) > 300


def test_scram_client_final() -> None:
    rng = random.Random(SEED + 2)
    client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="fuzznonce")

    def fresh() -> ScramServer:  # a server waiting for the final message
        server = ScramServer(ScramMechanism.SCRAM_SHA_256, {"alice": CREDENTIAL}.get, nonce="servernonce")
        server.evaluate(b"n,,n=alice,r=fuzznonce")
        return server

    first = ScramServer(ScramMechanism.SCRAM_SHA_256, {"alice": CREDENTIAL}.get, nonce="servernonce")
    valid = client.final_message(first.evaluate(client.first_message()))
    assert first.evaluate(valid).startswith(b"v=")  # the unmutated message authenticates
    assert check(lambda d: fresh().evaluate(d), mutations(valid, rng), ScramError) > 300


def test_scram_client_reading_server_messages() -> None:
    rng = random.Random(SEED + 3)

    def first(data: bytes) -> None:
        client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="abc")
        client.first_message()
        client.final_message(data)

    check(first, mutations(b"r=abcdef,s=" + base64.b64encode(b"salt") + b",i=4096", rng, 150), ScramError)
    client = ScramClient(ScramMechanism.SCRAM_SHA_256, "alice", "pencil", nonce="abc")
    client.first_message()
    client.final_message(b"r=abcdef,s=" + base64.b64encode(b"salt") + b",i=4096")
    check(client.verify_server_final, mutations(b"v=" + base64.b64encode(b"x" * 32), rng, 150), ScramError)


def test_oauthbearer_messages_and_tokens() -> None:
    rng = random.Random(SEED + 4)
    secret = base64.urlsafe_b64encode(b"k" * 32).decode()
    keys = JwtKeySet.from_jwks({"keys": [{"kty": "oct", "kid": "k", "k": secret}]})
    validator = JwtValidator(keys, JwtValidatorSettings(algorithms=("HS256",)), clock_ms=lambda: 1_700_000_000_000)
    token = ("eyJhbGciOiJIUzI1NiIsImtpZCI6ImsifQ.eyJzdWIiOiJhbGljZSIsImlhdCI6MSwiZXhwIjoyfQ."
             "c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2ln")
    valid = client_initial_response(token, authorization_id="alice", extensions={"trace": "x"})
    check(parse_client_initial_response, mutations(valid, rng), OAuthBearerError)

    def exchange(data: bytes) -> None:
        server = OAuthBearerServer(validator)
        server.evaluate(data)
        server.evaluate(b"\x01")

    check(exchange, mutations(valid, rng), OAuthBearerError)
    check(lambda d: validator.validate(d.decode("latin-1")), mutations(token.encode(), rng), OAuthBearerError)


def test_jaas_parser() -> None:
    rng = random.Random(SEED + 5)
    valid = (b'org.apache.kafka.common.security.plain.PlainLoginModule required /* c */ username="admin" '
             b"password='a\\\"b\\101' user_alice=\"alice-secret\"; // end")
    check(lambda d: parse_jaas_config(d.decode("latin-1")), mutations(valid, rng), JaasConfigError)


def test_principal_mapping_rules_and_der_names() -> None:
    rng = random.Random(SEED + 6)
    rules = b"RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L, RULE:^cn=([^,]*).*$/${x}$9/U, DEFAULT"

    def mapping(data: bytes) -> None:
        SslPrincipalMapper.from_rules(data.decode("latin-1")).name_for("CN=a,OU=b")

    check(mapping, mutations(rules, rng), PrincipalMappingError)
    name = bytes.fromhex("3030310b3009060355040613025553310c300a060355040a0c034f7267311330110603550403"
                         "0c0a44756b652c204a72")
    check(dn_from_der_name, mutations(name, rng), PrincipalMappingError)


def test_add_scram_arguments() -> None:
    rng = random.Random(SEED + 7)
    valid = b'SCRAM-SHA-512=[name=alice,iterations=4096,salt="c2FsdA==",saltedpassword="' + base64.b64encode(
        b"x" * 64) + b'"]'
    check(lambda d: parse_add_scram(d.decode("latin-1")), mutations(valid, rng, 200), ScramError)


@pytest.mark.parametrize("size", [524_289, 2_000_000])
def test_oversized_tokens_are_refused_before_parsing(size: int) -> None:
    with pytest.raises(OAuthBearerError, match="exceeds the limit"):
        OAuthBearerServer(JwtValidator(JwtKeySet.from_jwks({"keys": [{"kty": "oct", "k": "a2s"}]}))).evaluate(
            b"n,," + b"a" * size)
    with pytest.raises(ScramError, match="exceeds the limit"):
        ScramServer(ScramMechanism.SCRAM_SHA_512, {}.get).evaluate(b"n,,n=" + b"a" * size)
