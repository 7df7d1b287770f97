"""Broker configuration under Kafka's own property names.

Why: operators and users already know `log.dirs`, `num.partitions`,
`log.retention.ms`; Kelp accepts exactly those names from a config file (YAML
or Kafka's Java-properties `server.properties`, read by file.py),
`KELP_*` environment variables (`KELP_LOG_DIRS` -> `log.dirs`) and command-line
flags, in rising precedence (flags win). Every key and value is checked when it
is loaded, so a typo (in any of the three) fails at start with the key named and
the nearest known one suggested, not hours later.

The keys, their parsers and defaults are keys.py's (shared with the
file reader, file.py); this module merges the sources and names the key
and the source of a bad value.

This module must never open sockets or files other than the config file it is
given (and the files its values refer to through providers.py); it only
turns text into a validated `BrokerConfig`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kelp.errors import ConfigError

from .file import KAFKA_ALIASES, KAFKA_IGNORED_KEYS, read_config_file, translate_kafka_keys
from .keys import (
    BROKER_KEYS,
    DYNAMIC_BROKER_KEYS,
    TOPIC_CONFIG_KEYS,
    ConfigValue,
    parse_compression_name,
)
from .listener_keys import scoped_base
from .listeners import ListenerSetup, resolve_listeners
from .providers import is_provider_key, resolve_config_references

# The key tables are keys.py's and ConfigError is kelp.errors': import them from there.
__all__ = ["BrokerConfig", "validate_topic_configs", "validate_broker_configs"]


# Kafka's dynamic broker keys for features Kelp does not have, and why: deleting one (never set) is a no-op, as
# `kafka-reassign-partitions --verify` does when it clears throttles; setting one is refused saying why.
_NOTHING_TO_CONFIGURE = {
    "replica.alter.log.dirs.io.max.bytes.per.second": "it throttles moves of replicas between the log directories "
    "of one broker (AlterReplicaLogDirs), which Kelp does not serve; replication between brokers is throttled by "
    "leader.replication.throttled.rate and follower.replication.throttled.rate",
}


def validate_broker_configs(configs: Mapping[str, object] | None, *,
                            portable: bool = False) -> dict[str, str | None]:
    """Check a change of dynamic broker configs `{key: value, or None to delete}`; returns it normalised to strings.

    Raises ConfigError naming the key: unknown, not dynamic (Kafka's "Cannot update these configs dynamically"),
    or an invalid value, including one that would make the topic default it stands for invalid. `portable`
    (the controller and the metadata image) does not ask whether a codec's library is installed here.
    """
    configs = dict(configs or {})
    for key, why in _NOTHING_TO_CONFIGURE.items():
        if key in configs and configs.pop(key) is not None:  # deleting it (the reassign tool's --verify) is a no-op
            raise ConfigError(f"broker config '{key}' cannot be set: {why}")
    unknown = [k for k in (configs or {}) if k not in BROKER_KEYS]
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(f"unknown broker config '{key}'{_did_you_mean(key)}")
    static = sorted(k for k in (configs or {}) if k not in DYNAMIC_BROKER_KEYS)
    if static:
        raise ConfigError(
            f"Cannot update these configs dynamically: {', '.join(static)}: Kelp reads "
            f"{'it' if len(static) == 1 else 'them'} at start only; set {'it' if len(static) == 1 else 'them'} in "
            "the broker's config file, KELP_* variables or --set, and restart the broker (dynamic broker configs: "
            f"{', '.join(sorted(DYNAMIC_BROKER_KEYS))})")
    from .log_config import LogConfig

    out: dict[str, str | None] = {}
    for key, value in (configs or {}).items():
        if value is None:
            out[key] = None
            continue
        parser = parse_compression_name if portable and key == "compression.type" else BROKER_KEYS[key][0]
        try:
            parsed = parser(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid value {value!r} for broker config '{key}': {exc}") from None
        out[key] = str(parsed).lower() if isinstance(parsed, bool) else str(parsed)
        trial = BrokerConfig(dynamic_default={key: parsed})
        try:  # the topic default it stands for must be valid too (segment.bytes >= 14, ...)
            LogConfig.from_kafka(trial.default_topic_config())
        except ConfigError as exc:
            raise ConfigError(f"invalid value {value!r} for broker config '{key}': {exc}") from None
    return out


def validate_topic_configs(configs: Mapping[str, object] | None, *, topic: str = "") -> dict[str, str]:
    """Check per-topic overrides; returns them normalised to strings.

    Raises ConfigError naming the topic and the offending key or value.
    """
    out: dict[str, str] = {}
    where = f" for topic '{topic}'" if topic else ""
    for key, value in (configs or {}).items():
        parser = TOPIC_CONFIG_KEYS.get(key)
        if parser is None:
            raise ConfigError(
                f"unknown topic config '{key}'{where}; known: {', '.join(sorted(TOPIC_CONFIG_KEYS))}"
            )
        if value is None:
            continue
        try:
            parsed = parser(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid value {value!r} for topic config '{key}'{where}: {exc}") from None
        out[key] = str(parsed).lower() if isinstance(parsed, bool) else str(parsed)
    return out


@dataclass
class BrokerConfig:
    """Validated broker properties, keyed by Kafka name (`cfg["log.dirs"]`).

    A value is, most specific first: this broker's dynamic config, the cluster-wide dynamic default (both from
    the metadata log, DYNAMIC_BROKER_KEYS only, `set_dynamic`), the static value (file, environment, flags),
    the default. Every read (`cfg[key]`) sees the current one, so read them at use time, never keep a copy.

    A read is typed `Any`: the value's type is its key's (`BROKER_KEYS`: an int for `port`, a list for
    `log.dirs`), which one signature cannot say; every stored value is a `ConfigValue`.
    """

    values: dict[str, ConfigValue] = field(default_factory=dict)
    explicit: set[str] = field(default_factory=set)
    # Replaced whole, never mutated: a worker thread may read them while the event loop applies a change.
    dynamic_broker: Mapping[str, ConfigValue] = field(default_factory=dict)
    dynamic_default: Mapping[str, ConfigValue] = field(default_factory=dict)
    # Kafka's per-listener keys as given (`listener.name.<listener>.[<mechanism>.]<key>`), each parsed as its base
    # key; `listeners` resolves them.
    scoped: dict[str, ConfigValue] = field(default_factory=dict)
    _listeners: ListenerSetup | None = field(default=None, init=False, repr=False, compare=False)

    def __getitem__(self, key: str) -> Any:
        if key not in BROKER_KEYS:
            raise KeyError(key)
        if key in self.dynamic_broker:
            return self.dynamic_broker[key]
        if key in self.dynamic_default:
            return self.dynamic_default[key]
        return self.static(key)

    def static(self, key: str) -> Any:
        """The value from the file, environment or flags, else the default: what a restart without the
        dynamic configs would use."""
        if key in self.values:
            return self.values[key]
        return BROKER_KEYS[key][1]

    def set_dynamic(self, *, default: Mapping[str, str], broker: Mapping[str, str]) -> set[str]:
        """Take the dynamic configs of the cluster-wide default entity and of this broker (as the metadata log
        holds them: strings); returns the keys whose effective value changed."""
        before = {k: self[k] for k in DYNAMIC_BROKER_KEYS}
        self.dynamic_default = _parse_dynamic(default)
        self.dynamic_broker = _parse_dynamic(broker)
        return {k for k in DYNAMIC_BROKER_KEYS if self[k] != before[k]}

    def layers(self, key: str) -> list[tuple[str, ConfigValue]]:
        """Where `key`'s value can come from, most specific first, the ones that are set:
        ("dynamic_broker" | "dynamic_default" | "static" | "default", value)."""
        out: list[tuple[str, ConfigValue]] = []
        if key in self.dynamic_broker:
            out.append(("dynamic_broker", self.dynamic_broker[key]))
        if key in self.dynamic_default:
            out.append(("dynamic_default", self.dynamic_default[key]))
        if key in self.explicit:
            out.append(("static", self.values[key]))
        if BROKER_KEYS[key][1] is not None:
            out.append(("default", BROKER_KEYS[key][1]))
        return out

    def get(self, key: str, default: object = None) -> Any:
        try:
            value = self[key]
        except KeyError:
            return default
        return default if value is None else value

    @classmethod
    def load(
        cls,
        *,
        file: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, object] | None = None,
    ) -> "BrokerConfig":
        """Merge config file (YAML or Java properties) < `KELP_*` env < overrides (flags); resolve Kafka's
        `${provider:...}` references (providers.py); validate each key."""
        cfg = cls()
        env = os.environ if env is None else env
        sources: list[tuple[str, dict[str, object]]] = []
        if file is not None:
            sources.append((f"config file {Path(file)}", read_config_file(file)))
        sources.append(("environment", dict(_from_env(env))))
        sources.append(("flags", dict(overrides or {})))
        for source, items in resolve_config_references(sources, env=env):
            cfg._merge(items, source=source)
        cfg._resolve_listeners()
        cfg._resolve_broker_id(env)
        cfg._resolve_standalone()
        cfg._check_consumer_group_timeouts()
        cfg._check_share_group_timeouts()
        return cfg

    def _check_consumer_group_timeouts(self) -> None:
        """KIP-848: a member heartbeats every group.consumer.heartbeat.interval.ms and is fenced after
        group.consumer.session.timeout.ms without one, so the interval must be the shorter (Kafka's check)."""
        session = self["group.consumer.session.timeout.ms"]
        interval = self["group.consumer.heartbeat.interval.ms"]
        if interval >= session:
            raise ConfigError(f"group.consumer.heartbeat.interval.ms ({interval}) must be less than "
                              f"group.consumer.session.timeout.ms ({session})")

    def _check_share_group_timeouts(self) -> None:
        """KIP-932: the same rule for share-group members (group.share.*), as Kafka checks it."""
        session = self["group.share.session.timeout.ms"]
        interval = self["group.share.heartbeat.interval.ms"]
        if interval >= session:
            raise ConfigError(f"group.share.heartbeat.interval.ms ({interval}) must be less than "
                              f"group.share.session.timeout.ms ({session})")

    def _resolve_standalone(self) -> None:
        """A broker whose file-backed cluster directory is its own (no `cluster.dir`) is a cluster of one: its
        internal topics get one replica unless set, and `__transaction_state` a min.insync.replicas of 1, as Kafka's
        quickstart server.properties does. Any shared cluster keeps Kafka's defaults (3 replicas, min ISR 2),
        and creates them only once that many brokers are live."""
        if self["cluster.backend"] != "file" or "cluster.dir" in self.explicit:
            return
        for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                    "transaction.state.log.min.isr", "share.coordinator.state.topic.replication.factor",
                    "share.coordinator.state.topic.min.isr"):
            if key not in self.explicit:
                self.values[key] = 1

    def _resolve_broker_id(self, env: Mapping[str, str]) -> None:
        """`broker.id.from.hostname`: a StatefulSet pod `<name>-<ordinal>` is broker `<ordinal>`."""
        if not self.get("broker.id.from.hostname") or "broker.id" in self.explicit:
            return
        import socket

        host = env.get("HOSTNAME") or socket.gethostname()
        match = re.search(r"-(\d+)$", host.split(".")[0])
        if match is None:
            raise ConfigError(
                f"broker.id.from.hostname is true but the host name {host!r} does not end in '-<number>' "
                "(as a StatefulSet pod's does); set broker.id instead"
            )
        self.values["broker.id"] = int(match.group(1))

    @property
    def cluster_dir(self) -> Path:
        """The directory the file lease and metadata backends share (default `<first log dir>/cluster`)."""
        return Path(self["cluster.dir"]) if self["cluster.dir"] else self.log_dirs[0] / "cluster"

    def _merge(self, items: Mapping[str, object], *, source: str) -> None:
        for key, raw in translate_kafka_keys(items, known=BROKER_KEYS, source=source).items():
            spec = BROKER_KEYS.get(key)
            if spec is None and self._merge_scoped(key, raw, source=source):
                continue
            if spec is None:
                raise ConfigError(f"unknown broker config '{key}' (from {source}){_did_you_mean(key)}")
            try:
                self.values[key] = spec[0](raw)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid value {raw!r} for broker config '{key}' (from {source}): {exc}") from None
            self.explicit.add(key)

    def per_listener(self, key: str) -> dict[str, int]:
        """`listener.name.<l>.<key>` values set, by listener name (upper case, as listeners are named)."""
        out: dict[str, int] = {}
        for scoped_key, value in self.scoped.items():
            parsed = scoped_base(scoped_key)
            if parsed is not None and parsed[1] == key and parsed[2] is None and isinstance(value, int):
                out[parsed[0]] = value
        return out

    def _merge_scoped(self, key: str, raw: object, *, source: str) -> bool:
        """A `listener.name.` key: parsed as the key it overrides and kept in `scoped`; False for any other key."""
        try:
            parsed = scoped_base(key)
        except ValueError as exc:
            raise ConfigError(f"unknown broker config (from {source}): {exc}") from None
        if parsed is None:
            return False
        try:
            self.scoped[key] = BROKER_KEYS[parsed[1]][0](raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid value for broker config '{key}' (from {source}): {exc}") from None
        return True

    def _resolve_listeners(self) -> None:
        """Resolve (and so check) the listeners; `host`/`port` and `advertised.host`/`advertised.port` then
        say the first listener's addresses, as they did before Kelp had listeners."""
        self._listeners = None
        setup = self.listener_setup
        first = setup.listeners[0]
        if "port" not in self.explicit:
            self.values["port"] = first.port
        if "host" not in self.explicit:
            self.values["host"] = first.host or "0.0.0.0"  # PLAINTEXT://:9092 binds every interface
        if first.advertised_host and "advertised.host" not in self.explicit:
            self.values["advertised.host"] = first.advertised_host
        if first.advertised_port and "advertised.port" not in self.explicit:
            self.values["advertised.port"] = first.advertised_port

    @property
    def listener_setup(self) -> ListenerSetup:
        """The listeners with their security settings (`listeners.py`); resolved on first use, checked by `load`."""
        if self._listeners is None:
            self._listeners = resolve_listeners(self.__getitem__, explicit=self.explicit, scoped=self.scoped)
        return self._listeners

    # -- derived values -------------------------------------------------
    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self["log.dirs"]]

    @property
    def broker_id(self) -> int:
        return int(self["broker.id"])

    def retention_ms(self) -> int:
        if self.get("log.retention.ms") is not None:
            return int(self["log.retention.ms"])
        if self.get("log.retention.minutes") is not None:
            return int(self["log.retention.minutes"]) * 60_000
        hours = int(self["log.retention.hours"])
        return -1 if hours < 0 else hours * 3_600_000

    def segment_ms(self) -> int:
        if self.get("log.roll.ms") is not None:
            return int(self["log.roll.ms"])
        return int(self["log.roll.hours"]) * 3_600_000

    def default_topic_config(self) -> dict[str, str]:
        """Broker-wide defaults under topic config names (for LogConfig.from_kafka)."""
        out = {
            "retention.ms": str(self.retention_ms()),
            "retention.bytes": str(self["log.retention.bytes"]),
            "segment.bytes": str(self["log.segment.bytes"]),
            "segment.ms": str(self.segment_ms()),
            "index.interval.bytes": str(self["log.index.interval.bytes"]),
            "cleanup.policy": str(self["log.cleanup.policy"]),
            "delete.retention.ms": str(self["log.cleaner.delete.retention.ms"]),
            "min.cleanable.dirty.ratio": str(self["log.cleaner.min.cleanable.ratio"]),
            "max.message.bytes": str(self["message.max.bytes"]),
            "min.insync.replicas": str(self["min.insync.replicas"]),
            "message.timestamp.type": str(self["log.message.timestamp.type"]),
            "compression.type": str(self["compression.type"]),
            "unclean.leader.election.enable": str(bool(self["unclean.leader.election.enable"])).lower(),
        }
        if self.get("log.flush.interval.messages") is not None:
            out["flush.messages"] = str(self["log.flush.interval.messages"])
        if self.get("log.flush.interval.ms") is not None:
            out["flush.ms"] = str(self["log.flush.interval.ms"])
        return out

    def as_dict(self) -> dict[str, ConfigValue]:
        return {key: self[key] for key in BROKER_KEYS}


def _parse_dynamic(configs: Mapping[str, str]) -> dict[str, ConfigValue]:
    """Dynamic configs from the metadata log (checked by the controller and the image) to typed values."""
    out: dict[str, ConfigValue] = {}
    for key, value in configs.items():
        parser = parse_compression_name if key == "compression.type" else BROKER_KEYS[key][0]
        out[key] = parser(value)
    return out


# KELP_* variables that are not broker properties: the broker's own, the CLI's, the operator's, the
# test tiers' and the image build's. Any other KELP_* name must name a broker property.
_ENV_IGNORED = {"KELP_CONFIG", "KELP_LOG_LEVEL", "KELP_BOOTSTRAP", "KELP_HTTP", "KELP_UID", "KELP_CACHE_DIR",
                "KELP_MIN_SYSTEM_ETCD", "KELP_ETCD_VERSION"}
_ENV_IGNORED_PREFIXES = ("KELP_OPERATOR_", "KELP_E2E_", "KELP_KUBE_", "KELP_IMAGE", "KELP_TEST_")


def _env_name(key: str) -> str:
    return "KELP_" + key.upper().replace(".", "_")


def _did_you_mean(key: str, *, env: bool = False) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(BROKER_KEYS), n=1, cutoff=0.75)
    if not close:
        return ""
    return f"; did you mean {_env_name(close[0]) if env else repr(close[0])}?"


def _from_env(env: Mapping[str, str]) -> dict[str, str]:
    """`KELP_LOG_DIRS=x` -> `{"log.dirs": "x"}`; a KELP_* name that is no broker property is refused, as --set
    refuses it."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if not name.startswith("KELP_"):
            continue
        key = name[len("KELP_"):].lower().replace("_", ".")
        known = key in BROKER_KEYS or key in KAFKA_ALIASES or key in KAFKA_IGNORED_KEYS or is_provider_key(key)
        if not known and (name in _ENV_IGNORED or name.startswith(_ENV_IGNORED_PREFIXES)):
            continue  # a broker property wins over the prefixes (KELP_KUBE_NAMESPACE is kube.namespace)
        if not known:
            raise ConfigError(
                f"unknown environment variable {name}: it would set broker config '{key}', which does not exist "
                f"(KELP_* variables set broker configs: KELP_LOG_DIRS sets log.dirs){_did_you_mean(key, env=True)}"
            )
        out[key] = value
    return out
