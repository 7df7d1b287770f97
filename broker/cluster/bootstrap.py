"""Seeding a cluster's metadata before its first start: SCRAM users, as `kafka-storage format --add-scram` does.

Why: a cluster whose only listeners authenticate with SCRAM needs its first users (the brokers' own, an
admin) before any broker can accept a client or another broker, and Kafka writes them into the bootstrap
metadata when it formats storage. Kelp's metadata store is the cluster's metadata log (file backend or
Kubernetes ConfigMaps): `format_metadata` writes its first entry, offset 0, holding the credentials
(`scram_credential` records: salt and keys, never the password), with the same create-if-absent every
controller write uses. The first controller then claims its epoch at offset 1 and every broker replays the
users with the rest of the log.

It refuses a store that already holds metadata (`AlreadyFormatted`): a running cluster's users change through
AlterUserScramCredentials or `/admin/v1/users`, never behind its controller's back. It must never write
anything but that one entry.
"""

from __future__ import annotations

import json

from kelp.config.broker import BrokerConfig
from kelp.security.scram import ScramUpsertion

from ..metadata.image import MetadataCorrupt, MetadataImage, apply_entry
from ..metadata.records import MetadataEntry, MetadataRecord, as_entry
from ..metadata.scram_credentials import record_of
from .metadata_log import FileMetadataLog, MetadataLog, MetadataLogConflict

__all__ = ["AlreadyFormatted", "metadata_log_for", "format_metadata", "describe_store"]


class AlreadyFormatted(Exception):
    """The metadata store holds metadata already (the cluster has started, or was formatted)."""


def metadata_log_for(cfg: BrokerConfig) -> MetadataLog:
    """The metadata log the brokers of `cfg`'s cluster load (its `cluster.backend`)."""
    if cfg["cluster.backend"] == "kube":
        from kelp.kube.api import api_client_from

        from .kube_metadata_log import KubeMetadataLog
        from .member import _service_account_namespace

        api = api_client_from(kubeconfig=cfg["kube.config"] or None)
        return KubeMetadataLog(api, namespace=cfg["kube.namespace"] or _service_account_namespace(),
                               cluster=cfg["cluster.name"])
    cfg.cluster_dir.mkdir(parents=True, exist_ok=True)
    return FileMetadataLog(cfg.cluster_dir)


def describe_store(cfg: BrokerConfig) -> str:
    if cfg["cluster.backend"] == "kube":
        return f"cluster '{cfg['cluster.name']}' (Kubernetes ConfigMaps in namespace {cfg['kube.namespace'] or '-'})"
    return f"cluster '{cfg['cluster.name']}' ({cfg.cluster_dir})"


async def format_metadata(log: MetadataLog, upsertions: list[ScramUpsertion]) -> MetadataEntry:
    """Write the first metadata entry with these users' credentials; raises AlreadyFormatted."""
    loaded = await log.load()
    if loaded.snapshot is not None or loaded.entries:
        raise AlreadyFormatted(f"the metadata store already holds metadata up to offset {loaded.end_offset}")
    records: list[MetadataRecord] = []
    for upsertion in upsertions:
        assert upsertion.name is not None
        records.append(record_of(upsertion.name, upsertion.credential()))
    entry = as_entry(json.loads(json.dumps({"offset": 0, "epoch": 0, "records": records})))
    try:
        apply_entry(MetadataImage(), entry)  # the same checks every broker makes when it replays it
    except MetadataCorrupt as exc:
        raise ValueError(str(exc)) from None
    try:
        await log.append(entry)
    except MetadataLogConflict:
        raise AlreadyFormatted("another process wrote the first metadata entry meanwhile") from None
    return entry
