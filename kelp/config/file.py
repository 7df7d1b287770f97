"""The broker config file in either format, and Kafka's own key names mapped to Kelp's.

Why: Kafka users arrive with a `server.properties` (Java properties: `#`/`!`
comments, `key=value`, `key: value` or `key value`, `\\` line continuations and
escapes), Kelp's own examples are YAML. `read_config_file` returns one flat
mapping of property names from either, chosen by the file's suffix
(`.properties`; `.yaml`/`.yml`/`.json`) and otherwise by its content.
`kafka_key` maps the Kafka names that mean the same as a Kelp setting
(`node.id` -> `broker.id`, `log.dir` -> `log.dirs`) and recognises the Kafka
keys Kelp deliberately does without (KRaft quorum, thread pools, socket
buffers), which are dropped with one warning; every other unknown key is
still refused by `BrokerConfig`. Listener keys (`listeners`,
`advertised.listeners`, `listener.security.protocol.map`, ...) are Kelp's own
now (`listener_keys.py`, resolved by `listeners.py`).

It must never validate values (kelp/config/broker.py does) or read any file but the one it is given.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Mapping

from kelp.errors import ConfigError

from .keys import BROKER_KEYS

__all__ = ["read_config_file", "read_properties_text", "translate_kafka_keys", "KAFKA_ALIASES", "KAFKA_IGNORED_KEYS"]

log = logging.getLogger("kelp.broker.config")

# Kafka broker property -> the Kelp property that means the same.
KAFKA_ALIASES = {
    "node.id": "broker.id",  # KRaft's name for broker.id
    "log.dir": "log.dirs",  # Kafka's single-directory form
}

# Kafka broker properties Kelp has no use for: it has no KRaft quorum, thread pools.
KAFKA_IGNORED_KEYS = frozenset({
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "num.network.threads",
    "num.io.threads",
    "num.replica.fetchers",
    "num.recovery.threads.per.data.dir",
})


def read_config_file(file: str | os.PathLike[str]) -> dict[str, object]:
    """The properties of a YAML or Java-properties file, flat (`log.dirs`), values as given."""
    path = Path(file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text: {exc}") from None
    suffix = path.suffix.lower()
    if suffix == ".properties":
        return read_properties_text(text, path)
    if suffix in (".yaml", ".yml", ".json"):
        return _yaml(text, path)
    try:
        return _yaml(text, path)
    except ConfigError as yaml_error:
        # `key=value` / `key value` lines are not a YAML mapping: read them as Java properties.
        try:
            return read_properties_text(text, path)
        except ConfigError:
            raise yaml_error from None


def _yaml(text: str, path: Path) -> dict[str, object]:
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path} must hold a mapping of Kafka property names "
            "(YAML, or Java properties in a file named *.properties)"
        )
    return _flatten(data)


def read_properties_text(text: str, path: Path) -> dict[str, object]:
    """Java properties text (read from `path`, named in errors) as a flat mapping."""
    from jproperties import Properties

    props = Properties()
    try:
        props.load(text, "utf-8")
    except Exception as exc:  # jproperties raises its own ParseError and ValueError on bad escapes
        raise ConfigError(f"config file {path} is not a valid Java properties file: {exc}") from None
    return {key: value.data for key, value in props.items()}


def _flatten(data: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Accept both `log.dirs: x` and nested `log: {dirs: x}` YAML shapes."""
    out: dict[str, object] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in BROKER_KEYS:
            out.update(_flatten(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out


def translate_kafka_keys(items: Mapping[str, object], *, known: Mapping[str, object],
                         source: str) -> dict[str, object]:
    """Kafka names that mean a Kelp setting become it; deliberately unused Kafka keys are dropped with a warning.

    Keys in `known` (Kelp's own) are left alone, as is anything unknown (the caller refuses it).
    """
    out: dict[str, object] = {}
    dropped: list[str] = []
    for key, value in items.items():
        if key in known:
            out[key] = value
        elif key in KAFKA_ALIASES and KAFKA_ALIASES[key] not in items:
            out[KAFKA_ALIASES[key]] = value
        elif key in KAFKA_IGNORED_KEYS or key in KAFKA_ALIASES:
            dropped.append(key)
        else:
            out[key] = value
    if dropped:
        log.warning("%s: ignoring Kafka setting(s) Kelp has no use for: %s", source, ", ".join(sorted(dropped)))
    return out

