"""Listeners and their security from Kafka's keys: resolved as Kafka resolves them, bad combinations refused.

A `server.properties` with several named listeners, a protocol map, advertised listeners, the inter-broker
listener, `ssl.*` keys with `listener.name.<listener>.` overrides and per-mechanism JAAS configs loads into
one `ListenerSetup`; `host`/`port` (and `--port`) still make a PLAINTEXT listener, or override the first
one. Each combination that could not work is refused at load with the key to change in the message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError
from tests.support.tls_files import PLAIN_JAAS, SCRAM_JAAS

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def load(**overrides: object) -> BrokerConfig:
    return BrokerConfig.load(env={}, overrides={k.replace("__", "."): v for k, v in overrides.items()})


def refused(settings: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(env={}, overrides=settings)
    return str(info.value)


def test_without_listeners_host_and_port_are_one_plaintext_listener() -> None:
    cfg = BrokerConfig.load(env={}, overrides={"host": "0.0.0.0", "port": 9099})
    (listener,) = cfg.listener_setup.listeners
    assert (listener.name, listener.protocol, listener.host, listener.port) == (
        "PLAINTEXT", "PLAINTEXT", "0.0.0.0", 9099)
    assert cfg.listener_setup.inter_broker.listener is listener and cfg.listener_setup.inter_broker.mechanism is None


def test_named_listeners_protocol_map_advertised_and_inter_broker(tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    path = tmp_path / "server.properties"
    path.write_text(
        "listeners=INTERNAL://:9092,EXTERNAL://0.0.0.0:9093,CONTROLLER://:9094\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT\n"
        "advertised.listeners=INTERNAL://kelp-0.kelp:9092,EXTERNAL://kafka.example.com:19093\n"
        "inter.broker.listener.name=INTERNAL\n"
        "sasl.mechanism.inter.broker.protocol=PLAIN\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        "listener.name.internal.sasl.enabled.mechanisms=PLAIN\n"
        f"listener.name.internal.plain.sasl.jaas.config={PLAIN_JAAS}\n"
        f"listener.name.external.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}\n"
        f"ssl.keystore.location={keystore}\n"
        "listener.name.external.connections.max.reauth.ms=600000\n"
        "connection.failed.authentication.delay.ms=250\n")
    cfg = BrokerConfig.load(file=path, env={})
    setup = cfg.listener_setup
    assert [(x.name, x.protocol, x.host, x.port) for x in setup.listeners] == [
        ("INTERNAL", "SASL_PLAINTEXT", "", 9092), ("EXTERNAL", "SASL_SSL", "0.0.0.0", 9093)]  # CONTROLLER: not opened
    internal, external = setup.listeners
    assert (internal.advertised_host, internal.advertised_port) == ("kelp-0.kelp", 9092)
    assert (external.advertised_host, external.advertised_port) == ("kafka.example.com", 19093)
    assert list(internal.mechanisms) == ["PLAIN"] and list(external.mechanisms) == ["SCRAM-SHA-512"]
    assert external.mechanisms["SCRAM-SHA-512"].max_reauth_ms == 600000
    assert internal.mechanisms["PLAIN"].max_reauth_ms == 0
    assert internal.tls is None and external.tls is not None and external.tls.keystore_location == str(keystore)
    inter = setup.inter_broker
    assert (inter.listener.name, inter.mechanism, inter.username, inter.password) == (
        "INTERNAL", "PLAIN", "admin", "admin-secret")
    assert "admin-secret" not in repr(setup)  # passwords stay out of reprs and logs
    assert setup.failed_authentication_delay_ms == 250
    # host/port and advertised.host/port say the first listener's addresses, as before listeners
    assert (cfg["host"], cfg["port"], cfg["advertised.host"], cfg["advertised.port"]) == (
        "0.0.0.0", 9092, "kelp-0.kelp", 9092)


def test_port_flag_overrides_the_first_listener() -> None:
    cfg = BrokerConfig.load(env={}, overrides={"listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                                               "ssl.keystore.location": "/k.pem", "port": 0})
    assert [(x.name, x.port) for x in cfg.listener_setup.listeners] == [("SSL", 0), ("PLAINTEXT", 9092)]
    assert cfg.listener_setup.inter_broker.listener.name == "PLAINTEXT"  # Kafka's default inter-broker protocol


def test_listener_prefixed_ssl_keys_override_the_plain_ones() -> None:
    cfg = load(listeners="A://:1,B://:2", listener__security__protocol__map="A:SSL,B:SSL",
               inter__broker__listener__name="A", ssl__keystore__location="/base.pem",
               ssl__truststore__location="/ca.pem", **{"listener.name.b.ssl.keystore.location": "/b.pem",
                                                       "listener.name.b.ssl.client.auth": "required"})
    a, b = cfg.listener_setup.listeners
    assert (a.tls.keystore_location, a.tls.client_auth.value) == ("/base.pem", "none")
    assert (b.tls.keystore_location, b.tls.client_auth.value) == ("/b.pem", "required")


def test_http_tls_keys_fall_back_to_the_ssl_ones() -> None:
    cfg = load(ssl__keystore__location="/broker.pem", ssl__truststore__location="/ca.pem", http__ssl__enabled="true",
               http__ssl__client__auth="required")
    tls = cfg.listener_setup.http_tls
    assert tls is not None and (tls.keystore_location, tls.truststore_location, tls.client_auth.value) == (
        "/broker.pem", "/ca.pem", "required")
    assert load().listener_setup.http_tls is None


@pytest.mark.parametrize(("settings", "names"), [
    ({"listeners": "SSL://:9093"}, ["listener SSL (SSL)", "ssl.keystore.location"]),
    ({"listeners": "SSL://:9093", "ssl.keystore.location": "/k.pem", "ssl.client.auth": "required"},
     ["ssl.truststore.location"]),
    ({"listeners": "SASL_PLAINTEXT://:9092"}, ["listener SASL_PLAINTEXT", "sasl.enabled.mechanisms"]),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "PLAIN"},
     ["listener.name.sasl_plaintext.plain.sasl.jaas.config"]),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "GSSAPI"}, ["GSSAPI", "not served"]),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "SCRAM-SHA-512"},
     ["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config", "username"]),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": SCRAM_JAAS}, ["PlainLoginModule"]),
    ({"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "OAUTHBEARER",
      "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
          "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"},
     ["sasl.oauthbearer.jwks.endpoint.url"]),
    ({"listeners": "INTERNAL://:9092"},
     ["listener INTERNAL has no security protocol", "listener.security.protocol.map"]),
    ({"listeners": "PLAINTEXT://:9092", "listener.security.protocol.map": "PLAINTEXT:TLS"},
     ["listener.security.protocol.map", "'TLS'"]),
    ({"listeners": "PLAINTEXT://:9092", "listener.name.external.ssl.keystore.location": "/k.pem"},
     ["listener.name.external.ssl.keystore.location", "EXTERNAL", "not in 'listeners'"]),
    ({"listeners": "PLAINTEXT://:9092", "listener.name.plaintext.ssl.keystore.size": "1"},
     ["listener.name.plaintext.ssl.keystore.size", "no such per-listener setting"]),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "EXTERNAL://h:1"},
     ["advertised.listeners", "EXTERNAL"]),
    ({"listeners": "A://:1,B://:2", "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"},
     ["inter.broker.listener.name"]),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "INTERNAL"},
     ["inter.broker.listener.name", "INTERNAL"]),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, ["only one of"]),
    ({"listeners": "A://:9092,B://:9092", "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"},
     ["both bind port 9092"]),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, ["names listener PLAINTEXT twice"]),
    ({"listeners": "PLAINTEXT:9092"}, ["NAME://host:port"]),
    ({"listeners": "SASL_SSL://:9093", "ssl.keystore.location": "/k.pem",
      "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS},
     ["sasl.mechanism.inter.broker.protocol"]),
    ({"listeners": "SASL_SSL://:9093", "ssl.keystore.location": "/k.pem", "sasl.enabled.mechanisms": "PLAIN",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
      "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS}, ["SCRAM-SHA-256", "not enabled"]),
    ({"ssl.keystore.type": "JKS"}, ["ssl.keystore.type", "PEM"]),
    ({"ssl.principal.mapping.rules": "RULE:\\Qa\\E/x/"}, ["ssl.principal.mapping.rules"]),
    ({"listener.name.plaintext.oauthbearer.sasl.server.callback.handler.class": "com.example.Handler"},
     ["sasl.server.callback.handler.class", "Java classes"]),
])
def test_bad_combinations_are_refused_naming_the_key(settings: dict[str, object], names: list[str]) -> None:
    message = refused(settings)
    for name in names:
        assert name in message, message
    assert "admin-secret" not in message


def test_listener_names_and_mechanisms_in_prefixes_are_case_insensitive() -> None:
    cfg = load(listeners="Sasl_Plaintext://:9092", sasl__enabled__mechanisms="plain",
               **{"listener.name.SASL_PLAINTEXT.PLAIN.sasl.jaas.config":
                  f'{PLAIN} required username="a" password="b" user_a="b";'})
    (listener,) = cfg.listener_setup.listeners
    assert listener.name == "SASL_PLAINTEXT" and listener.mechanisms["PLAIN"].jaas is not None


def test_unprefixed_jaas_config_is_the_fallback() -> None:
    cfg = load(listeners="SASL_PLAINTEXT://:9092", sasl__enabled__mechanisms="PLAIN", sasl__jaas__config=PLAIN_JAAS)
    assert cfg.listener_setup.listeners[0].mechanisms["PLAIN"].jaas_key == "sasl.jaas.config"


def test_secrets_are_sensitive_in_describe_configs() -> None:
    from kelp.config.listener_keys import is_sensitive

    assert is_sensitive("ssl.key.password") and is_sensitive("sasl.jaas.config")
    assert is_sensitive("listener.name.external.scram-sha-512.sasl.jaas.config")
    assert not is_sensitive("ssl.keystore.location") and not is_sensitive("listener.name.x.bogus")
