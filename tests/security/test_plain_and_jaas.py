"""SASL/PLAIN as Kafka's PlainSaslServer answers it, and `sasl.jaas.config` as Kafka's JaasConfig parses it.

PLAIN cases follow PlainSaslServerTest (clients/src/test/.../plain/internals/PlainSaslServerTest.java) and
PlainSaslServer's messages. The JAAS values and errors below are what Kafka 4.3.1's JaasContext gave for the
same texts (OpenJDK 17, kafka-clients-4.3.1.jar, run while this module was written), except where a test
says Kelp is stricter (a quoted value never closed).
"""

from __future__ import annotations

import pytest

from kelp.security.jaas import (
    LOGIN_MODULES,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    jaas_config_key,
    parse_jaas_config,
    parse_single_jaas_config,
)
from kelp.security.plain import (
    PlainError,
    PlainServer,
    parse_plain_message,
    plain_client_message,
    plain_users,
)

SERVER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
               'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


# --- JAAS -------------------------------------------------------------------------------------------------

def test_the_kafka_server_properties_example() -> None:
    entry = parse_single_jaas_config(SERVER_JAAS)
    assert entry.login_module == PLAIN_LOGIN_MODULE and entry.control_flag == "REQUIRED"
    assert dict(entry.options) == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                                   "user_alice": "alice-secret"}
    assert plain_users(SERVER_JAAS) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_entries_never_print_their_values() -> None:
    entry = parse_single_jaas_config(SERVER_JAAS)
    for text in (repr(entry), str(entry), repr([entry])):
        assert "secret" not in text and "user_alice=<redacted>" in text


@pytest.mark.parametrize(("text", "options"), [
    ("m required k=v;", {"k": "v"}),                                      # an unquoted word
    ("m required k='single quoted';", {"k": "single quoted"}),
    ('m required k="a\\"b\\\\c\\n\\t";', {"k": 'a"b\\c\n\t'}),           # Java's escapes
    ('m required k="\\101\\60\\0";', {"k": "A0\x00"}),                    # octal escapes
    ('m required k="\\q";', {"k": "q"}),                                  # any other escaped char is itself
    ("m required k=a-b_c$d.e;", {"k": "a-b_c$d.e"}),                      # Kafka's extra word characters
    ('m required /* comment */ k="v"; // trailing', {"k": "v"}),
    ("m required\n  // a line comment\n  k=v\n  ;", {"k": "v"}),
    ('m required k="first" k="second";', {"k": "second"}),                # the last one wins
    ('m required "quoted-key"="v";', {"quoted-key": "v"}),
    ('m required k="v;with;semicolons";', {"k": "v;with;semicolons"}),
    ("m REQUIRED;", {}),
    ('m required k="\\477";', {"k": "'7"}),                              # \47 then "7": \477 is no octal byte
    ("m required k=é;", {"k": "é"}),                                      # U+00A0 and up are word characters
])
def test_values_as_streamtokenizer_reads_them(text: str, options: dict[str, str]) -> None:
    assert dict(parse_single_jaas_config(text).options) == options


@pytest.mark.parametrize("flag", ["required", "Requisite", "SUFFICIENT", "optional"])
def test_control_flags_in_any_case(flag: str) -> None:
    assert parse_single_jaas_config(f"m {flag};").control_flag == flag.upper()


@pytest.mark.parametrize(("text", "message"), [
    ("", "Login module not specified"),
    ("// only a comment", "Login module not specified"),
    ("m", "Login module control flag not specified"),
    ("m sometimes k=v;", "Invalid login module control flag 'sometimes'"),
    ("m required k=v", "not terminated by semi-colon"),
    ("m required k;", "Value not specified for key 'k'"),
    ("m required k=;", "Value not specified for key 'k'"),
    ("m required password=123;", "Value not specified for key 'password'.*unquoted number"),
    ('m required password="open;', "never closed"),
    ('m required password="open\n";', "never closed"),
    ("m required = v;", "expected an option name"),
    ("m required k=-x;", "Value not specified for key 'k'"),              # a lone '-' is no word
    ("m required k=x/y;", "not terminated by semi-colon"),                # '/' starts a comment
    ("; m required;", "expected a login module class name"),
])
def test_errors_name_the_bad_token(text: str, message: str) -> None:
    with pytest.raises(JaasConfigError, match=message):
        parse_single_jaas_config(text)


def test_errors_never_quote_a_value() -> None:
    with pytest.raises(JaasConfigError) as raised:
        parse_single_jaas_config('m required user_bob="hunter2" oops;')
    assert "hunter2" not in str(raised.value) and "oops" in str(raised.value)


def test_several_modules_parse_but_sasl_jaas_config_wants_one() -> None:
    text = f"{PLAIN_LOGIN_MODULE} required user_a=x; {SCRAM_LOGIN_MODULE} required;"
    assert [e.login_module for e in parse_jaas_config(text)] == [PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE]
    with pytest.raises(JaasConfigError, match="contains 2 login modules, should be 1 module"):
        parse_single_jaas_config(text)


def test_login_modules_and_config_keys() -> None:
    assert LOGIN_MODULES["SCRAM-SHA-512"] == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert LOGIN_MODULES["OAUTHBEARER"] == "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    assert jaas_config_key("EXTERNAL", "SCRAM-SHA-512") == "listener.name.external.scram-sha-512.sasl.jaas.config"
    assert jaas_config_key(None, "PLAIN") == "sasl.jaas.config"


def test_plain_users_need_a_plain_module() -> None:
    with pytest.raises(JaasConfigError, match="no .*PlainLoginModule entry"):
        plain_users(f"{SCRAM_LOGIN_MODULE} required;")


# --- PLAIN ------------------------------------------------------------------------------------------------

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def test_a_user_authenticates() -> None:  # PlainSaslServerTest.noAuthorizationIdSpecified
    server = PlainServer(USERS)
    assert server.evaluate(plain_client_message("alice", "alice-secret")) == b""
    assert server.complete and server.outcome.authorization_id == "alice" and server.outcome.mechanism == "PLAIN"


def test_authorization_id_equal_to_the_user() -> None:  # authorizationIdEqualsAuthenticationId
    server = PlainServer(USERS)
    server.evaluate(plain_client_message("alice", "alice-secret", authorization_id="alice"))
    assert server.outcome.authorization_id == "alice"


def test_authorization_id_of_another_user_is_refused() -> None:  # authorizationIdNotEqualsAuthenticationId
    with pytest.raises(PlainError, match="authorization id that is different from username"):
        PlainServer(USERS).evaluate(plain_client_message("alice", "alice-secret", authorization_id="admin"))


@pytest.mark.parametrize(("message", "error"), [
    (plain_client_message("alice", "wrong"), "Authentication failed: Invalid username or password"),
    (plain_client_message("mallory", "alice-secret"), "Authentication failed: Invalid username or password"),
    (b"\x00\x00alice-secret", "Authentication failed: username not specified"),
    (b"\x00alice\x00", "Authentication failed: password not specified"),
    (b"alice", "expected 3 tokens, got 1"),
    (b"\x00alice", "expected 3 tokens, got 2"),
    (b"\x00alice\x00pw\x00extra", "expected 3 tokens, got 4"),
    (b"\x00alice\x00p\x00w\x00more\x00", "expected 3 tokens, got 4"),
    (b"\x00alice\x00\xff\xfe", "not UTF-8"),
])
def test_refusals_with_kafkas_public_messages(message: bytes, error: str) -> None:
    with pytest.raises(PlainError, match=error) as raised:
        PlainServer(USERS).evaluate(message)
    assert raised.value.client_message("PLAIN") == raised.value.detail  # Kafka sends PLAIN's message as it is


def test_an_unknown_user_and_a_wrong_password_look_alike() -> None:
    messages = []
    for message in (plain_client_message("mallory", "x"), plain_client_message("alice", "x")):
        with pytest.raises(PlainError) as raised:
            PlainServer(USERS).evaluate(message)
        messages.append(raised.value.client_message("PLAIN"))
    assert messages[0] == messages[1]


def test_size_limit_before_decoding() -> None:
    with pytest.raises(PlainError, match="exceeds the limit of 64 bytes"):
        PlainServer(USERS, max_message_bytes=64).evaluate(plain_client_message("alice", "x" * 100))
    parsed = parse_plain_message(plain_client_message("alice", "p" * 1000))  # long passwords (tokens) are fine
    assert parsed.username == "alice" and "ppp" not in repr(parsed)


def test_one_message_per_exchange() -> None:
    server = PlainServer(USERS)
    server.evaluate(plain_client_message("alice", "alice-secret"))
    with pytest.raises(PlainError, match="the exchange is over"):
        server.evaluate(plain_client_message("alice", "alice-secret"))


def test_a_verifier_function_instead_of_a_table() -> None:
    server = PlainServer(lambda user, password: (user, password) == ("bob", "pw"))
    server.evaluate(plain_client_message("bob", "pw"))
    assert server.outcome.authorization_id == "bob"

    def broken(user: str, password: str) -> bool:
        raise RuntimeError("store down")

    with pytest.raises(PlainError, match="credentials for user could not be verified"):
        PlainServer(broken).evaluate(plain_client_message("bob", "pw"))
