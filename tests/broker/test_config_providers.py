"""Kafka's config providers in the broker config (kelp/config/providers.py).

What users rely on: a `server.properties` with `config.providers` and `${env:...}`, `${file:...:...}` or
`${dir:...:...}` references works unchanged, so one config file serves every pod of a StatefulSet (the operator's
secured layout is written this way); a reference that cannot be resolved stops the broker with the key and the
reference named instead of starting it with a literal `${env:POD_NAME}` as its address; without providers a
`${` in a value is left exactly as written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kelp.config.broker import BrokerConfig
from kelp.errors import ConfigError

ENV_CLASS = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
FILE_CLASS = "org.apache.kafka.common.config.provider.FileConfigProvider"
DIR_CLASS = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_env_references_in_a_properties_file_resolve_per_pod(tmp_path: Path) -> None:
    props = write(tmp_path / "server.properties", "\n".join([
        "config.providers=env",
        f"config.providers.env.class={ENV_CLASS}",
        "listeners=INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT",
        "advertised.listeners=INTERNAL://${env:POD_NAME}.brokers.ns.svc:9092",
        f"log.dirs={tmp_path}/${{env:POD_NAME}}",
    ]))
    for pod in ("kelp-0", "kelp-1"):
        cfg = BrokerConfig.load(file=props, env={"POD_NAME": pod})
        assert cfg["advertised.listeners"] == f"INTERNAL://{pod}.brokers.ns.svc:9092"
        assert cfg.log_dirs == [tmp_path / pod]


def test_file_and_directory_providers_read_secrets_from_allowed_paths(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    write(secrets / "jaas.properties", 'plain=org.apache.kafka.common.security.plain.PlainLoginModule required '
          'user_alice="alice-secret";\n')
    write(secrets / "retention", "3600000")
    settings = {
        "config.providers": "file,dir",
        "config.providers.file.class": FILE_CLASS,
        "config.providers.file.param.allowed.paths": str(secrets),
        "config.providers.dir.class": DIR_CLASS,
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": f"${{file:{secrets}/jaas.properties:plain}}",
        "log.retention.ms": f"${{dir:{secrets}:retention}}",
    }
    cfg = BrokerConfig.load(env={}, overrides=settings)
    assert cfg["log.retention.ms"] == 3600000
    assert 'user_alice="alice-secret"' in str(cfg.scoped["listener.name.sasl_plaintext.plain.sasl.jaas.config"])
    outside = write(tmp_path / "elsewhere.properties", "plain=x\n")
    with pytest.raises(ConfigError, match="outside config.providers.file.param.allowed.paths"):
        BrokerConfig.load(env={}, overrides={**settings, "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                                              f"${{file:{outside}:plain}}"})


@pytest.mark.parametrize("settings, message", [
    ({"config.providers": "env", "config.providers.env.class": ENV_CLASS,
      "advertised.listeners": "PLAINTEXT://${env:POD_NAME}:9092"},
     r"'advertised.listeners' \(from flags\) refers to \$\{env:POD_NAME\}.*no variable POD_NAME"),
    ({"advertised.listeners": "PLAINTEXT://${env:POD_NAME}:9092", "config.providers": "file",
      "config.providers.file.class": FILE_CLASS}, "names no provider 'env'"),
    ({"config.providers": "vault", "config.providers.vault.class": "com.example.VaultProvider"},
     "config.providers.vault.class is com.example.VaultProvider: Kelp serves"),
    ({"config.providers": "env", "config.providers.env.class": ENV_CLASS,
      "config.providers.env.param.allowlist.pattern": "POD_.*", "log.dirs": "/data/${env:HOME}"},
     "HOME does not match config.providers.env.param.allowlist.pattern"),
    ({"config.providers": "env", "config.providers.env.class": ENV_CLASS, "config.providers.enx.class": ENV_CLASS},
     "unknown broker config 'config.providers.enx.class'"),
    ({"config.providers": "file", "config.providers.file.class": FILE_CLASS,
      "log.dirs": "${file:/nonexistent/kelp.properties:dirs}"}, "cannot read /nonexistent/kelp.properties"),
])
def test_a_reference_that_cannot_resolve_names_the_key_and_the_reference(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.load(env={"HOME": "/root"}, overrides=settings)


def test_environment_variables_may_configure_providers_too() -> None:
    cfg = BrokerConfig.load(env={"KELP_CONFIG_PROVIDERS": "env", "KELP_CONFIG_PROVIDERS_ENV_CLASS": ENV_CLASS,
                                 "KELP_LOG_DIRS": "/data/${env:POD_NAME}", "POD_NAME": "kelp-2"})
    assert [str(p) for p in cfg.log_dirs] == ["/data/kelp-2"]


def test_without_providers_a_dollar_brace_is_left_as_written() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="p${x}w";'
    cfg = BrokerConfig.load(env={}, overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    assert cfg.scoped["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == jaas
