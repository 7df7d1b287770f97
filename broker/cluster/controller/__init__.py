"""The controller (`kelp.broker.cluster.controller`): the one writer of the metadata log, and its parts by role.

Why a package: the controller is its core (`core`: loading the log, watching the brokers, appending entries)
and the operations mixed into it by role (`topic_admin`, `partition_moves`, `broker_requests`, `scram_admin`,
`acl_admin`, `quota_admin`, `group_config_admin`, `decommission`) over the state they share (`state`). What it
decides with is pure and lives in `kelp.broker.metadata` (the image, the records, elections, placement, the
answers' shapes); what it holds here is the runtime: the lock, the log, the publisher. Callers take the
controller from here.
"""

from .core import Controller, MetadataHistoryRefused
from .state import ControllerSettings

__all__ = ["Controller", "ControllerSettings", "MetadataHistoryRefused"]
