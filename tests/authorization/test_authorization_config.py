"""`authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found` and the HTTP authentication keys
under the one config validator, from every source a Kafka user sets them in."""

from __future__ import annotations

from pathlib import Path

import pytest

from kelp.config.broker import BrokerConfig
from kelp.config.keys import KAFKA_STANDARD_AUTHORIZER, KELP_AUTHORIZER
from kelp.errors import ConfigError


def test_defaults_are_kafkas_no_authorizer_no_super_users_deny_without_acls() -> None:
    cfg = BrokerConfig.load(env={})
    assert cfg["authorizer.class.name"] == ""
    assert cfg["super.users"] == ""
    assert cfg["allow.everyone.if.no.acl.found"] is False
    assert cfg["http.authentication.methods"] == []
    assert cfg["http.health.public"] is True and cfg["http.metrics.public"] is True


@pytest.mark.parametrize("name", [KELP_AUTHORIZER, KAFKA_STANDARD_AUTHORIZER, f"  {KAFKA_STANDARD_AUTHORIZER} "])
def test_kelps_and_kafkas_authorizer_names_are_accepted(name: str) -> None:
    assert BrokerConfig.load(env={}, overrides={"authorizer.class.name": name})["authorizer.class.name"] == name.strip()


@pytest.mark.parametrize("name", ["kafka.security.authorizer.AclAuthorizer", "com.example.MyAuthorizer"])
def test_any_other_authorizer_class_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig.load(env={}, overrides={"authorizer.class.name": name})
    message = str(err.value)
    assert name in message and "authorizer.class.name" in message and KELP_AUTHORIZER in message


def test_a_kafka_server_properties_file_works_unchanged(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"authorizer.class.name={KAFKA_STANDARD_AUTHORIZER}\n"
                     "super.users=User:admin;User:CN=broker-0,O=kelp\n"
                     "allow.everyone.if.no.acl.found=true\n")
    cfg = BrokerConfig.load(file=props, env={})
    assert cfg["authorizer.class.name"] == KAFKA_STANDARD_AUTHORIZER
    assert cfg["super.users"] == "User:admin;User:CN=broker-0,O=kelp"
    assert cfg["allow.everyone.if.no.acl.found"] is True


def test_super_users_come_from_the_environment_too() -> None:
    cfg = BrokerConfig.load(env={"KELP_SUPER_USERS": " User:a ; ;User:b "})
    assert cfg["super.users"] == "User:a;User:b"


def test_a_super_user_without_a_type_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'admin' is not Type:name .*User:admin"):
        BrokerConfig.load(env={}, overrides={"super.users": "User:root;admin"})


def test_http_authentication_methods_are_checked() -> None:
    cfg = BrokerConfig.load(env={}, overrides={"http.authentication.methods": "Basic, mtls"})
    assert cfg["http.authentication.methods"] == ["basic", "mtls"]
    with pytest.raises(ConfigError, match="unknown HTTP authentication method 'digest'"):
        BrokerConfig.load(env={}, overrides={"http.authentication.methods": "basic,digest"})
