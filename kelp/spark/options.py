"""The `kelp` data source's options: Spark's Kafka source and sink options, checked once, named in every error.

Why: a pipeline switches between `format("kafka")` and `format("kelp")` by
changing one word, so the options are Spark's own (`kafka.bootstrap.servers`,
`subscribe`/`subscribePattern`/`assign`, `startingOffsets`/`endingOffsets`,
`startingTimestamp`, `startingOffsetsByTimestamp`, `maxOffsetsPerTrigger`,
`minOffsetsPerTrigger`, `maxTriggerDelay`, `failOnDataLoss`, `includeHeaders`,
`minPartitions`, `topic`) with Spark's rules (exactly one way to choose
topics; no `latest` start or `earliest` end in a batch query; no ending
offsets in a stream). Secured clusters take the Kafka client's own security
options, as Spark's Kafka source passes them on: `kafka.security.protocol`
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `kafka.sasl.mechanism` (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) with `kafka.sasl.jaas.config`, and
`kafka.ssl.truststore.location` / `kafka.ssl.keystore.location` (PEM files:
`kafka.ssl.*.type` must be PEM), `kafka.ssl.key.password`,
`kafka.ssl.endpoint.identification.algorithm` (`kelp.kafka_client.security`
reads them where the connections are made). Where Spark would pass an option
on to the Java client or ignore it, this refuses what Kelp's source cannot
honour (serializers, consumer-group settings, Kerberos and OAUTHBEARER,
other `kafka.sasl.*`/`kafka.ssl.*` settings) and an unknown option, naming it
and listing what is accepted, instead of silently reading something else.

Spark hands options over case-insensitively (keys arrive lower-cased).
What it must never do: contact a broker (the reader resolves offsets).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from kelp.json_types import JsonObject

__all__ = ["OptionError", "ReadOptions", "WriteOptions", "OffsetSpec", "parse_read_options", "parse_write_options",
           "READ_OPTIONS", "WRITE_OPTIONS"]

EARLIEST, LATEST = -2, -1


class OptionError(ValueError):
    """An option of the `kelp` data source is missing, unknown or malformed; the message names it."""


# Spark's spelling, for messages; the keys Spark hands over are these lower-cased.
READ_OPTIONS = ("kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets",
                "endingOffsets", "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
                "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "maxOffsetsPerTrigger",
                "minOffsetsPerTrigger", "maxTriggerDelay", "failOnDataLoss", "includeHeaders", "minPartitions",
                # accepted for parity; they tune the Java consumer, which the kelp source does not use
                "groupIdPrefix", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
                "fetchOffset.retryIntervalMs", "maxRecordsPerPartition")
WRITE_OPTIONS = ("kafka.bootstrap.servers", "topic")
_SPARK_WRITE_OPTIONS = ("checkpointlocation", "path")  # set on writeStream/save, handed to every sink
# kafka.* settings the Java client would take but the kelp source cannot honour.
_REFUSED_KAFKA = {
    "key.deserializer": "the source always returns key and value as binary",
    "value.deserializer": "the source always returns key and value as binary",
    "key.serializer": "the sink writes key and value as given (string or binary)",
    "value.serializer": "the sink writes key and value as given (string or binary)",
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "the source keeps offsets in the query's checkpoint, not in a group",
    "interceptor.classes": "Java interceptors do not run in the kelp source",
    "transactional.id": "the kelp sink does not write transactionally",
    "enable.idempotence": "the kelp sink retries with at-least-once semantics, as Spark's Kafka sink does",
}
_SECURITY_PREFIXES = ("sasl.", "ssl.")
# The Kafka client security settings the kelp source reads (kelp.kafka_client.security's; tests keep both lists equal).
SECURITY_OPTIONS = (
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username", "sasl.password",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.ca.location",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.certificate.location",
    "ssl.key.location", "ssl.key.password", "ssl.endpoint.identification.algorithm",
)
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hour|hours)?\s*$")
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
                "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
                "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000}


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: "earliest", "latest", per-partition offsets, or timestamps."""

    kind: str  # earliest | latest | offsets | timestamp | timestamps
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)  # offsets / timestamps per partition
    timestamp: int | None = None  # one timestamp for every partition


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    subscribe: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: Mapping[str, tuple[int, ...]] | None = None
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    timestamp_strategy: str = "error"  # what to do when no offset has a timestamp >= the one asked: error|latest
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    client: Mapping[str, str] = field(default_factory=dict)  # the kafka.* settings, prefix dropped

    def topic_matches(self, name: str) -> bool:
        if self.subscribe is not None:
            return name in self.subscribe
        if self.pattern is not None:
            # Spark's Kafka source matches topics with an unanchored search (Regex.findFirstIn), not a full match
            return re.search(self.pattern, name) is not None
        return self.assign is not None and name in self.assign

    @property
    def timeout_s(self) -> float:
        return int(self.client.get("request.timeout.ms", "30000")) / 1000

    @property
    def read_committed(self) -> bool:
        """kafka.isolation.level=read_committed: read below the last stable offset, without aborted records."""
        return self.client.get("isolation.level") == "read_committed"

    @property
    def fetch_max_bytes(self) -> int:
        return int(self.client.get("max.partition.fetch.bytes", self.client.get("fetch.max.bytes", str(8 << 20))))


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None = None
    acks: int = -1
    compression: str = "none"
    batch_bytes: int = 512 * 1024
    timeout_s: float = 30.0
    client: Mapping[str, str] = field(default_factory=dict)


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _unknown(key: str, accepted: tuple[str, ...]) -> OptionError:
    return OptionError(f"unknown option {key!r} for the kelp data source; it takes {', '.join(accepted)}, "
                       "and kafka.* client settings")


def _client_settings(opts: Mapping[str, str]) -> dict[str, str]:
    client: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in _REFUSED_KAFKA:
            raise OptionError(f"option 'kafka.{name}' is not supported: {_REFUSED_KAFKA[name]}")
        if name.startswith(_SECURITY_PREFIXES) and name not in SECURITY_OPTIONS:
            raise OptionError(f"option 'kafka.{name}' is not supported: the kelp source takes the security options "
                              f"{', '.join('kafka.' + o for o in SECURITY_OPTIONS)}")
        client[name] = value
    _check_security(client)
    if not client.get("bootstrap.servers", "").strip():
        raise OptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")
    for name in ("request.timeout.ms", "max.partition.fetch.bytes", "fetch.max.bytes", "batch.size", "linger.ms"):
        if name in client:
            _positive_int(f"kafka.{name}", client[name])
    if client.get("isolation.level", "read_uncommitted") not in ("read_uncommitted", "read_committed"):
        raise OptionError(f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, got "
                          f"{client['isolation.level']!r}")
    return client


def _check_security(client: Mapping[str, str]) -> None:
    """The security options' values and combinations (their files are read where connections are made)."""
    protocol = client.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise OptionError(f"option 'kafka.security.protocol' must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
    mechanism = (client.get("sasl.mechanism") or client.get("sasl.mechanisms") or "").strip().upper()
    if protocol.startswith("SASL_") and mechanism not in _MECHANISMS:
        raise OptionError(f"option 'kafka.sasl.mechanism' must be one of {', '.join(_MECHANISMS)} with "
                          f"kafka.security.protocol={protocol} (Kerberos and OAUTHBEARER are not served by the kelp "
                          f"source), got {mechanism or 'nothing'!r}")
    if protocol.startswith("SASL_") and not client.get("sasl.jaas.config") and not client.get("sasl.username"):
        raise OptionError("option 'kafka.sasl.jaas.config' is required with a SASL kafka.security.protocol "
                          '(e.g. org.apache.kafka.common.security.scram.ScramLoginModule required username="..." '
                          'password="...";)')
    for kind in ("truststore", "keystore"):
        store_type = client.get(f"ssl.{kind}.type", "PEM").strip().upper()
        if store_type != "PEM":
            raise OptionError(f"option 'kafka.ssl.{kind}.type' must be PEM for the kelp source (got {store_type}); "
                              "convert the store to PEM files (openssl pkcs12 -in store.p12 -nodes)")


def _positive_int(name: str, raw: str, *, minimum: int = 1) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be at least {minimum}, got {value}")
    return value


def _bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, got {raw!r}")
    return lowered == "true"


def _duration_ms(name: str, raw: str) -> int:
    match = _DURATION.match(raw.lower())
    if not match:
        raise OptionError(f"option {name!r} must be a duration such as '30s' or '5m', got {raw!r}")
    return int(match.group(1)) * _DURATION_MS[match.group(2)]


def _json_object(name: str, raw: str) -> JsonObject:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name!r} is not valid JSON ({exc.msg} at character {exc.pos}): {raw!r}") from None
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option {name!r} must be a JSON object of topics, got {raw!r}")
    return value


def _per_partition(name: str, raw: str) -> dict[str, dict[int, int]]:
    """`{"topic": {"0": 23, "1": -1}}` → {"topic": {0: 23, 1: -1}}."""
    out: dict[str, dict[int, int]] = {}
    for topic, parts in _json_object(name, raw).items():
        if not isinstance(parts, dict) or not parts:
            raise OptionError(f"option {name!r}: topic {topic!r} must map partition numbers to values, got {parts!r}")
        for partition, value in parts.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise OptionError(f"option {name!r}: {partition!r} of topic {topic!r} "
                                  "is not a partition number") from None
            if isinstance(value, bool) or not isinstance(value, int) or p < 0:
                raise OptionError(f"option {name!r}: {topic}-{partition} must be an integer, got {value!r}")
            out.setdefault(topic, {})[p] = value
    return out


def _offset_spec(name: str, raw: str, *, allowed: tuple[str, ...], forbidden_value: int | None) -> OffsetSpec:
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        if word not in allowed:
            raise OptionError(f"option {name!r} cannot be {word!r} here; use {' or '.join(allowed)} or "
                              "per-partition JSON")
        return OffsetSpec(word)
    offsets = _per_partition(name, raw)
    for topic, parts in offsets.items():
        for p, value in parts.items():
            if value < EARLIEST:
                raise OptionError(f"option {name!r}: {topic}-{p} is {value}; use an offset >= 0, -2 "
                                  "(earliest) or -1 (latest)")
            if forbidden_value is not None and value == forbidden_value:
                word = "earliest" if value == EARLIEST else "latest"
                raise OptionError(f"option {name!r}: {topic}-{p} cannot be {value} ({word}) here")
    return OffsetSpec("offsets", offsets)


def parse_read_options(options: Mapping[str, Any], *, streaming: bool) -> ReadOptions:
    opts = _lower(options)
    accepted = {o.lower() for o in READ_OPTIONS}
    for key in opts:
        if not key.startswith("kafka.") and key not in accepted:
            raise _unknown(key, READ_OPTIONS)
    client = _client_settings(opts)

    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise OptionError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be given"
                          + (f", got {', '.join(chosen)}" if chosen else ""))
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option 'subscribe' names no topic (a comma-separated list of topics)")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {exc}") from None
    else:
        assign = {}
        for topic, parts in _json_object("assign", opts["assign"]).items():
            if not isinstance(parts, list) or not parts or not all(isinstance(p, int) and p >= 0 for p in parts):
                raise OptionError(f"option 'assign': topic {topic!r} must list partition numbers, got {parts!r}")
            assign[topic] = tuple(p for p in parts if isinstance(p, int))  # all are (checked above); narrows the type

    if streaming and ("endingoffsets" in opts or "endingtimestamp" in opts or "endingoffsetsbytimestamp" in opts):
        bad = next(k for k in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp") if k.lower() in opts)
        raise OptionError(f"option {bad!r} is for batch queries; a streaming query has no end")
    starting = _starting(opts, streaming)
    ending = _ending(opts) if not streaming else OffsetSpec("latest")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strategy!r}")

    max_per = min_per = None
    if "maxoffsetspertrigger" in opts:
        max_per = _positive_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
    if "minoffsetspertrigger" in opts:
        min_per = _positive_int("minOffsetsPerTrigger", opts["minoffsetspertrigger"])
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError(f"option 'minOffsetsPerTrigger' ({min_per}) is larger than "
                          f"'maxOffsetsPerTrigger' ({max_per})")
    if not streaming:
        for key, spelled in (("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
                             ("minoffsetspertrigger", "minOffsetsPerTrigger")):
            if key in opts:
                raise OptionError(f"option {spelled!r} is for streaming queries")
    return ReadOptions(
        bootstrap=client["bootstrap.servers"],
        subscribe=subscribe, pattern=pattern, assign=assign,
        starting=starting, ending=ending, timestamp_strategy=strategy,
        max_offsets_per_trigger=max_per, min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_duration_ms("maxTriggerDelay", opts["maxtriggerdelay"]) if "maxtriggerdelay" in opts
        else 15 * 60_000,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        min_partitions=_positive_int("minPartitions", opts["minpartitions"]) if "minpartitions" in opts else None,
        client=client,
    )


def _timestamp(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a timestamp in milliseconds since the epoch, got {raw!r}") from None
    if value < 0:
        raise OptionError(f"option {name!r} must be a timestamp in milliseconds since the epoch, got {value}")
    return value


def _by_timestamp(name: str, raw: str) -> OffsetSpec:
    stamps = _per_partition(name, raw)
    for topic, parts in stamps.items():
        for p, value in parts.items():
            if value < 0:
                raise OptionError(f"option {name!r}: {topic}-{p} must be a timestamp in milliseconds, got {value}")
    return OffsetSpec("timestamps", stamps)


def _starting(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets.
    if "startingtimestamp" in opts:
        return OffsetSpec("timestamp", timestamp=_timestamp("startingTimestamp", opts["startingtimestamp"]))
    if "startingoffsetsbytimestamp" in opts:
        return _by_timestamp("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"])
    default = "latest" if streaming else "earliest"
    raw = opts.get("startingoffsets", default)
    if streaming:
        return _offset_spec("startingOffsets", raw, allowed=("earliest", "latest"), forbidden_value=None)
    return _offset_spec("startingOffsets", raw, allowed=("earliest",), forbidden_value=LATEST)


def _ending(opts: Mapping[str, str]) -> OffsetSpec:
    if "endingtimestamp" in opts:
        return OffsetSpec("timestamp", timestamp=_timestamp("endingTimestamp", opts["endingtimestamp"]))
    if "endingoffsetsbytimestamp" in opts:
        return _by_timestamp("endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"])
    return _offset_spec("endingOffsets", opts.get("endingoffsets", "latest"), allowed=("latest",),
                        forbidden_value=EARLIEST)


def parse_write_options(options: Mapping[str, Any]) -> WriteOptions:
    opts = _lower(options)
    accepted = {o.lower() for o in WRITE_OPTIONS} | set(_SPARK_WRITE_OPTIONS)
    for key in opts:
        if not key.startswith("kafka.") and key not in accepted:
            raise _unknown(key, WRITE_OPTIONS)
    client = _client_settings(opts)
    acks_raw = client.get("acks", "all").strip().lower()
    acks = {"all": -1, "-1": -1, "1": 1}.get(acks_raw)
    if acks is None:
        raise OptionError(f"option 'kafka.acks' must be all, -1 or 1 for the kelp sink, got {acks_raw!r}")
    compression = client.get("compression.type", "none").strip().lower()
    from kelp.records.compression import available_compressions

    if compression not in available_compressions():
        raise OptionError(f"option 'kafka.compression.type' must be one of {', '.join(available_compressions())}, "
                          f"got {compression!r}")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    return WriteOptions(
        bootstrap=client["bootstrap.servers"], topic=topic.strip() if topic else None, acks=acks,
        compression=compression,
        batch_bytes=int(client.get("batch.size", str(512 * 1024))),
        timeout_s=int(client.get("request.timeout.ms", "30000")) / 1000,
        client=client,
    )
