"""The cluster metadata as an ordered log of small records, and the image a broker replays it into.

Why: a broker must never act on metadata that is older than what it already
applied, nor infer anything from absence. KRaft solves this with an ordered
metadata log (`TopicRecord`, `PartitionChangeRecord`, `RemoveTopicRecord`)
that every broker replays in offset order into an immutable `MetadataImage`.
Kelp does the same: the controller appends *entries* — one decision each,
`{"offset", "epoch", "records"}` — to the metadata log (`metadata_log`),
and brokers apply them strictly in offset order (`apply_entry`), ignoring
anything at or below the offset they have. The records and their shapes
are `records`' (its builders are named here too, where callers
have always found them).

Invariants checked on every apply (a violation raises `MetadataCorrupt`,
which stops whoever reads the log instead of applying it):
- offsets are contiguous; an entry's epoch is never below the image's;
- an entry extends this image's history: its `prev` is the digest of the
  last entry applied (`entry_digest`, a chain as Raft's log matching
  property gives), else `MetadataDiverged` — the store lost its tail, or was
  restored from an older copy, and another history was written on top;
- a `controller` record's epoch is strictly above every earlier epoch;
- a partition's `(leader_epoch, partition_epoch)` never goes backwards, and a
  record names the topic id it was decided for;
- a partition's leader is one of its replicas (or -1), its ISR a subset;
- a `broker_config` record names only dynamic broker configs (`DYNAMIC_BROKER_KEYS`), with valid values;
- a `scram_credential` record is a whole, valid credential, a `remove_scram_credential` names one the image
  holds (`scram_credentials`).
- an `acl` record holds a binding Kafka would store (`validate_acl_binding`) under a new id, and no binding
  twice; a `remove_acl` record names an id the image holds.
- a `client_quota` record names a valid entity, a key of its kind and a valid value (`client_quotas`).
- a `group_config` record names a group, and keys and values Kafka's GroupConfig takes (`group_configs`).

A snapshot is an image at an offset (`snapshot_to_json`). It carries the ids
of removed topics (`removed`, the newest `MAX_REMOVED`), so a broker that
loads a snapshot past a deletion it missed can tell a topic that was
deleted from one it simply does not know (`diff_images`).

Pure: no I/O, no asyncio; values are immutable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from kelp.config.broker import validate_broker_configs
from kelp.config.keys import DEFAULT_ENTITY
from kelp.errors import ConfigError, InvalidRequestError
from kelp.security.acl import AclBinding, InvalidAclError, validate_acl_binding
from kelp.security.acl_json import binding_from_json, binding_to_json

from .client_quotas import Entity, InvalidQuota, QuotaTable, apply_quota_record, quota_records, table_from_records
from .group_configs import GroupConfigTable, apply_group_config
from .model import NO_LEADER, PartitionState, TopicState, topic_from_json
from .records import (
    MetadataEntry,
    MetadataRecord,
    MetadataSnapshot,
    acl_record,
    broker_config_record,
    broker_record,
    controller_record,
    partition_record,
    producer_ids_record,
    remove_acl_record,
    remove_topic_record,
    topic_record,
)
from .scram_credentials import (
    InvalidScramRecord,
    ScramTable,
    apply_scram_record,
    remove_scram_record,
    scram_records,
    table_from,
)

__all__ = [
    "MetadataImage",
    "MetadataDelta",
    "MetadataCorrupt",
    "MetadataDiverged",
    "MetadataGap",
    "entry_digest",
    "replay",
    "apply_entry",
    "apply_records",
    "diff_images",
    "snapshot_to_json",
    "image_from_snapshot",
    "image_from_log",
    "controller_record",
    "topic_record",
    "partition_record",
    "remove_topic_record",
    "producer_ids_record",
    "broker_record",
    "broker_config_record",
    "acl_record",
    "remove_acl_record",
    "BrokerRegistration",
    "check_partition_state",
    "MAX_REMOVED",
    "MAX_RUNS",
    "Position",
    "history_covers",
]

MAX_REMOVED = 10_000  # tombstones of removed topics a snapshot keeps
MAX_RUNS = 10_000  # controller runs an image keeps (`MetadataImage.runs`)
# Where a broker's metadata is, as its lease reports it: (applied offset, digest of that entry, the controller run
# that entry belongs to — (offset of the run's controller entry, its digest) — or None when unknown).
Position = tuple[int, str, "tuple[int, str] | None"]


class MetadataCorrupt(Exception):
    """The metadata log breaks one of its invariants: a bug or a damaged store. Never applied."""


class MetadataDiverged(MetadataCorrupt):
    """An entry does not extend the image's history: another history was written at or after these offsets (a store
    that lost its tail, or was restored from an older copy, then written on). Never applied; said loudly."""


class MetadataGap(Exception):
    """An entry does not follow the image's offset: the entries between are missing."""


# -- checks ----------------------------------------------------------------------
def _checked_broker_configs(broker: object, configs: object, *, where: str) -> tuple[int, dict[str, str | None]]:
    """A broker_config record's entity and configs, or MetadataCorrupt naming what is wrong."""
    if isinstance(broker, bool) or not isinstance(broker, int) or broker < DEFAULT_ENTITY:
        raise MetadataCorrupt(f"{where}: broker config entity {broker!r} is not a broker id or -1 (the default)")
    if not isinstance(configs, Mapping) or not all(isinstance(v, (str, type(None))) for v in configs.values()):
        raise MetadataCorrupt(f"{where}: broker configs of entity {broker} must map names to strings or null")
    try:
        return broker, validate_broker_configs(configs, portable=True)
    except ConfigError as exc:
        raise MetadataCorrupt(f"{where}: broker config record for entity {broker}: {exc}") from None


def _checked_acl(acl_id: object, doc: object, existing: Mapping[str, AclBinding], *, where: str
                 ) -> tuple[str, AclBinding]:
    """An acl record's (or snapshot item's) id and binding, or MetadataCorrupt naming what is wrong."""
    if not isinstance(acl_id, str) or not acl_id:
        raise MetadataCorrupt(f"{where}: ACL id {acl_id!r} is not a non-empty string")
    if acl_id in existing:
        raise MetadataCorrupt(f"{where}: ACL id {acl_id} is already in the image")
    try:
        binding = binding_from_json(doc)
        validate_acl_binding(binding)
    except InvalidAclError as exc:
        raise MetadataCorrupt(f"{where}: ACL {acl_id}: {exc}") from None
    if binding in existing.values():
        raise MetadataCorrupt(f"{where}: ACL {acl_id} repeats {binding}, which the image holds already")
    return acl_id, binding


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """The newest process seen for a broker id (KRaft's broker registration): a new one means a restart.
    `decommissioned` outlives the processes: a broker id leaving the cluster gets no new replica or leader."""

    incarnation: str
    shutting_down: bool = False
    decommissioned: bool = False


def check_partition_state(name: str, p: int, state: PartitionState) -> None:
    """A partition state the controller may write: leader among the replicas, ISR a subset, no duplicates."""
    where = f"{name}-{p}"
    if len(set(state.replicas)) != len(state.replicas) or not state.replicas:
        raise MetadataCorrupt(f"{where}: replica list {list(state.replicas)} is empty or names a broker twice")
    if state.leader != NO_LEADER and state.leader not in state.replicas:
        raise MetadataCorrupt(f"{where}: leader {state.leader} is not one of the replicas {list(state.replicas)}")
    if any(r not in state.replicas for r in state.isr):
        raise MetadataCorrupt(f"{where}: ISR {list(state.isr)} is not a subset of the replicas {list(state.replicas)}")
    if state.leader != NO_LEADER and state.leader not in state.isr:
        raise MetadataCorrupt(f"{where}: leader {state.leader} is not in the ISR {list(state.isr)}")


# -- the image ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster metadata as of `offset` (-1: nothing applied yet)."""

    offset: int = -1
    epoch: int = -1                      # the newest controller epoch in the log
    controller_id: int = -1
    topics: Mapping[str, TopicState] = field(default_factory=dict)
    next_producer_id: int = 0
    removed: Mapping[str, str] = field(default_factory=dict)  # topic id -> name, newest last
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    # Dynamic broker configs by entity (-1: the cluster-wide default), each {key: value}; no empty entity.
    broker_configs: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    # SCRAM credentials, (user, mechanism) -> credential: what every broker's SCRAM server authenticates against.
    scram_credentials: ScramTable = field(default_factory=dict)
    acls: Mapping[str, AclBinding] = field(default_factory=dict)  # ACL id -> binding, in creation order
    # Client quotas (KIP-546) by entity (`client_quotas.Entity`), each {key: value}; no empty entity.
    client_quotas: QuotaTable = field(default_factory=dict)
    # Group configs (Kafka's GROUP config resources) by group id, each {key: value}; no empty group.
    group_configs: GroupConfigTable = field(default_factory=dict)
    # The digest of the entry at `offset` (`entry_digest`; "" when not known: an empty log, or a snapshot or entry
    # written before the digest chain). The next entry's `prev` must equal it.
    digest: str = ""
    # Where each controller incarnation's entries start, oldest first (the newest MAX_RUNS): (offset of its
    # `controller` entry, that entry's digest). One incarnation writes each offset at most once, so a broker whose
    # last run is in a history with no later run starting at or below its offset holds that history's prefix.
    runs: tuple[tuple[int, str], ...] = ()

    def topic(self, name: str) -> TopicState | None:
        return self.topics.get(name)


@dataclass(slots=True)
class MetadataDelta:
    """What one entry (or one snapshot load) changed, for whoever acts on it (topics, replicas)."""

    changed: dict[str, TopicState] = field(default_factory=dict)   # created or updated, newest state
    removed: dict[str, TopicState] = field(default_factory=dict)   # deleted by a remove_topic record
    vanished: list[str] = field(default_factory=list)              # gone from a snapshot, no tombstone: never deleted
    controller_changed: bool = False
    # Every entity's dynamic broker configs after the change, when they changed (None: unchanged).
    broker_configs: Mapping[int, Mapping[str, str]] | None = None
    # ACLs created and deleted (by id); an id is never reused, so one created and deleted within the delta is neither.
    acls_added: dict[str, AclBinding] = field(default_factory=dict)
    acls_removed: dict[str, AclBinding] = field(default_factory=dict)

    def merge(self, other: "MetadataDelta") -> None:
        for name, state in other.removed.items():
            self.changed.pop(name, None)
            self.removed.setdefault(name, state)
        self.changed.update(other.changed)
        self.vanished.extend(other.vanished)
        self.controller_changed |= other.controller_changed
        if other.broker_configs is not None:
            self.broker_configs = other.broker_configs
        for acl_id, binding in other.acls_removed.items():
            if self.acls_added.pop(acl_id, None) is None:
                self.acls_removed[acl_id] = binding
        self.acls_added.update(other.acls_added)

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed or self.vanished or self.controller_changed
                    or self.broker_configs is not None or self.acls_added or self.acls_removed)


def _check_partition_step(name: str, p: int, old: PartitionState, new: PartitionState) -> None:
    if (new.leader_epoch, new.partition_epoch) < (old.leader_epoch, old.partition_epoch):
        raise MetadataCorrupt(
            f"{name}-{p}: leader/partition epoch {new.leader_epoch}/{new.partition_epoch} is older than "
            f"{old.leader_epoch}/{old.partition_epoch} already applied")


def entry_digest(entry: MetadataEntry) -> str:
    """The digest of an entry as stored (its `prev` included, so it commits to every entry before it): SHA-256 of
    its canonical JSON, 128 bits in hex. The same on every broker: the JSON is sorted and compact."""
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def apply_records(image: MetadataImage, records: Iterable[MetadataRecord], *, epoch: int,
                  offset: int) -> tuple[MetadataImage, MetadataDelta]:
    """Apply the records of one entry (already checked for offset and epoch order)."""
    topics = dict(image.topics)
    removed = dict(image.removed)
    brokers = dict(image.brokers)
    broker_configs = image.broker_configs
    scram = dict(image.scram_credentials)
    acls: Mapping[str, AclBinding] = image.acls
    own_acls: dict[str, AclBinding] | None = None
    quotas: QuotaTable = image.client_quotas
    own_quotas: dict[Entity, dict[str, float]] | None = None
    group_configs: GroupConfigTable = image.group_configs
    own_group_configs: dict[str, dict[str, str]] | None = None
    delta = MetadataDelta()
    controller_id, new_epoch, next_pid = image.controller_id, max(image.epoch, epoch), image.next_producer_id
    for rec in records:
        kind = rec.get("type")
        try:  # each branch converts what it reads: a decoded record only claims its shape
            if rec["type"] == "controller":
                e = int(rec["epoch"])
                if e <= image.epoch or e != epoch:
                    raise MetadataCorrupt(f"offset {offset}: controller epoch {e} does not follow epoch {image.epoch}")
                controller_id, new_epoch = int(rec["broker_id"]), e
                delta.controller_changed = True
            elif rec["type"] == "topic":
                state = topic_from_json(rec["topic"])
                old = topics.get(state.name)
                if old is not None and old.topic_id != state.topic_id:
                    raise MetadataCorrupt(f"offset {offset}: topic '{state.name}' id {state.topic_id} replaces id "
                                          f"{old.topic_id} without a remove_topic record")
                if old is not None and state.partitions < old.partitions:
                    raise MetadataCorrupt(f"offset {offset}: topic '{state.name}' shrinks from {old.partitions} "
                                          f"to {state.partitions} partitions")
                for p, s in enumerate(state.partition_states):
                    check_partition_state(state.name, p, s)
                    if old is not None and p < old.partitions:
                        _check_partition_step(state.name, p, old.partition_states[p], s)
                topics[state.name] = state
                delta.changed[state.name] = state
            elif rec["type"] == "partition":
                name, p = str(rec["topic"]), int(rec["partition"])
                old_topic = topics.get(name)
                if old_topic is None or old_topic.topic_id != rec["topic_id"]:
                    raise MetadataCorrupt(f"offset {offset}: partition record for {name}-{p} (topic id "
                                          f"{rec['topic_id']}) but that topic is not in the image")
                if not 0 <= p < old_topic.partitions:
                    raise MetadataCorrupt(f"offset {offset}: {name} has no partition {p}")
                partition_state = PartitionState.from_json(rec["state"])
                check_partition_state(name, p, partition_state)
                _check_partition_step(name, p, old_topic.partition_states[p], partition_state)
                new_topic = old_topic.with_partition(p, partition_state)
                topics[name] = new_topic
                delta.changed[name] = new_topic
            elif rec["type"] == "remove_topic":
                name = str(rec["topic"])
                old_topic = topics.get(name)
                if old_topic is None or old_topic.topic_id != rec["topic_id"]:
                    raise MetadataCorrupt(f"offset {offset}: remove_topic for '{name}' (id {rec['topic_id']}) "
                                          "but that topic is not in the image")
                del topics[name]
                removed.pop(old_topic.topic_id, None)
                removed[old_topic.topic_id] = name
                while len(removed) > MAX_REMOVED:
                    del removed[next(iter(removed))]
                delta.changed.pop(name, None)
                delta.removed[name] = old_topic
            elif rec["type"] == "broker":
                broker_id = int(rec["id"])
                before = brokers.get(broker_id)
                decommissioned = rec.get("decommissioned")
                if decommissioned is None:  # a registration: the decommission mark stays as it was
                    decommissioned = before is not None and before.decommissioned
                brokers[broker_id] = BrokerRegistration(str(rec["incarnation"]), bool(rec.get("shutting_down")),
                                                        bool(decommissioned))
            elif rec["type"] == "broker_config":
                entity, change = _checked_broker_configs(rec["broker"], rec["configs"], where=f"offset {offset}")
                configs = dict(broker_configs.get(entity, {}))
                for key, value in change.items():
                    if value is None:
                        configs.pop(key, None)
                    else:
                        configs[key] = value
                broker_configs = {e: c for e, c in broker_configs.items() if e != entity}
                if configs:
                    broker_configs[entity] = configs
                delta.broker_configs = broker_configs
            elif rec["type"] == "scram_credential":
                apply_scram_record(scram, rec)
            elif rec["type"] == "remove_scram_credential":
                remove_scram_record(scram, rec)
            elif rec["type"] == "acl":
                acl_id, binding = _checked_acl(rec["id"], rec["acl"], acls, where=f"offset {offset}")
                if own_acls is None:  # copied once per entry, and only by an entry that changes ACLs
                    own_acls = dict(image.acls)
                    acls = own_acls
                own_acls[acl_id] = binding
                delta.acls_added[acl_id] = binding
            elif rec["type"] == "remove_acl":
                acl_id = str(rec["id"])
                if acl_id not in acls:
                    raise MetadataCorrupt(f"offset {offset}: remove_acl for ACL {acl_id}, which is not in the image")
                if own_acls is None:
                    own_acls = dict(image.acls)
                    acls = own_acls
                del own_acls[acl_id]
                if delta.acls_added.pop(acl_id, None) is None:
                    delta.acls_removed[acl_id] = image.acls[acl_id]
            elif rec["type"] == "client_quota":
                if own_quotas is None:  # copied once per entry (a record replaces an entity's values, never edits)
                    own_quotas = {e: dict(v) for e, v in image.client_quotas.items()}
                    quotas = own_quotas
                apply_quota_record(own_quotas, rec)
            elif rec["type"] == "group_config":
                if own_group_configs is None:  # copied once per entry, as client quotas
                    own_group_configs = {g: dict(v) for g, v in image.group_configs.items()}
                    group_configs = own_group_configs
                apply_group_config(own_group_configs, rec)
            elif rec["type"] == "producer_ids":
                nxt = int(rec["next"])
                if nxt < next_pid:
                    raise MetadataCorrupt(f"offset {offset}: producer id counter goes back from {next_pid} to {nxt}")
                next_pid = nxt
            else:
                raise MetadataCorrupt(f"offset {offset}: unknown record type {kind!r}")
        except (InvalidScramRecord, InvalidQuota, ConfigError, InvalidRequestError) as exc:
            raise MetadataCorrupt(f"offset {offset}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataCorrupt(f"offset {offset}: malformed {kind!r} record ({exc!r})") from None
    return (MetadataImage(offset=offset, epoch=new_epoch, controller_id=controller_id, topics=topics,
                          next_producer_id=next_pid, removed=removed, brokers=brokers,
                          broker_configs=broker_configs, scram_credentials=scram, acls=acls,
                          client_quotas=quotas, group_configs=group_configs, runs=image.runs), delta)


def apply_entry(image: MetadataImage, entry: MetadataEntry) -> tuple[MetadataImage, MetadataDelta]:
    """The image after one log entry. Raises MetadataGap if it does not follow, MetadataCorrupt if it breaks a rule."""
    try:
        offset, epoch, records = int(entry["offset"]), int(entry["epoch"]), entry["records"]
    except (KeyError, TypeError, ValueError) as exc:
        raise MetadataCorrupt(f"malformed metadata entry ({exc!r})") from None
    if offset != image.offset + 1:
        raise MetadataGap(f"metadata entry at offset {offset} does not follow offset {image.offset}")
    if epoch < image.epoch:
        raise MetadataCorrupt(f"metadata entry at offset {offset} has controller epoch {epoch}, "
                              f"below epoch {image.epoch} already applied")
    if not isinstance(records, list):
        raise MetadataCorrupt(f"metadata entry at offset {offset}: records must be a list")
    prev = entry.get("prev")
    if prev is not None and image.digest and prev != image.digest:
        raise MetadataDiverged(
            f"metadata entry at offset {offset} (controller epoch {epoch}) extends a history whose entry at offset "
            f"{image.offset} has digest {prev}, but the entry applied at that offset has digest {image.digest}: the "
            "metadata store lost entries this broker applied (a restored or truncated store) and another history "
            "was written on top; refused")
    new, delta = apply_records(image, records, epoch=epoch, offset=offset)
    digest = entry_digest(entry)
    if any(isinstance(r, dict) and r.get("type") == "controller" for r in records):
        return replace(new, digest=digest, runs=(*image.runs, (offset, digest))[-MAX_RUNS:]), delta
    return replace(new, digest=digest), delta


def history_covers(runs: Sequence[tuple[int, str]], run: tuple[int, str] | None, offset: int) -> bool | None:
    """Whether a history whose controller runs are `runs` holds, at `offset`, the entry another holder wrote in its
    run `run` (the run its entry at `offset` belongs to): True when `run` is one of `runs` and no later run starts
    at or below `offset`; False when it holds something else there; None when it cannot tell (either side has no
    runs — written before them — or `run` is older than the runs kept)."""
    if not runs or run is None:
        return None
    if run not in runs:
        return None if run[0] < runs[0][0] else False
    i = runs.index(run)
    return i + 1 == len(runs) or runs[i + 1][0] > offset


# -- snapshots -------------------------------------------------------------------
def snapshot_to_json(image: MetadataImage) -> MetadataSnapshot:
    return {
        "offset": image.offset, "epoch": image.epoch, "controller_id": image.controller_id,
        "next_producer_id": image.next_producer_id,
        "topics": [image.topics[n].to_json() for n in sorted(image.topics)],
        "removed": [[tid, name] for tid, name in image.removed.items()],
        "brokers": [broker_record(b, r.incarnation, shutting_down=r.shutting_down,
                                  decommissioned=True if r.decommissioned else None)
                    for b, r in sorted(image.brokers.items())],
        "broker_configs": [{"broker": b, "configs": dict(sorted(c.items()))}
                           for b, c in sorted(image.broker_configs.items())],
        "scram_credentials": scram_records(image.scram_credentials),
        "acls": [{"id": acl_id, "acl": binding_to_json(b)} for acl_id, b in image.acls.items()],
        "client_quotas": quota_records(image.client_quotas),
        "group_configs": [{"group": g, "configs": dict(sorted(c.items()))}
                          for g, c in sorted(image.group_configs.items())],
        "digest": image.digest,
        "runs": [[o, d] for o, d in image.runs],
    }


def image_from_snapshot(doc: MetadataSnapshot) -> MetadataImage:
    try:  # converts every field it reads: a decoded snapshot only claims its shape
        topics = {}
        for t in doc["topics"]:
            state = topic_from_json(t)
            for p, s in enumerate(state.partition_states):
                check_partition_state(state.name, p, s)
            topics[state.name] = state
        broker_configs: dict[int, dict[str, str]] = {}
        for item in doc.get("broker_configs", []):
            entity, configs = _checked_broker_configs(item["broker"], item["configs"], where="metadata snapshot")
            values = {k: v for k, v in configs.items() if v is not None}
            if entity in broker_configs or len(values) != len(configs):
                raise MetadataCorrupt(f"metadata snapshot: broker configs of entity {entity} are given twice or hold "
                                      "a null value")
            if values:
                broker_configs[entity] = values
        groups: dict[str, dict[str, str]] = {}
        for group_item in doc.get("group_configs", []):
            if group_item["group"] in groups or None in group_item["configs"].values():
                raise MetadataCorrupt(f"metadata snapshot: configs of group {group_item['group']!r} are given twice "
                                      "or hold a null value")
            apply_group_config(groups, {"group": group_item["group"], "configs": group_item["configs"]})
        acls: dict[str, AclBinding] = {}
        for acl_item in doc.get("acls", []):
            acl_id, binding = _checked_acl(acl_item["id"], acl_item["acl"], acls, where="metadata snapshot")
            acls[acl_id] = binding
        return MetadataImage(offset=int(doc["offset"]), epoch=int(doc["epoch"]),
                             controller_id=int(doc.get("controller_id", -1)), topics=topics,
                             next_producer_id=int(doc.get("next_producer_id", 0)),
                             removed={str(tid): str(name) for tid, name in doc.get("removed", [])},
                             brokers={int(b["id"]): BrokerRegistration(str(b["incarnation"]),
                                                                       bool(b.get("shutting_down")),
                                                                       bool(b.get("decommissioned")))
                                      for b in doc.get("brokers", [])},
                             broker_configs=broker_configs,
                             scram_credentials=table_from(doc.get("scram_credentials", [])), acls=acls,
                             client_quotas=table_from_records(doc.get("client_quotas", [])),
                             group_configs=groups, digest=str(doc.get("digest") or ""),
                             runs=tuple((int(o), str(d)) for o, d in doc.get("runs", [])))
    except (InvalidScramRecord, InvalidQuota, ConfigError, InvalidRequestError) as exc:
        raise MetadataCorrupt(f"metadata snapshot: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise MetadataCorrupt(f"malformed metadata snapshot ({exc!r})") from None


def diff_images(old: MetadataImage, new: MetadataImage) -> MetadataDelta:
    """What loading snapshot `new` over `old` changes. A topic absent from `new` counts as removed only if
    `new` holds its tombstone (same id); otherwise it `vanished` — forgotten, its data never deleted."""
    delta = MetadataDelta(controller_changed=new.epoch != old.epoch)
    if new.broker_configs != old.broker_configs:
        delta.broker_configs = new.broker_configs
    delta.acls_removed = {i: b for i, b in old.acls.items() if new.acls.get(i) != b}
    delta.acls_added = {i: b for i, b in new.acls.items() if old.acls.get(i) != b}
    for name, state in new.topics.items():
        before = old.topics.get(name)
        if before is not None and before.topic_id != state.topic_id:
            if new.removed.get(before.topic_id) == name:
                delta.removed[name] = before
            else:
                delta.vanished.append(name)
        if before != state:
            delta.changed[name] = state
    for name, before in old.topics.items():
        if name in new.topics:
            continue
        if new.removed.get(before.topic_id) == name:
            delta.removed[name] = before
        else:
            delta.vanished.append(name)
    return delta


def image_from_log(snapshot: MetadataSnapshot | None, entries: Iterable[MetadataEntry]) -> MetadataImage:
    """Replay a loaded log: the snapshot (if any), then every entry after it. Raises MetadataCorrupt/MetadataGap."""
    return replay(snapshot, entries)[0]


def replay(snapshot: MetadataSnapshot | None, entries: Iterable[MetadataEntry]) -> tuple[MetadataImage, dict[int, str]]:
    """`image_from_log`, and the digest at every offset it replayed (the snapshot's and each entry's, where known):
    what a controller compares with the positions brokers report."""
    image = image_from_snapshot(snapshot) if snapshot is not None else MetadataImage()
    digests = {image.offset: image.digest} if snapshot is not None and image.digest else {}
    for entry in entries:
        image, _ = apply_entry(image, entry)
        digests[image.offset] = image.digest
    return image, digests

