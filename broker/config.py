"""Broker configuration under Kafka's own property names.

Why: operators and users already know `log.dirs`, `num.partitions`,
`log.retention.ms`; Kelp accepts exactly those names from a config file (YAML
or Kafka's Java-properties `server.properties`, read by config_file.py),
`KELP_*` environment variables (`KELP_LOG_DIRS` -> `log.dirs`) and command-line
flags, in rising precedence (flags win). Every key and value is checked when it
is loaded, so a typo (in any of the three) fails at start with the key named and
the nearest known one suggested, not hours later.

This module must never open sockets or files other than the config file it is
given; it only turns text into a validated `BrokerConfig`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from kelp.errors import ConfigError

__all__ = ["BrokerConfig", "TOPIC_CONFIG_KEYS", "TOPIC_BROKER_SYNONYMS", "DYNAMIC_BROKER_KEYS", "DEFAULT_ENTITY",
           "validate_topic_configs", "validate_broker_configs", "parse_bool"]


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true/false, got {value!r}")


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    return int(str(value).strip())


def _float(value: Any) -> float:
    return float(str(value).strip())


def _str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got {value!r}")
    return str(value)


def _dirs(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
    else:
        items = [part.strip() for part in str(value).split(",")]
    items = [i for i in items if i]
    if not items:
        raise ValueError("expected at least one directory")
    return items


def _cleanup(value: Any) -> str:
    text = str(value).strip()
    parts = sorted(p.strip() for p in text.split(",") if p.strip())
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"expected 'delete', 'compact' or 'compact,delete', got {value!r}")
    return ",".join(parts)


def _ts_type(value: Any) -> str:
    text = str(value).strip()
    if text not in ("CreateTime", "LogAppendTime"):
        raise ValueError(f"expected CreateTime or LogAppendTime, got {value!r}")
    return text


def _nonneg(parse: Callable[[Any], int]) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        number = parse(value)
        if number < 0:
            raise ValueError(f"must be >= 0, got {number}")
        return number

    return check


def _positive(value: Any) -> int:
    number = _int(value)
    if number <= 0:
        raise ValueError(f"must be > 0, got {number}")
    return number


def _retention(value: Any) -> int:
    number = _int(value)
    if number < -1:
        raise ValueError(f"must be -1 (unlimited) or >= 0, got {number}")
    return number


def _unbounded_or_positive(value: Any) -> int:
    number = _int(value)
    if number != -1 and number <= 0:
        raise ValueError(f"must be -1 (unbounded) or > 0, got {number}")
    return number


def _at_least(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        number = _int(value)
        if number < minimum:
            raise ValueError(f"must be >= {minimum}, got {number}")
        return number

    return check


def _ratio(value: Any) -> float:
    number = _float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return number


def _flush(value: Any) -> int:
    number = _int(value)
    if number < -1 or number == 0:
        raise ValueError(f"must be -1 (left to the OS) or > 0, got {number}")
    return number


def _compression(value: Any) -> str:
    """Kafka's compression.type values; a codec whose library is missing here is refused, naming it."""
    from kelp.records import COMPRESSION_LIBRARIES, available_compressions

    from .storage.config import COMPRESSION_TYPES

    text = str(value).strip().lower()
    if text not in COMPRESSION_TYPES:
        raise ValueError(f"expected one of {', '.join(COMPRESSION_TYPES)}, got {value!r}")
    if text in COMPRESSION_LIBRARIES and text not in available_compressions():
        raise ValueError(f"{text} needs the Python library {COMPRESSION_LIBRARIES[text]}, "
                         "which is not installed on this broker")
    return text


def _compression_name(value: Any) -> str:
    """compression.type as the metadata log carries it: one of Kafka's values, whichever libraries this host has
    (a broker must apply every record its controller accepted)."""
    from .storage.config import COMPRESSION_TYPES

    text = str(value).strip().lower()
    if text not in COMPRESSION_TYPES:
        raise ValueError(f"expected one of {', '.join(COMPRESSION_TYPES)}, got {value!r}")
    return text


def _dns_label(value: Any) -> str:
    text = str(value).strip()
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", text):
        raise ValueError(f"expected a lower-case DNS label of at most 40 characters (a-z, 0-9, '-'), got {value!r}")
    return text


def _backend(value: Any) -> str:
    text = str(value).strip()
    if text not in ("file", "kube"):
        raise ValueError("expected 'file' (a directory shared by the brokers of one machine) or 'kube' (Lease and "
                         f"ConfigMap objects), got {value!r}")
    return text


# key -> (parser, default). Defaults follow Kafka's where Kafka has one.
BROKER_KEYS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "broker.id": (_nonneg(_int), 0),
    "log.dirs": (_dirs, ["/tmp/kelp-logs"]),
    "listeners": (_str, ""),
    "host": (_str, "127.0.0.1"),
    "port": (_nonneg(_int), 9092),
    "http.host": (_str, ""),
    "http.port": (_nonneg(_int), 8080),
    "advertised.host": (_str, ""),
    "advertised.port": (_nonneg(_int), 0),
    "num.partitions": (_positive, 1),
    "default.replication.factor": (_positive, 1),
    "auto.create.topics.enable": (parse_bool, True),
    "delete.topic.enable": (parse_bool, True),
    "message.max.bytes": (_positive, 1048588),
    "socket.request.max.bytes": (_positive, 104857600),
    # Kafka listener memory and connection bounds (README "Broker configuration"). Kelp bounds the
    # request pool and the connection count by default (Kafka: unbounded); -1 lifts the pool or idle bound.
    "queued.max.request.bytes": (_unbounded_or_positive, 134217728),
    "connections.max.idle.ms": (_unbounded_or_positive, 600000),
    "max.connections": (_positive, 10000),
    "max.connections.per.ip": (_positive, 2147483647),
    "log.retention.ms": (_retention, None),
    "log.retention.minutes": (_retention, None),
    "log.retention.hours": (_retention, 168),
    "log.retention.bytes": (_retention, -1),
    "log.segment.bytes": (_positive, 1073741824),
    "log.roll.ms": (_positive, None),
    "log.roll.hours": (_positive, 168),
    "log.retention.check.interval.ms": (_positive, 300000),
    "log.flush.interval.messages": (_positive, None),
    "log.flush.interval.ms": (_positive, None),
    "log.index.interval.bytes": (_positive, 4096),
    "log.cleanup.policy": (_cleanup, "delete"),
    "log.cleaner.delete.retention.ms": (_nonneg(_int), 86400000),
    "log.cleaner.min.cleanable.ratio": (_float, 0.5),
    "log.cleaner.dedupe.buffer.size": (_positive, 134217728),  # bounds the cleaner's key map (bytes)
    "log.message.timestamp.type": (_ts_type, "CreateTime"),
    "min.insync.replicas": (_positive, 1),
    "offsets.topic.num.partitions": (_positive, 50),
    "offsets.topic.replication.factor": (_positive, 3),
    "offsets.retention.minutes": (_positive, 10080),
    "offsets.commit.timeout.ms": (_positive, 5000),
    "group.initial.rebalance.delay.ms": (_nonneg(_int), 3000),
    "group.min.session.timeout.ms": (_positive, 6000),
    "group.max.session.timeout.ms": (_positive, 1800000),
    "group.max.size": (_positive, 2**31 - 1),
    "replica.lag.time.max.ms": (_positive, 30000),
    "cluster.id": (_str, "kelp-local"),
    # -- cluster (design §5): leases, metadata store, controller, replica fetching
    "cluster.name": (_dns_label, "kelp"),
    "cluster.backend": (_backend, "file"),
    "cluster.dir": (_str, ""),
    "kube.namespace": (_str, ""),
    "kube.config": (_str, ""),
    "broker.rack": (_str, ""),
    "broker.rack.node.label": (_str, ""),
    "kube.node.name": (_str, ""),
    "broker.id.from.hostname": (parse_bool, False),
    "lease.duration.ms": (_positive, 3000),
    "lease.renew.interval.ms": (_positive, 1000),
    "controller.liveness.check.interval.ms": (_positive, 250),
    # A (re)started broker acts on the metadata only once the controller has registered this process in it
    # (docs/metadata.md); it gives up and exits after this long (Kafka's name and default).
    "initial.broker.registration.timeout.ms": (_positive, 60000),
    "controlled.shutdown.enable": (parse_bool, True),
    "controlled.shutdown.timeout.ms": (_positive, 30000),  # one attempt's bound
    "controlled.shutdown.max.retries": (_nonneg(_int), 3),  # attempts after the first (Kafka's name and default)
    "controlled.shutdown.retry.backoff.ms": (_nonneg(_int), 5000),
    # Bytes of metadata-log entries after which the controller writes a snapshot and compacts (Kafka's name;
    # default 4 MiB instead of Kafka's 20 MiB: Kelp's entries are JSON and the controller keeps them in memory).
    "metadata.log.max.record.bytes.between.snapshots": (_positive, 4 * 1024 * 1024),
    "unclean.leader.election.enable": (parse_bool, False),
    "replica.fetch.wait.max.ms": (_positive, 500),
    "replica.fetch.max.bytes": (_positive, 1048576),
    "replica.fetch.response.max.bytes": (_positive, 10485760),
    "replica.fetch.backoff.ms": (_positive, 200),
    "replica.socket.timeout.ms": (_positive, 30000),
    "producer.id.block.size": (_positive, 1000),
    "compression.type": (_compression, "producer"),
    # -- HTTP listener bounds (README "HTTP API")
    "http.request.max.bytes": (_positive, 32 * 1024 * 1024),
    "http.request.max.records": (_positive, 100_000),
    "http.consumer.max.instances": (_positive, 1000),
    "consumer.instance.timeout.ms": (_positive, 300_000),
    "producer.id.expiration.ms": (_positive, 86400000),  # idempotent-producer state idle this long is dropped
    "producer.id.expiration.check.interval.ms": (_positive, 600000),
}

# Per-topic overrides (Kafka topic config names) -> parser. Names the storage
# layer's LogConfig.from_kafka understands, plus the ones the core interprets.
TOPIC_CONFIG_KEYS: dict[str, Callable[[Any], Any]] = {
    "retention.ms": _retention,
    "retention.bytes": _retention,
    "segment.bytes": _at_least(14),
    "segment.ms": _positive,
    "segment.index.bytes": _at_least(8),
    "index.interval.bytes": _nonneg(_int),
    "cleanup.policy": _cleanup,
    "delete.retention.ms": _nonneg(_int),
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _nonneg(_int),
    "max.message.bytes": _positive,
    "min.insync.replicas": _positive,
    "flush.messages": _flush,
    "flush.ms": _flush,
    "message.timestamp.type": _ts_type,
    "compression.type": _compression,
    "unclean.leader.election.enable": parse_bool,
}


# A topic config's broker-wide synonyms, most specific first (Kafka's ServerTopicConfigSynonyms): where
# its default comes from, for DescribeConfigs' synonyms. `default_topic_config` resolves them the same way.
TOPIC_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "retention.bytes": ("log.retention.bytes",),
    "segment.bytes": ("log.segment.bytes",),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "cleanup.policy": ("log.cleanup.policy",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "max.message.bytes": ("message.max.bytes",),
    "min.insync.replicas": ("min.insync.replicas",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms",),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "compression.type": ("compression.type",),
}

# The broker configs `kafka-configs --entity-type brokers` may change while the brokers run (Kafka's cluster-wide
# dynamic configs that Kelp reads at use time): the topic defaults. They live in the metadata log (`broker_config`
# records) for the cluster-wide default entity and for single brokers; every other broker config is read at start.
DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset(k for keys in TOPIC_BROKER_SYNONYMS.values() for k in keys)
DEFAULT_ENTITY = -1  # the broker entity of the cluster-wide dynamic defaults (`--entity-default`)


def validate_broker_configs(configs: Mapping[str, Any] | None, *, portable: bool = False) -> dict[str, str | None]:
    """Check a change of dynamic broker configs `{key: value, or None to delete}`; returns it normalised to strings.

    Raises ConfigError naming the key: unknown, not dynamic (Kafka's "Cannot update these configs dynamically"),
    or an invalid value, including one that would make the topic default it stands for invalid. `portable`
    (the controller and the metadata image) does not ask whether a codec's library is installed here.
    """
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
    from .storage.config import LogConfig

    out: dict[str, str | None] = {}
    for key, value in (configs or {}).items():
        if value is None:
            out[key] = None
            continue
        parser = _compression_name if portable and key == "compression.type" else BROKER_KEYS[key][0]
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


def validate_topic_configs(configs: Mapping[str, Any] | None, *, topic: str = "") -> dict[str, str]:
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
    """

    values: dict[str, Any] = field(default_factory=dict)
    explicit: set[str] = field(default_factory=set)
    # Replaced whole, never mutated: a worker thread may read them while the event loop applies a change.
    dynamic_broker: Mapping[str, Any] = field(default_factory=dict)
    dynamic_default: Mapping[str, Any] = field(default_factory=dict)

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

    def layers(self, key: str) -> list[tuple[str, Any]]:
        """Where `key`'s value can come from, most specific first, the ones that are set:
        ("dynamic_broker" | "dynamic_default" | "static" | "default", value)."""
        out: list[tuple[str, Any]] = []
        if key in self.dynamic_broker:
            out.append(("dynamic_broker", self.dynamic_broker[key]))
        if key in self.dynamic_default:
            out.append(("dynamic_default", self.dynamic_default[key]))
        if key in self.explicit:
            out.append(("static", self.values[key]))
        if BROKER_KEYS[key][1] is not None:
            out.append(("default", BROKER_KEYS[key][1]))
        return out

    def get(self, key: str, default: Any = None) -> Any:
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
        overrides: Mapping[str, Any] | None = None,
    ) -> "BrokerConfig":
        """Merge config file (YAML or Java properties) < `KELP_*` env < overrides (flags); validate each key."""
        from .config_file import read_config_file

        cfg = cls()
        if file is not None:
            cfg._merge(read_config_file(file), source=f"config file {Path(file)}")
        env = os.environ if env is None else env
        cfg._merge(_from_env(env), source="environment")
        cfg._merge(dict(overrides or {}), source="flags")
        cfg._resolve_listeners()
        cfg._resolve_broker_id(env)
        cfg._resolve_standalone()
        return cfg

    def _resolve_standalone(self) -> None:
        """A broker whose file-backed cluster directory is its own (no `cluster.dir`) is a cluster of one: its
        internal topics get one replica unless set, as Kafka's quickstart server.properties does. Any shared
        cluster keeps Kafka's default of 3, and creates them only once that many brokers are live."""
        if (self["cluster.backend"] == "file" and "cluster.dir" not in self.explicit
                and "offsets.topic.replication.factor" not in self.explicit):
            self.values["offsets.topic.replication.factor"] = 1

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

    def _merge(self, items: Mapping[str, Any], *, source: str) -> None:
        from .config_file import translate_kafka_keys

        for key, raw in translate_kafka_keys(items, known=BROKER_KEYS, source=source).items():
            spec = BROKER_KEYS.get(key)
            if spec is None:
                raise ConfigError(f"unknown broker config '{key}' (from {source}){_did_you_mean(key)}")
            try:
                self.values[key] = spec[0](raw)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid value {raw!r} for broker config '{key}' (from {source}): {exc}") from None
            self.explicit.add(key)

    def _resolve_listeners(self) -> None:
        listeners = self.get("listeners", "")
        if listeners and "port" not in self.explicit:
            first = listeners.split(",")[0].strip()
            hostport = first.split("://", 1)[-1]
            host, _, port = hostport.rpartition(":")
            try:
                self.values["port"] = int(port)
            except ValueError:
                raise ConfigError(f"invalid value {listeners!r} for broker config 'listeners': expected "
                                  "PLAINTEXT://host:port") from None
            if "host" not in self.explicit:
                self.values["host"] = host or "0.0.0.0"  # PLAINTEXT://:9092 binds every interface

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

    def as_dict(self) -> dict[str, Any]:
        return {key: self[key] for key in BROKER_KEYS}


def _parse_dynamic(configs: Mapping[str, str]) -> dict[str, Any]:
    """Dynamic configs from the metadata log (checked by the controller and the image) to typed values."""
    out: dict[str, Any] = {}
    for key, value in configs.items():
        parser = _compression_name if key == "compression.type" else BROKER_KEYS[key][0]
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
    from .config_file import KAFKA_ALIASES, KAFKA_IGNORED_KEYS

    out: dict[str, str] = {}
    for name, value in env.items():
        if not name.startswith("KELP_"):
            continue
        key = name[len("KELP_"):].lower().replace("_", ".")
        known = key in BROKER_KEYS or key in KAFKA_ALIASES or key in KAFKA_IGNORED_KEYS
        if not known and (name in _ENV_IGNORED or name.startswith(_ENV_IGNORED_PREFIXES)):
            continue  # a broker property wins over the prefixes (KELP_KUBE_NAMESPACE is kube.namespace)
        if not known:
            raise ConfigError(
                f"unknown environment variable {name}: it would set broker config '{key}', which does not exist "
                f"(KELP_* variables set broker configs: KELP_LOG_DIRS sets log.dirs){_did_you_mean(key, env=True)}"
            )
        out[key] = value
    return out
