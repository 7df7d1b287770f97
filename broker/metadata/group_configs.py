"""Group configs (Kafka's GroupConfig, KIP-848 and KIP-932): the settings one group overrides, and Kafka's rules.

Why: `kafka-configs --entity-type groups --entity-name G --alter --add-config share.auto.offset.reset=earliest`
sends IncrementalAlterConfigs on a GROUP resource (type 32). The controller records a group's overrides in the
metadata log (`group_config` records, as Kafka's ConfigRecord of resource type GROUP), so every broker holds
them in its image (`MetadataImage.group_configs`) and they outlive any coordinator: the group coordinator
(session timeouts, heartbeat intervals) and each share-partition's leader (lock duration, delivery count limit,
where a new share-partition starts) read them where they act. This module holds Kafka's rules:

- the keys served (`GROUP_KEYS`), each with its broker-level default (the synonym) and the broker configs that
  bound it. Kafka's other group keys (`share.isolation.level`, the streams and assignor ones) are not served:
  naming one is INVALID_CONFIG, as an unknown key is.
- `checked_group_configs` (portable, what the controller and a replay check): a known key, a value of its type
  at or above its floor, else INVALID_CONFIG naming the key (Kafka's ConfigDef messages).
- `check_bounds` (with the broker's config, where the request arrives): each value within the broker bounds
  (Kafka's "<key> must be in the range <min> to <max> inclusive."), a session timeout above the heartbeat
  interval (the other one the group's, else the broker's).
- `effective`: what a group uses: its value of a key, else the broker's, clamped to the bounds (Kafka's
  GroupConfig.evaluate: bounds may have moved since the value was set).

Pure: no I/O, no state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kelp.config.broker import BrokerConfig
from kelp.config.entries import SOURCE_DEFAULT, Entry, Synonym, broker_synonyms
from kelp.errors import ConfigError, InvalidRequestError

from .records import GroupConfigRecord

__all__ = ["GROUP_KEYS", "GroupConfigTable", "ResetStrategy", "apply_group_config", "check_bounds",
           "checked_group", "checked_group_configs", "config_change", "effective", "group_config_record",
           "group_entries", "parse_reset", "reset_strategy", "SOURCE_GROUP"]

GroupConfigTable = Mapping[str, Mapping[str, str]]  # group id -> {key: value}; no empty group

AUTO_OFFSET_RESET = "share.auto.offset.reset"


@dataclass(frozen=True)
class _Key:
    floor: int  # ConfigDef's atLeast
    synonym: str  # the broker config a group without its own value uses
    low: str  # the broker configs bounding a group's value
    high: str


GROUP_KEYS: dict[str, _Key | None] = {  # None: share.auto.offset.reset (a strategy, default latest)
    "consumer.session.timeout.ms": _Key(1, "group.consumer.session.timeout.ms",
                                        "group.consumer.min.session.timeout.ms",
                                        "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": _Key(1, "group.consumer.heartbeat.interval.ms",
                                           "group.consumer.min.heartbeat.interval.ms",
                                           "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": _Key(1, "group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
                                     "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": _Key(1, "group.share.heartbeat.interval.ms",
                                        "group.share.min.heartbeat.interval.ms",
                                        "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": _Key(1000, "group.share.record.lock.duration.ms",
                                          "group.share.min.record.lock.duration.ms",
                                          "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": _Key(2, "group.share.delivery.count.limit", "group.share.min.delivery.count.limit",
                                       "group.share.max.delivery.count.limit"),
    AUTO_OFFSET_RESET: None,
}
_PAIRS = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
          ("share.session.timeout.ms", "share.heartbeat.interval.ms"))
_INT_MAX = 2**31 - 1


class _Settings(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True)
class ResetStrategy:
    """share.auto.offset.reset: `earliest`, `latest`, or `by_duration` with its duration in ms."""

    kind: str
    duration_ms: int = 0


# java.time.Duration.parse's ISO-8601 form (days, hours, minutes, seconds with up to 9 decimals), case-insensitive
_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
                       r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE)


def _reset_refusal(value: str) -> ConfigError:
    return ConfigError(f"Invalid value `{value}` for configuration {AUTO_OFFSET_RESET}. The value must be either "
                       "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")


def parse_reset(value: str) -> ResetStrategy:
    """A share.auto.offset.reset value (Kafka's ShareGroupAutoOffsetResetStrategy), else ConfigError."""
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return ResetStrategy(text.lower())
    if not text.lower().startswith("by_duration:"):
        raise _reset_refusal(value)
    spec = text[len("by_duration:"):]
    m = _DURATION.fullmatch(spec)
    if m is None or spec.upper().endswith("T") or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise _reset_refusal(value)
    days, hours, minutes = (int(m.group(i) or 0) for i in (2, 4, 5))
    seconds = m.group(6) or "0"
    fraction = int((m.group(7) or "").ljust(9, "0"))
    nanos = (days * 86400 + hours * 3600 + minutes * 60 + int(seconds)) * 10**9 \
        + (-fraction if seconds.startswith("-") else fraction)
    sign = -1 if m.group(1) == "-" else 1
    if sign * nanos < 0:
        raise ConfigError(f"Invalid value `{value}` for configuration {AUTO_OFFSET_RESET}: Negative duration is "
                          "not supported.")
    return ResetStrategy("by_duration", sign * nanos // 10**6)


def checked_group(group: object) -> str:
    if not isinstance(group, str) or not group:
        raise InvalidRequestError("Group name must not be empty")
    return group


def _checked_value(key: str, value: str) -> str:
    spec = GROUP_KEYS[key]
    if spec is None:
        parse_reset(value)
        return value.strip()
    text = value.strip()
    if not re.fullmatch(r"[-+]?[0-9]+", text) or not -2**31 <= int(text) <= _INT_MAX:
        raise ConfigError(f"Invalid value {value} for configuration {key}: Not a number of type INT")
    if int(text) < spec.floor:
        raise ConfigError(f"Invalid value {int(text)} for configuration {key}: Value must be at least {spec.floor}")
    return str(int(text))


def checked_group_configs(configs: Mapping[str, object]) -> dict[str, str | None]:
    """A group's changes, names and values checked (None: delete the key), else ConfigError naming the key."""
    out: dict[str, str | None] = {}
    for key, value in configs.items():
        if not isinstance(key, str) or key not in GROUP_KEYS:
            raise ConfigError(f"Unknown group config name: {str(key)[:200]}")
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"the value of group config {key} must be a string")
        out[key] = None if value is None else _checked_value(key, value)
    return out


def check_bounds(configs: Mapping[str, str], settings: _Settings) -> None:
    """Kafka's GroupConfig.validateValues on a group's configs after a change (ConfigError naming the key)."""
    for key, value in configs.items():
        spec = GROUP_KEYS.get(key)
        if spec is None:
            continue
        low, high = int(settings[spec.low]), int(settings[spec.high])
        if not low <= int(value) <= high:
            raise ConfigError(f"{key} must be in the range {low} to {high} inclusive.")
    for session, heartbeat in _PAIRS:
        if session in configs or heartbeat in configs:
            s = int(configs.get(session) or settings[_spec(session).synonym])
            h = int(configs.get(heartbeat) or settings[_spec(heartbeat).synonym])
            if s <= h:
                raise ConfigError(f"{session} must be greater than {heartbeat}")


def _spec(key: str) -> _Key:
    spec = GROUP_KEYS[key]
    assert spec is not None
    return spec


def effective(configs: Mapping[str, str], key: str, settings: _Settings) -> int:
    """The value a group uses of an integer key: its own clamped to the broker bounds, else the broker's."""
    spec = _spec(key)
    own = configs.get(key)
    if own is None:
        return int(settings[spec.synonym])
    return min(max(int(own), int(settings[spec.low])), int(settings[spec.high]))


def reset_strategy(configs: Mapping[str, str]) -> ResetStrategy:
    """The group's share.auto.offset.reset (Kafka's default: latest)."""
    value = configs.get(AUTO_OFFSET_RESET)
    return parse_reset(value) if value is not None else ResetStrategy("latest")


def config_change(current: Mapping[str, str], clean: Mapping[str, str | None], *,
                  replace_all: bool = False) -> tuple[dict[str, str], dict[str, str | None]]:
    """An entity's configs (a group's, a broker's) after setting (a value) or deleting (None) `clean`'s keys,
    `replace_all` dropping the keys not given (AlterConfigs); and the change: each key that differs, None for one
    deleted (what a metadata record carries)."""
    new = {} if replace_all else dict(current)
    for key, value in clean.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
    return new, {k: new.get(k) for k in sorted(set(current) | set(new)) if current.get(k) != new.get(k)}


def group_config_record(group: str, configs: Mapping[str, str | None]) -> GroupConfigRecord:
    return {"type": "group_config", "group": group, "configs": dict(configs)}


def apply_group_config(table: dict[str, dict[str, str]], rec: Mapping[str, object]) -> None:
    """One `group_config` record applied to `table` (ConfigError / InvalidRequestError when it breaks a rule)."""
    group = checked_group(rec["group"])
    change = rec["configs"]
    if not isinstance(change, Mapping):
        raise ConfigError(f"group configs of {group} must map names to values or null")
    values, _ = config_change(table.get(group, {}), checked_group_configs(change))
    if values:
        table[group] = values
    else:
        table.pop(group, None)


SOURCE_GROUP = 8  # Kafka's ConfigSource.GROUP_CONFIG


def group_entries(config: BrokerConfig, configs: Mapping[str, str]) -> list[Entry]:
    """DescribeConfigs of a GROUP resource (Kafka's ConfigHelper): every served key with the group's value
    (source GROUP_CONFIG) or the broker's (DEFAULT_CONFIG), synonyms the group's then the broker's layers."""
    out: list[Entry] = []
    for key, spec in sorted(GROUP_KEYS.items()):
        own = configs.get(key)
        below = broker_synonyms(config, (spec.synonym,)) if spec is not None else []
        value = own if own is not None else (str(config[spec.synonym]) if spec is not None else "latest")
        synonyms: list[Synonym] = ([(key, own, SOURCE_GROUP)] if own is not None else []) + below
        out.append((key, value, False, SOURCE_GROUP if own is not None else SOURCE_DEFAULT, synonyms))
    return out
