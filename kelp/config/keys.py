"""The broker's config keys and how each value is parsed: the tables both config modules read.

Why a module of its own: `BrokerConfig` (broker.py) validates values with these parsers, and the config file
reader (file.py) needs the key names to flatten nested YAML; both import this table, it imports
neither, so neither imports the other.

`BROKER_KEYS` holds every broker property under its Kafka name with its parser and default;
`TOPIC_CONFIG_KEYS` the per-topic overrides; `TOPIC_BROKER_SYNONYMS` and `DYNAMIC_BROKER_KEYS` which
broker properties stand for topic defaults and may change while brokers run. A parser turns a value as
given (text from a file, the environment or a flag, or already typed YAML) into its typed value, or raises
ValueError saying what it expected; naming the key and the source is the caller's job.

This module must never read files, the environment or sockets.
"""

from __future__ import annotations

import re
from typing import Callable

from .listener_keys import SECURITY_KEYS

__all__ = ["BROKER_KEYS", "TOPIC_CONFIG_KEYS", "TOPIC_BROKER_SYNONYMS", "DYNAMIC_BROKER_KEYS", "DEFAULT_ENTITY",
           "REPLICATION_THROTTLE_RATE_KEYS", "throttled_replicas",
           "parse_bool", "parse_compression_name", "parse_assignors", "CONSUMER_ASSIGNORS", "ConfigValue", "Parser",
           "AUTHORIZER_CLASSES", "KELP_AUTHORIZER", "EVENT_LOOPS", "KAFKA_STANDARD_AUTHORIZER"]

ConfigValue = str | int | float | bool | list[str] | None
"""A parsed broker config value (None: unset, where the default is none)."""

Parser = Callable[[object], ConfigValue]
"""Turns a value as given (text, or already typed YAML) into its typed value; raises ValueError saying why."""


def parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true/false, got {value!r}")


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    return int(str(value).strip())


# KIP-848's server-side assignors (kelp.broker.groups.consumer.assignors implements them), and Kafka's class names
# for the same ones, which group.consumer.assignors accepts too.
CONSUMER_ASSIGNORS = ("uniform", "range")
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _migration_policy(value: object) -> str:
    """`group.consumer.migration.policy`: Kafka's values, case-insensitive — disabled, upgrade (a consumer-protocol
    member may turn a classic group into a consumer group), downgrade (the last consumer-protocol member leaving
    turns a consumer group of classic members back into a classic group) and bidirectional (both; the default)."""
    text = str(value).strip().lower()
    if text not in MIGRATION_POLICIES:
        raise ValueError(f"expected one of {', '.join(MIGRATION_POLICIES)}, got {value!r}")
    return text


MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def parse_assignors(value: object) -> list[str]:
    """`group.consumer.assignors`: a non-empty comma list (or YAML list) of known assignors, in order."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names: list[str] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        known = item if item in CONSUMER_ASSIGNORS else _ASSIGNOR_CLASSES.get(item)
        if known is None:
            raise ValueError(f"unknown assignor {item!r} (Kelp has {', '.join(CONSUMER_ASSIGNORS)})")
        if known not in names:
            names.append(known)
    if not names:
        raise ValueError(f"expected at least one assignor ({', '.join(CONSUMER_ASSIGNORS)})")
    return names


def _float(value: object) -> float:
    return float(str(value).strip())


def _str(value: object) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got {value!r}")
    return str(value)


def _dirs(value: object) -> list[str]:
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
    else:
        items = [part.strip() for part in str(value).split(",")]
    items = [i for i in items if i]
    if not items:
        raise ValueError("expected at least one directory")
    return items


def _cleanup(value: object) -> str:
    text = str(value).strip()
    parts = sorted(p.strip() for p in text.split(",") if p.strip())
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"expected 'delete', 'compact' or 'compact,delete', got {value!r}")
    return ",".join(parts)


def _ts_type(value: object) -> str:
    text = str(value).strip()
    if text not in ("CreateTime", "LogAppendTime"):
        raise ValueError(f"expected CreateTime or LogAppendTime, got {value!r}")
    return text


def _nonneg(parse: Callable[[object], int]) -> Callable[[object], int]:
    def check(value: object) -> int:
        number = parse(value)
        if number < 0:
            raise ValueError(f"must be >= 0, got {number}")
        return number

    return check


def _positive(value: object) -> int:
    number = _int(value)
    if number <= 0:
        raise ValueError(f"must be > 0, got {number}")
    return number


_LONG_MAX = 9223372036854775807  # Kafka's Long.MAX_VALUE: "no limit" for a rate
_REPLICA_PAIR = re.compile(r"[0-9]+:[0-9]+")


def throttled_replicas(value: object) -> str:
    """Kafka's ThrottledReplicaListValidator: `*`, or `partition:broker` pairs separated by commas (blank allowed)."""
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    text = _str(value).strip()
    if text == "*":
        return text
    pairs = [item.strip() for item in text.split(",")] if text else []
    bad = [item for item in pairs if not _REPLICA_PAIR.fullmatch(item)]
    if bad:
        raise ValueError(f"must be the literal '*' or a list of replicas as partition:broker pairs separated by "
                         f"commas (e.g. 0:101,1:102); {bad[0]!r} is not one")
    return ",".join(pairs)


def _retention(value: object) -> int:
    number = _int(value)
    if number < -1:
        raise ValueError(f"must be -1 (unlimited) or >= 0, got {number}")
    return number


def _minus_one_or_positive(meaning: str) -> Callable[[object], int]:
    """A positive number, or -1 meaning `meaning` (named in the error)."""
    def check(value: object) -> int:
        number = _int(value)
        if number != -1 and number <= 0:
            raise ValueError(f"must be -1 ({meaning}) or > 0, got {number}")
        return number
    return check


_unbounded_or_positive = _minus_one_or_positive("unbounded")
_os_default_or_positive = _minus_one_or_positive("the operating system's default")


def _at_least(minimum: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        number = _int(value)
        if number < minimum:
            raise ValueError(f"must be >= {minimum}, got {number}")
        return number

    return check


def _between(low: int, high: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        number = _int(value)
        if not low <= number <= high:
            raise ValueError(f"must be between {low} and {high}, got {number}")
        return number

    return check


def _transaction_version(value: object) -> int:
    level = _int(value)
    if not 0 <= level <= 2:
        raise ValueError(f"must be 0, 1 or 2 (Kafka's transaction.version feature levels), got {level}")
    return level


def _ratio(value: object) -> float:
    number = _float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return number


def _flush(value: object) -> int:
    number = _int(value)
    if number < -1 or number == 0:
        raise ValueError(f"must be -1 (left to the OS) or > 0, got {number}")
    return number


def _compression(value: object) -> str:
    """Kafka's compression.type values; a codec whose library is missing here is refused, naming it."""
    from kelp.records.compression import COMPRESSION_LIBRARIES, available_compressions

    from .log_config import COMPRESSION_TYPES

    text = str(value).strip().lower()
    if text not in COMPRESSION_TYPES:
        raise ValueError(f"expected one of {', '.join(COMPRESSION_TYPES)}, got {value!r}")
    if text in COMPRESSION_LIBRARIES and text not in available_compressions():
        raise ValueError(f"{text} needs the Python library {COMPRESSION_LIBRARIES[text]}, "
                         "which is not installed on this broker")
    return text


def parse_compression_name(value: object) -> str:
    """compression.type as the metadata log carries it: one of Kafka's values, whichever libraries this host has
    (a broker must apply every record its controller accepted)."""
    from .log_config import COMPRESSION_TYPES

    text = str(value).strip().lower()
    if text not in COMPRESSION_TYPES:
        raise ValueError(f"expected one of {', '.join(COMPRESSION_TYPES)}, got {value!r}")
    return text


def _dns_label(value: object) -> str:
    text = str(value).strip()
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", text):
        raise ValueError(f"expected a lower-case DNS label of at most 40 characters (a-z, 0-9, '-'), got {value!r}")
    return text


def _backend(value: object) -> str:
    text = str(value).strip()
    if text not in ("file", "kube"):
        raise ValueError("expected 'file' (a directory shared by the brokers of one machine) or 'kube' (Lease and "
                         f"ConfigMap objects), got {value!r}")
    return text


EVENT_LOOPS = ("asyncio", "uvloop", "auto")


def _event_loop(value: object) -> str:
    """`event.loop`: the broker process's event loop (broker/event_loop.py). Whether uvloop is installed is
    checked when the loop is made, not here: this table reads no files."""
    text = str(value).strip().lower()
    if text not in EVENT_LOOPS:
        raise ValueError(f"expected one of {', '.join(EVENT_LOOPS)}, got {value!r}")
    return text


KELP_AUTHORIZER = "kelp.broker.security.authorizer.Authorizer"
KAFKA_STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# `authorizer.class.name` values Kelp accepts: its own authorizer, and Kafka's KRaft authorizer by its class name (a
# Kafka server.properties works unchanged); both are Kelp's Authorizer with StandardAuthorizer's decisions.
AUTHORIZER_CLASSES = (KELP_AUTHORIZER, KAFKA_STANDARD_AUTHORIZER)


def _authorizer_class(value: object) -> str:
    """`authorizer.class.name`: empty (no authorization, as in Kafka) or one of AUTHORIZER_CLASSES."""
    text = _str(value).strip()
    if text and text not in AUTHORIZER_CLASSES:
        raise ValueError(f"authorizer class {text!r} is not one Kelp provides: set {KELP_AUTHORIZER} or Kafka's "
                         f"{KAFKA_STANDARD_AUTHORIZER} (the same ACL authorizer), or leave it empty for no "
                         "authorization; Kelp cannot load Java authorizer classes")
    return text


def _super_users(value: object) -> str:
    """`super.users`: principals separated by `;` (Kafka's form, `User:admin;User:broker`), each `Type:name`."""
    items = [item.strip() for item in _str(value).split(";") if item.strip()]
    bad = [item for item in items if ":" not in item]
    if bad:
        raise ValueError(f"principal {bad[0]!r} is not Type:name (e.g. User:{bad[0]}); separate principals with ';'")
    return ";".join(items)


def per_ip_limits(value: object) -> dict[str, int]:
    """`max.connections.per.ip.overrides` as address -> limit: `address:limit` pairs separated by commas (Kafka's
    form, `10.0.0.1:200,[::1]:50`), each limit a non-negative integer; ValueError naming a bad pair."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in str(value or "").split(",")):
        if not part:
            continue
        host, sep, limit = part.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{part!r} is not address:limit (e.g. 10.0.0.1:200)")
        n = _int(limit)
        if n < 0:
            raise ValueError(f"the limit of {host} must be >= 0, got {n}")
        out[host.strip("[]")] = n
    return out


def _per_ip_overrides(value: object) -> str:
    return ",".join(f"{host}:{n}" for host, n in per_ip_limits(value).items())


def _http_auth_methods(value: object) -> list[str]:
    """`http.authentication.methods`: how HTTP clients prove who they are. Empty (the default): what the Kafka
    listeners take (`basic` for PLAIN and SCRAM users, `bearer` for OAUTHBEARER, `mtls` when the HTTP listener
    asks for client certificates), nothing when no Kafka listener authenticates; `none`: nobody needs to, even
    then (an explicit opt-out, warned about at start)."""
    items = [str(v).strip().lower() for v in value] if isinstance(value, (list, tuple)) else \
        [part.strip().lower() for part in str(value).split(",")]
    items = [i for i in items if i]
    unknown = [i for i in items if i not in ("basic", "mtls", "bearer", "none")]
    if unknown:
        raise ValueError(f"unknown HTTP authentication method {unknown[0]!r}: expected a comma-separated list of "
                         "basic, mtls, bearer, or none (empty: those the Kafka listeners take)")
    if "none" in items and len(items) > 1:
        raise ValueError("'none' switches HTTP authentication off: it cannot be combined with "
                         f"{', '.join(i for i in items if i != 'none')}")
    return items


# key -> (parser, default). Defaults follow Kafka's where Kafka has one.
BROKER_KEYS: dict[str, tuple[Parser, ConfigValue]] = {
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
    # DescribeTopicPartitions (KIP-966): the most partitions one answer carries; the rest come by its cursor.
    "max.request.partition.size.limit": (_positive, 2000),
    "delete.topic.enable": (parse_bool, True),
    "message.max.bytes": (_positive, 1048588),
    "socket.request.max.bytes": (_positive, 104857600),
    # Kafka listener memory and connection bounds (docs/configuration.md). Kelp bounds the
    # request pool and the connection count by default (Kafka: unbounded); -1 lifts the pool or idle bound.
    "queued.max.request.bytes": (_unbounded_or_positive, 134217728),
    "connections.max.idle.ms": (_unbounded_or_positive, 600000),
    "max.connections": (_positive, 10000),
    "max.connections.per.ip": (_positive, 2147483647),
    "max.connections.per.ip.overrides": (_per_ip_overrides, ""),
    # KIP-612: new connections per second, broker-wide (the inter-broker listener exempt) and per listener
    # (`listener.name.<l>.max.connection.creation.rate`, as `listener.name.<l>.max.connections`).
    "max.connection.creation.rate": (_positive, 2147483647),
    # Client quotas' sensors (KIP-13): samples kept and their length; a rate is over the samples' span
    # (`client_quota_manager`).
    "quota.window.num": (_positive, 11),
    "quota.window.size.seconds": (_positive, 1),
    # Kelp's own (issue 33): connections of a SASL listener not authenticated within this are closed, and until
    # they are, their frames draw on a pool of this size of their own (not queued.max.request.bytes').
    "kelp.authentication.timeout.ms": (_unbounded_or_positive, 10000),
    "kelp.unauthenticated.queued.max.request.bytes": (_positive, 16 << 20),
    # SO_SNDBUF / SO_RCVBUF of the Kafka listeners' sockets; -1: the kernel's, autotuned. The send buffer
    # is Kafka's 100 KiB, set on a connection at its first consumer fetch: with the autotuned one (up to
    # 4 MiB) librdkafka read 1 KiB records 0.74x as fast as from Kafka, with 100 KiB faster; followers keep
    # the autotuned one, which replicates faster (docs/performance.md, "The consume gap"). The receive
    # buffer stays the kernel's (Kafka: 102400): 100 KiB cost 1 KiB produces about 8%.
    "socket.send.buffer.bytes": (_os_default_or_positive, 102400),
    "socket.receive.buffer.bytes": (_os_default_or_positive, -1),
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
    # KIP-848 consumer groups (docs/groups.md): the broker gives members their session timeout and heartbeat
    # interval (the heartbeat must be shorter: BrokerConfig checks the pair), and the assignors they may name
    "group.consumer.session.timeout.ms": (_positive, 45000),
    "group.consumer.heartbeat.interval.ms": (_positive, 5000),
    "group.consumer.max.size": (_positive, 2**31 - 1),
    "group.consumer.assignors": (parse_assignors, list(CONSUMER_ASSIGNORS)),
    "group.consumer.migration.policy": (_migration_policy, "bidirectional"),  # online classic <-> consumer
    # KIP-932 share groups (docs/share-groups.md): Kafka's names and defaults; the delivery count limit within
    # Kafka's bounds (2-10), a lock of at least a second
    "group.share.record.lock.duration.ms": (_at_least(1000), 30000),
    "group.share.delivery.count.limit": (_between(2, 10), 5),
    "group.share.partition.max.record.locks": (_between(100, 10000), 2000),
    "group.share.session.timeout.ms": (_positive, 45000),
    "group.share.heartbeat.interval.ms": (_positive, 5000),
    "group.share.max.size": (_between(1, 1000), 200),
    # the bounds of a group's own value of each (a GROUP config resource, `metadata.group_configs`): Kafka's
    "group.consumer.min.session.timeout.ms": (_positive, 45000),
    "group.consumer.max.session.timeout.ms": (_positive, 60000),
    "group.consumer.min.heartbeat.interval.ms": (_positive, 5000),
    "group.consumer.max.heartbeat.interval.ms": (_positive, 15000),
    "group.share.min.session.timeout.ms": (_positive, 45000),
    "group.share.max.session.timeout.ms": (_positive, 60000),
    "group.share.min.heartbeat.interval.ms": (_positive, 5000),
    "group.share.max.heartbeat.interval.ms": (_positive, 15000),
    "group.share.min.record.lock.duration.ms": (_between(1000, 30000), 15000),
    "group.share.max.record.lock.duration.ms": (_between(30000, 3600000), 60000),
    "group.share.min.delivery.count.limit": (_between(2, 5), 2),
    "group.share.max.delivery.count.limit": (_between(5, 25), 10),
    "share.coordinator.state.topic.num.partitions": (_positive, 50),
    "share.coordinator.state.topic.replication.factor": (_positive, 3),
    "share.coordinator.state.topic.min.isr": (_positive, 2),
    # -- the transaction coordinator (Kafka's names and defaults; docs/transactions.md)
    "transaction.state.log.num.partitions": (_positive, 50),
    "transaction.state.log.replication.factor": (_positive, 3),
    "transaction.state.log.min.isr": (_positive, 2),
    "transaction.state.log.segment.bytes": (_at_least(14), 104857600),
    "transaction.max.timeout.ms": (_positive, 900000),
    "transactional.id.expiration.ms": (_positive, 604800000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (_positive, 10000),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (_positive, 3600000),
    "transaction.partition.verification.enable": (parse_bool, True),
    # the finalized level of Kafka's transaction.version feature: 2 lets clients run transactions v2 (KIP-890)
    "transaction.version": (_transaction_version, 2),
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
    # Leadership back to preferred replicas in sync again (Kafka's names, defaults; KRaft: 1,000 elections a pass)
    "auto.leader.rebalance.enable": (parse_bool, True),
    "leader.imbalance.check.interval.seconds": (_positive, 300),
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
    # Kafka: 1 MiB. A follower that fell behind catches up in fewer, larger fetches: one acks=all RF 3
    # partition replicated 164 against 122 MB/s (medians of 3) with 4 MiB; followers rotate the partitions
    # that got records to the end of their next fetch, so a busy few cannot take the whole response.
    "replica.fetch.max.bytes": (_positive, 4194304),
    "replica.fetch.response.max.bytes": (_positive, 10485760),
    "replica.fetch.backoff.ms": (_positive, 200),
    # KIP-227: the incremental fetch sessions this broker keeps for consumers and followers (0: none, every
    # fetch answered in full; replica/fetch_sessions.py). Kafka's name and default.
    "max.incremental.fetch.session.cache.slots": (_nonneg(_int), 1000),
    "replica.socket.timeout.ms": (_positive, 30000),
    # Replication quotas (KIP-73; replica/replication_quota.py): the bytes per second replicas listed in a topic's
    # `*.replication.throttled.replicas` may move while out of the ISR, as leader and as follower (dynamic; the
    # default, Long.MAX_VALUE, throttles nothing), and the samples their rate is measured over.
    "leader.replication.throttled.rate": (_nonneg(_int), _LONG_MAX),
    "follower.replication.throttled.rate": (_nonneg(_int), _LONG_MAX),
    "replication.quota.window.num": (_positive, 11),
    "replication.quota.window.size.seconds": (_positive, 1),
    "producer.id.block.size": (_positive, 1000),
    "compression.type": (_compression, "producer"),
    # -- HTTP listener bounds (docs/http-api.md)
    "http.request.max.bytes": (_positive, 32 * 1024 * 1024),
    "http.request.max.records": (_positive, 100_000),
    "http.consumer.max.instances": (_positive, 1000),
    "consumer.instance.timeout.ms": (_positive, 300_000),
    # -- authorization (Kafka's names and defaults; docs/authorization.md): empty class = no authorization
    "authorizer.class.name": (_authorizer_class, ""),
    "super.users": (_super_users, ""),
    "allow.everyone.if.no.acl.found": (parse_bool, False),
    # -- HTTP authentication (Kelp's own: Kafka has no HTTP listener); /healthz, /readyz and /metrics stay open
    # for probes and scrapes unless switched off. Unset, HTTP authenticates as the Kafka listeners do
    # (broker/http/access/authentication.py); `none` opts out.
    "http.authentication.methods": (_http_auth_methods, []),
    # /cluster/v1 takes only the brokers' identity (broker/http/cluster/trust.py); brokers with none (no
    # inter-broker credentials or certificate over HTTP) take calls from loopback only, unless this is true.
    "http.control.plane.open": (parse_bool, False),
    # bearer: the listener whose OAUTHBEARER validator (keys, audience, issuer, claims) checks HTTP tokens;
    # empty: the first listener enabling OAUTHBEARER (broker/http/access/bearer_tokens.py)
    "http.authentication.oauthbearer.listener": (_str, ""),
    "http.health.public": (parse_bool, True),
    # unset: public only while HTTP authentication is off (resolved methods empty); with an authorizer, /metrics
    # is for super users and these principals (`;`-separated, as super.users)
    "http.metrics.public": (parse_bool, True),
    "http.metrics.principals": (_super_users, ""),
    # -- the services of the HTTP port (Kelp's own switches, named like Kafka's `*.enable` keys): off, a service's
    # routes are not mounted and its paths answer 404 naming the key (broker/http/app.py); the Schema Registry
    # then never creates `_schemas`. The admin API, health, metrics and `/cluster/v1` are always served.
    "http.rest.proxy.enable": (parse_bool, True),  # Confluent REST Proxy v2 and REST v3
    "http.schema.registry.enable": (parse_bool, True),  # Confluent's Schema Registry API
    "producer.id.expiration.ms": (_positive, 86400000),  # idempotent-producer state idle this long is dropped
    "producer.id.expiration.check.interval.ms": (_positive, 600000),
    # Kelp's own: an event-loop delay this long is logged naming the code that held the loop (loop_monitor.py)
    "kelp.loop.lag.warn.ms": (_positive, 100),
    # Kelp's own: the process's event loop, asyncio's or uvloop's (the `uvloop` extra); auto: uvloop when
    # installed. Chosen by bench/event_loop.py's figures (docs/performance.md, "Event loops").
    "event.loop": (_event_loop, "asyncio"),
}

# Per-topic overrides (Kafka topic config names) -> parser. Names the storage
# layer's LogConfig.from_kafka understands, plus the ones the core interprets.
TOPIC_CONFIG_KEYS: dict[str, Parser] = {
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
    # the replicas a broker's replication quota throttles (KIP-73): as leader, and as follower
    "leader.replication.throttled.replicas": throttled_replicas,
    "follower.replication.throttled.replicas": throttled_replicas,
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
# Besides those, the replication quotas' rates (`kafka-reassign-partitions --throttle` sets them per broker).
REPLICATION_THROTTLE_RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset(
    [k for keys in TOPIC_BROKER_SYNONYMS.values() for k in keys] + list(REPLICATION_THROTTLE_RATE_KEYS))
DEFAULT_ENTITY = -1  # the broker entity of the cluster-wide dynamic defaults (`--entity-default`)

# The listener and security keys (`listeners` above; `ssl.*`, `sasl.*`, `advertised.listeners`, ...): listener_keys.py.
BROKER_KEYS.update(SECURITY_KEYS)
