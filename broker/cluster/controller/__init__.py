"""The controller (`kelp.broker.cluster.controller`): the one writer of the metadata log, and its parts by role.

Why a package: the controller is its core (`core`: loading the log, claiming its epoch, watching the brokers) and
the objects it composes: the state they share (`state`), the one fenced write path to the log (`writer`) and the
operations by role (`topic_admin`, `partition_moves`, `broker_requests`, `scram_admin`, `acl_admin`, `quota_admin`,
`group_config_admin`, `decommission`). What it decides with is pure and lives in `kelp.broker.metadata` (the image,
the records, elections, placement, the answers' shapes); what it holds here is the runtime: the lock, the log, the
publisher. Callers take the controller from here.
"""

from .core import Controller, MetadataHistoryRefused
from .state import ControllerSettings

__all__ = ["Controller", "ControllerSettings", "MetadataHistoryRefused"]
