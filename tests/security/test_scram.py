"""SCRAM-SHA-256/512 as Kafka does them: test vectors, credentials and their forms, the server exchange.

Vectors: RFC 7677 §3 (SCRAM-SHA-256), RFC 5802 §5 (SCRAM-SHA-1, through the hash-parameterised
computations), and for SCRAM-SHA-512 (no RFC vector exists) the credential, proof and signature Kafka
4.3.1's ScramFormatter computed for RFC 7677's user, password, salt and nonces (OpenJDK 17,
kafka-clients-4.3.1.jar). Message formats follow Kafka's ScramMessagesTest, the exchange its
ScramSaslServerTest; where Kelp is stricter (RFC 5802) the test says so.
"""

from __future__ import annotations

import base64

import pytest

from kelp.security import scram
from kelp.security.scram import (
    ScramCredential,
    ScramError,
    ScramMechanism,
    UnacceptableCredentialError,
    credential_from_salted_password,
    make_credential,
    parse_add_scram,
    parse_config_credential,
    salted_password,
)
from kelp.security.scram_exchange import DelegationTokenCredential, ScramClient, ScramServer

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism "

# (mechanism, Kafka's credentialToString, client final, server final) for user/pencil and RFC 7677's nonces.
VECTORS = {
    SHA256: (
        "salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
        "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096",
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",  # RFC 7677 §3 exactly
    ),
    SHA512: (
        "salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=6AAub3065EYRmyFpM2RNwqK+eGnrkYuEWbXn19LsEmBqzu8QaCXNc1FwpnX9NhH2h"
        "K/60dzj9DoO5DvVkOHbvg==,server_key=jZHbYjC1aHh0/hKbxyBuGFjDrgjgKTT1esA7awWiKcRZ0o/0b1yWEebBeSVkkCFewf91nLDf"
        "KF24mvD5nmE6rA==,iterations=4096",
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3"
        "R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ==",
        "v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==",
    ),
}


@pytest.fixture(scope="module")
def credentials() -> dict[ScramMechanism, ScramCredential]:
    return {m: make_credential("pencil", m, 4096, RFC_SALT) for m in ScramMechanism}


@pytest.mark.parametrize("mechanism", list(ScramMechanism), ids=lambda m: m.mechanism_name)
def test_vectors_client_and_server(mechanism: ScramMechanism,
                                   credentials: dict[ScramMechanism, ScramCredential]) -> None:
    kafka_string, client_final, server_final = VECTORS[mechanism]
    assert credentials[mechanism].to_kafka_string() == kafka_string
    client = ScramClient(mechanism, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    server = ScramServer(mechanism, {"user": credentials[mechanism]}.get, nonce=RFC_SERVER_NONCE)
    first = client.first_message()
    assert first == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.evaluate(first)
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final_message(server_first)
    assert final.decode() == client_final
    answer = server.evaluate(final)
    assert answer.decode() == server_final
    client.verify_server_final(answer)
    assert server.complete and server.outcome.authorization_id == "user"
    assert server.outcome.mechanism == mechanism.mechanism_name and server.outcome.credential_expiry_ms is None


def test_rfc5802_sha1_vector_through_the_same_computations() -> None:
    # RFC 5802 §5: user "user", password "pencil", SCRAM-SHA-1.
    salted = scram._hi("sha1", b"pencil", base64.b64decode("QSXCR+Q6sek8bf92"), 4096)
    auth = (b"n=user,r=fyko+d2lbbFgONRv9qkxdawL,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,"
            b"i=4096,c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j")
    client_key = scram.derive_client_key("sha1", salted)
    proof = scram.xor_bytes(client_key, scram.hmac_digest("sha1", scram.derive_stored_key("sha1", client_key), auth))
    assert base64.b64encode(proof) == b"v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    signature = scram.hmac_digest("sha1", scram.derive_server_key("sha1", salted), auth)
    assert base64.b64encode(signature) == b"rmF9pqV8S7suAoZWja4dJRkFsKQ="


# --- credentials and their forms --------------------------------------------------------------------------

def test_a_credential_never_holds_the_password() -> None:
    credential = make_credential("alice-secret", SHA512, 8192)
    assert "alice-secret" not in repr(credential) and "salt" not in repr(credential)
    assert credential.iterations == 8192 and len(credential.stored_key) == 64
    assert credential.salt.isalnum()  # Kafka's salt shape: a base-36 string of 130 random bits
    assert make_credential("alice-secret", SHA512).salt != credential.salt


def test_record_and_kafka_string_round_trip(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    credential = credentials[SHA512]
    assert ScramCredential.from_record(credential.to_record()) == credential
    assert ScramCredential.from_kafka_string(SHA512, credential.to_kafka_string()) == credential
    assert credential.to_record()["mechanism"] == "SCRAM-SHA-512"
    assert credential.describe_text() == "SCRAM-SHA-512=iterations=4096"  # kafka-configs --describe
    assert credential.info == scram.ScramCredentialInfo(SHA512, 4096)
    assert (SHA256.type_code, SHA512.type_code) == (1, 2)  # DescribeUserScramCredentials' mechanism int8
    assert ScramMechanism.from_type(2) is SHA512 and ScramMechanism.from_name("SCRAM-SHA-256") is SHA256


@pytest.mark.parametrize("text", ["salt=a,stored_key=b,server_key=c", "salt=QQ==,stored_key=QQ==,server_key=QQ==,"
                                  "iterations=x", "=x", "salt=QQ==,stored_key=QQ==,server_key=QQ==,iterations=1,x=y"])
def test_kafka_string_is_exactly_four_keys(text: str) -> None:  # ScramCredentialUtils.credentialFromString
    with pytest.raises(ScramError, match="Credentials not valid"):
        ScramCredential.from_kafka_string(SHA256, text)


@pytest.mark.parametrize(("iterations", "message"), [(4095, "Too few iterations"), (16385, "Too many iterations")])
def test_iterations_bounds(iterations: int, message: str) -> None:  # ScramControlManager.validateUpsertion
    with pytest.raises(UnacceptableCredentialError, match=message) as raised:
        credential_from_salted_password(SHA256, b"salt", b"x" * 32, iterations)
    assert raised.value.code == 93  # UNACCEPTABLE_CREDENTIAL


def test_upsertion_from_salted_password_matches_password(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    # AlterUserScramCredentials carries the salted password; the broker derives the same keys.
    salted = salted_password("pencil", RFC_SALT, 4096, SHA256)
    assert credential_from_salted_password(SHA256, RFC_SALT, salted, 4096) == credentials[SHA256]


def test_parse_add_scram_as_kafka_storage_does(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    plain = parse_add_scram("SCRAM-SHA-256=[name=alice,password=alice-secret]")
    assert (plain.name, plain.iterations, plain.mechanism) == ("alice", 4096, SHA256)
    assert "alice-secret" not in repr(plain)
    salted = base64.b64encode(salted_password("pencil", RFC_SALT, 4096, SHA512)).decode()
    given = parse_add_scram(f'SCRAM-SHA-512=[name=user,iterations=4096,salt="{base64.b64encode(RFC_SALT).decode()}",'
                            f'saltedpassword="{salted}"]')
    assert given.credential() == credentials[SHA512]
    assert plain.credential().iterations == 4096


@pytest.mark.parametrize(("argument", "message"), [
    ("SCRAM-SHA-256", "Failed to find equals sign"),
    ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    ("SCRAM-SHA-256=name=a,password=b]", "start with \\["),
    ("SCRAM-SHA-256=[name=a,password=b", "end with \\]"),
    ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword'"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=QQ==]", "You must supply 'salt' with 'saltedpassword'"),
    ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "Unknown SCRAM configurations: colour"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=100]", "must be >= 4096"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=99999]", "must be <= 16384"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "Failed to parse iterations count"),
    ("SCRAM-SHA-256=[name=a,salt=%%,saltedpassword=QQ==]", "Failed to decode given salt"),
])
def test_parse_add_scram_errors(argument: str, message: str) -> None:  # ScramParser's messages
    with pytest.raises(ScramError, match=message):
        parse_add_scram(argument)


def test_parse_config_credential_as_kafka_configs_does() -> None:
    upsertion = parse_config_credential("SCRAM-SHA-512", "iterations=8192,password=a,b=c")
    assert (upsertion.iterations, upsertion.password) == (8192, "a,b=c")  # the rest is the password
    assert parse_config_credential("SCRAM-SHA-256", "password=x").iterations == 4096
    assert parse_config_credential("SCRAM-SHA-256", "iterations=-1,password=x").iterations == 4096
    with pytest.raises(ScramError, match="less than the minimum 4096"):
        parse_config_credential("SCRAM-SHA-256", "iterations=10,password=x")
    with pytest.raises(ScramError, match="Invalid credential property") as raised:
        parse_config_credential("SCRAM-SHA-256", "secret=x")
    assert "secret=x" not in str(raised.value)


# --- the server exchange ----------------------------------------------------------------------------------

def _server(credential: ScramCredential) -> ScramServer:
    return ScramServer(credential.mechanism, {"alice": credential}.get)


def _exchange(server: ScramServer, client: ScramClient) -> bytes:
    return server.evaluate(client.final_message(server.evaluate(client.first_message())))


def test_authorization_id_equal_to_user_is_accepted(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = _server(credentials[SHA256])
    assert server.evaluate(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")  # authorizationIdEqualsAuthenticationId


def test_authorization_id_of_another_user_is_refused_publicly(
        credentials: dict[ScramMechanism, ScramCredential]) -> None:
    with pytest.raises(ScramError) as raised:  # authorizationIdNotEqualsAuthenticationId
        _server(credentials[SHA256]).evaluate(b"n,a=bob,n=alice,r=abc")
    assert raised.value.client_message("SCRAM-SHA-256") == (
        "Authentication failed: Client requested an authorization id that is different from username")


def test_server_nonce_extends_the_client_nonce(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = _server(credentials[SHA256])
    first = server.evaluate(b"n,,n=alice,r=clientnonce").decode()
    nonce = first.split(",")[0][2:]
    assert nonce.startswith("clientnonce") and len(nonce) > len("clientnonce") + 16
    assert "," not in nonce[len("clientnonce"):]
    other = _server(credentials[SHA256]).evaluate(b"n,,n=alice,r=clientnonce").decode()
    assert other.split(",")[0] != first.split(",")[0]  # each exchange has its own server nonce


def _final_parts(final: bytes) -> dict[str, str]:
    return dict(part.split("=", 1) for part in final.decode().split(","))


def _join(parts: dict[str, str]) -> bytes:
    return ",".join(f"{k}={v}" for k, v in parts.items()).encode()


@pytest.mark.parametrize("tamper", ["proof", "nonce_suffix", "nonce_prefix", "nonce_other", "channel_y",
                                    "channel_junk"])
def test_tampered_final_messages_are_refused(tamper: str, credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = _server(credentials[SHA512])
    client = ScramClient(SHA512, "alice", "pencil")
    parts = _final_parts(client.final_message(server.evaluate(client.first_message())))
    if tamper == "proof":
        proof = bytearray(base64.b64decode(parts["p"]))
        proof[0] ^= 1
        parts["p"] = base64.b64encode(bytes(proof)).decode()
    elif tamper == "nonce_suffix":
        parts["r"] += "x"
    elif tamper == "nonce_prefix":  # Kafka accepts a nonce that only ends with the combined one; Kelp does not
        parts["r"] = "x" + parts["r"]
    elif tamper == "nonce_other":
        parts["r"] = parts["r"][:-1] + ("A" if parts["r"][-1] != "A" else "B")
    elif tamper == "channel_y":
        parts["c"] = base64.b64encode(b"y,,").decode()
    else:
        parts["c"] = base64.b64encode(b"p=tls-unique,,").decode()
    with pytest.raises(ScramError) as raised:
        server.evaluate(_join(parts))
    assert raised.value.client_message("SCRAM-SHA-512") == GENERIC + "SCRAM-SHA-512"
    assert not server.complete


def test_wrong_password_fails_with_the_generic_message(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    with pytest.raises(ScramError, match="Invalid client credentials") as raised:
        _exchange(_server(credentials[SHA256]), ScramClient(SHA256, "alice", "wrong"))
    assert not raised.value.public


@pytest.mark.parametrize("first", [b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n,,m=ext,n=alice,r=abc",
                                   b"n,x=something,n=alice,r=abc", b"n,,n=ali=ce,r=abc", b"n,,n=alice,r=a,b"])
def test_refused_client_first_messages(first: bytes, credentials: dict[ScramMechanism, ScramCredential]) -> None:
    # Kafka's pattern admits only gs2 flag `n`; `m=` is refused as RFC 5802 requires (Kafka skips it).
    with pytest.raises(ScramError):
        _server(credentials[SHA256]).evaluate(first)


@pytest.mark.parametrize("extension", ["ext=val1", "anotherext=name1=value1 name2=another test value \"'!$[]()",
                                       "first=val1,second=name1 = value ,third=123"])
def test_extensions_are_accepted(extension: str, credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = _server(credentials[SHA256])  # ScramMessagesTest.VALID_EXTENSIONS
    client = ScramClient(SHA256, "alice", "pencil", extensions=dict(e.split("=", 1) for e in extension.split(",")))
    _exchange(server, client)
    assert server.complete and server.outcome.extensions == {}  # only tokenauth is a negotiated property


@pytest.mark.parametrize("extension", ["ext1=value", "ext", "ext=value1,value2", "ext=,", "ext =value"])
def test_invalid_extensions_are_refused(extension: str, credentials: dict[ScramMechanism, ScramCredential]) -> None:
    with pytest.raises(ScramError):  # ScramMessagesTest.INVALID_EXTENSIONS
        _server(credentials[SHA256]).evaluate(f"n,,n=alice,r=abc,{extension}".encode())


def test_names_with_comma_and_equals(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = ScramServer(SHA256, {"a,b=c": credentials[SHA256]}.get)
    client = ScramClient(SHA256, "a,b=c", "pencil")
    assert client.first_message().startswith(b"n,,n=a=2Cb=3Dc,")
    _exchange(server, client)
    assert server.outcome.authorization_id == "a,b=c"


def test_a_replayed_final_message_is_refused(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = _server(credentials[SHA256])
    client = ScramClient(SHA256, "alice", "pencil", nonce="fixednonce")
    final = client.final_message(server.evaluate(client.first_message()))
    server.evaluate(final)
    with pytest.raises(ScramError, match="state COMPLETE"):
        server.evaluate(final)  # the same exchange accepts nothing more
    again = _server(credentials[SHA256])
    again.evaluate(b"n,,n=alice,r=fixednonce")
    with pytest.raises(ScramError, match="nonce"):
        again.evaluate(final)  # a new exchange has a new server nonce
    assert not again.complete


def test_a_failed_exchange_stays_failed(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = _server(credentials[SHA256])
    with pytest.raises(ScramError):
        server.evaluate(b"garbage")
    with pytest.raises(ScramError, match="state FAILED"):
        server.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(ScramError, match="has not completed"):
        server.outcome  # noqa: B018


def test_unknown_users_look_like_known_ones_until_the_proof(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    lookup = {"alice": credentials[SHA256]}.get
    secret = b"broker-secret"
    known = ScramServer(SHA256, lookup, mock_secret=secret).evaluate(b"n,,n=alice,r=abc").decode()
    unknown = ScramServer(SHA256, lookup, mock_secret=secret).evaluate(b"n,,n=mallory,r=abc").decode()
    again = ScramServer(SHA256, lookup, mock_secret=secret).evaluate(b"n,,n=mallory,r=xyz").decode()
    shape = [p.split("=", 1)[0] for p in known.split(",")]
    assert [p.split("=", 1)[0] for p in unknown.split(",")] == shape
    assert unknown.split(",")[1:] == again.split(",")[1:]  # the same salt and iterations each time
    assert base64.b64decode(unknown.split(",")[1][2:]).isalnum()  # shaped like a Kafka salt
    server = ScramServer(SHA256, lookup, mock_secret=secret)
    with pytest.raises(ScramError, match="Invalid client credentials") as raised:
        _exchange(server, ScramClient(SHA256, "mallory", "pencil"))
    assert raised.value.client_message("SCRAM-SHA-256") == GENERIC + "SCRAM-SHA-256"


def test_credentials_of_another_mechanism_or_too_few_iterations_do_not_authenticate(
        credentials: dict[ScramMechanism, ScramCredential]) -> None:
    server = ScramServer(SHA512, {"alice": credentials[SHA256]}.get)
    with pytest.raises(ScramError):
        _exchange(server, ScramClient(SHA512, "alice", "pencil"))
    weak = ScramCredential(SHA256, b"s", b"k" * 32, b"k" * 32, 1000)
    with pytest.raises(ScramError, match="less than the minimum 4096"):
        ScramServer(SHA256, {"alice": weak}.get).evaluate(b"n,,n=alice,r=abc")


def test_delegation_token_exchange(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    token = DelegationTokenCredential("owner", make_credential("token-hmac", SHA256), expiry_ms=1_700_000_000_000)
    server = ScramServer(SHA256, {}.get, token_lookup={"token-id": token}.get)
    _exchange(server, ScramClient(SHA256, "token-id", "token-hmac", extensions={"tokenauth": "true"}))
    outcome = server.outcome
    assert (outcome.authorization_id, outcome.credential_expiry_ms, outcome.token_authenticated) == (
        "owner", 1_700_000_000_000, True)
    assert outcome.extensions == {"tokenauth": "true"}
    without_tokens = ScramServer(SHA256, {"token-id": credentials[SHA256]}.get)
    with pytest.raises(ScramError):
        _exchange(without_tokens, ScramClient(SHA256, "token-id", "pencil", extensions={"tokenauth": "TRUE"}))


def test_client_checks_the_server(credentials: dict[ScramMechanism, ScramCredential]) -> None:
    client = ScramClient(SHA256, "alice", "pencil", nonce="abc")
    client.first_message()
    with pytest.raises(ScramError, match="does not start with client nonce"):
        client.final_message(b"r=xyz123,s=QQ==,i=4096")
    with pytest.raises(ScramError, match="less than the minimum"):
        ScramClient(SHA256, "alice", "pencil", nonce="abc").final_message(b"r=abc123,s=QQ==,i=100")
    with pytest.raises(ScramError, match="more than the maximum 16384"):
        ScramClient(SHA256, "alice", "pencil", nonce="abc").final_message(b"r=abc123,s=QQ==,i=99999999")
    good = ScramClient(SHA256, "alice", "pencil", nonce="abc")
    good.first_message()
    good.final_message(b"r=abc123,s=QQ==,i=4096")
    with pytest.raises(ScramError, match="Invalid server signature"):
        good.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))
    with pytest.raises(ScramError, match="failed with error: other-error"):
        good.verify_server_final(b"e=other-error")
