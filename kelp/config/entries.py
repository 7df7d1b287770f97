"""Described configs: each topic or broker config with its value, where that value comes from, and its synonyms.

Why: two doors describe configs — Kafka's DescribeConfigs (`kafka/handlers/admin/configs.py`, for `kafka-configs
--describe` and AdminClient) and Confluent REST v3 (`http/rest_v3/configs.py`, for Confluent's UI and scripts) —
and both must say the same thing: a value's source as Kafka's ConfigSource (TOPIC_CONFIG=1,
DYNAMIC_BROKER_CONFIG=2, DYNAMIC_DEFAULT_BROKER_CONFIG=3, STATIC_BROKER_CONFIG=4, DEFAULT_CONFIG=5; REST v3
spells them by name, `SOURCE_NAMES`), its synonyms most specific first (a topic override, then the broker
settings it defaults to, layer by layer: this broker's dynamic configs, the cluster-wide dynamic defaults,
the keys set at start, the defaults), whether it is read-only (every broker key but `DYNAMIC_BROKER_KEYS`),
and no value for a secret (`ssl.key.password`, `sasl.jaas.config`: Kafka describes them sensitive and
empty). Entries are plain tuples, JSON-ready, so a broker can hand its own to another (a broker's static
configs are only known to itself).

This module must never change a config nor import networking: it only reads a `BrokerConfig` and topic state.
"""

from __future__ import annotations

from collections.abc import Mapping

from .broker import BrokerConfig
from .keys import DYNAMIC_BROKER_KEYS, TOPIC_BROKER_SYNONYMS
from .listener_keys import is_sensitive

__all__ = ["Synonym", "Entry", "SOURCE_TOPIC", "SOURCE_DYNAMIC_BROKER", "SOURCE_DYNAMIC_DEFAULT_BROKER",
           "SOURCE_STATIC_BROKER", "SOURCE_DEFAULT", "SOURCE_NAMES", "config_text", "broker_synonyms",
           "topic_default_source", "topic_entries", "broker_entries", "default_entity_entries", "hide_secrets"]

# ConfigSource (DescribeConfigsResponse)
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_NAMES = {SOURCE_TOPIC: "DYNAMIC_TOPIC_CONFIG", SOURCE_DYNAMIC_BROKER: "DYNAMIC_BROKER_CONFIG",
                SOURCE_DYNAMIC_DEFAULT_BROKER: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                SOURCE_STATIC_BROKER: "STATIC_BROKER_CONFIG", SOURCE_DEFAULT: "DEFAULT_CONFIG"}
_LAYER_SOURCE = {"dynamic_broker": SOURCE_DYNAMIC_BROKER, "dynamic_default": SOURCE_DYNAMIC_DEFAULT_BROKER,
                 "static": SOURCE_STATIC_BROKER, "default": SOURCE_DEFAULT}

# (name, value, ConfigSource) of one synonym; a described entry: (name, value, read_only, source, synonyms)
Synonym = tuple[str, str | None, int]
Entry = tuple[str, str | None, bool, int, list[Synonym]]


def config_text(value: object) -> str | None:
    """A config value as Kafka describes it: booleans lower case, lists comma-separated."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def broker_synonyms(config: BrokerConfig, keys: tuple[str, ...]) -> list[Synonym]:
    """(name, value, source) layer by layer, each in `keys` order, as Kafka lists them: this broker's dynamic
    configs, the cluster-wide dynamic defaults, the keys set at start (static), the defaults."""
    by_layer: dict[str, list[Synonym]] = {layer: [] for layer in _LAYER_SOURCE}
    for k in keys:
        for layer, value in config.layers(k):
            by_layer[layer].append((k, config_text(value), _LAYER_SOURCE[layer]))
    return [s for layer in _LAYER_SOURCE for s in by_layer[layer]]


def topic_default_source(config: BrokerConfig, name: str) -> int:
    """The ConfigSource of a topic config no override sets: the broker layer its value comes from."""
    synonyms = broker_synonyms(config, TOPIC_BROKER_SYNONYMS.get(name, ()))
    return synonyms[0][2] if synonyms else SOURCE_DEFAULT


def topic_entries(config: BrokerConfig, effective: Mapping[str, tuple[str, bool]],
                  overrides: Mapping[str, str]) -> list[Entry]:
    """Every config of a topic (`TopicManager.effective_configs`, its `overrides`), sorted by name."""
    entries: list[Entry] = []
    for name, (value, _is_default) in sorted(effective.items()):
        synonyms: list[Synonym] = [(name, value, SOURCE_TOPIC)] if name in overrides else []
        synonyms += broker_synonyms(config, TOPIC_BROKER_SYNONYMS.get(name, ()))
        entries.append((name, value, False, synonyms[0][2] if synonyms else SOURCE_DEFAULT, synonyms))
    return entries


def broker_entries(config: BrokerConfig) -> list[Entry]:
    """Every config of this broker, sorted by name; read-only but the dynamic keys. A key without a value (as
    `log.retention.ms` when the hours decide) is listed with none, as Kafka's DescribeConfigs lists it."""
    entries: list[Entry] = []
    for name, raw in sorted(config.as_dict().items()):
        if raw is None:
            entries.append((name, None, name not in DYNAMIC_BROKER_KEYS, SOURCE_DEFAULT, []))
            continue
        synonyms = broker_synonyms(config, (name,))
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        entries.append((name, config_text(raw), name not in DYNAMIC_BROKER_KEYS, source, synonyms))
    return entries


def default_entity_entries(dynamic_defaults: Mapping[str, str]) -> list[Entry]:
    """The cluster-wide dynamic defaults (entity -1, `--entity-default`) only, as Kafka describes them."""
    return [(name, value, False, SOURCE_DYNAMIC_DEFAULT_BROKER, [(name, value, SOURCE_DYNAMIC_DEFAULT_BROKER)])
            for name, value in sorted(dynamic_defaults.items())]


def hide_secrets(entries: list[Entry]) -> list[Entry]:
    """The entries with no value for a secret, in the entry and its synonyms."""
    return [(n, None if is_sensitive(n) else v, ro, src, [(sn, None if is_sensitive(sn) else sv, ss)
                                                         for sn, sv, ss in syn])
            for n, v, ro, src, syn in entries]
