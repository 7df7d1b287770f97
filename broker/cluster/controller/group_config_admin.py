"""The controller's group-config operation: a GROUP config resource's change decided and recorded in one entry.

Why: a group's configs act wherever the group is coordinated and wherever its share-partitions are led, and must
outlive any of those brokers, so the change is the controller's to decide and the metadata log's to carry (one
`group_config` record, as Kafka's ConfigurationControlManager writes a ConfigRecord of resource type GROUP). The
names and values are checked here (`metadata.group_configs`); the broker bounds were checked by the broker the
request reached, against the group's configs after the change. Composed by `core.Controller`, which gives it the
shared state (`state`) and the one fenced write path (`writer`).
"""

from __future__ import annotations

import logging
from typing import Mapping, TypedDict

from kelp.errors import ConfigError

from ...metadata.group_configs import checked_group, checked_group_configs, config_change, group_config_record
from .state import ControllerState
from .writer import MetadataWriter

__all__ = ["GroupConfigAdmin", "GroupConfigsAnswer"]

log = logging.getLogger("kelp.broker.controller")


class GroupConfigsAnswer(TypedDict):
    """alter_group_configs: the group's configs afterwards."""

    group: str
    configs: dict[str, str]
    metadata_offset: int


class GroupConfigAdmin:
    """Setting and deleting a group's configs (Kafka's GROUP config resources)."""

    def __init__(self, state: ControllerState, writer: MetadataWriter) -> None:
        self.state = state
        self.writer = writer

    async def alter_group_configs(self, *, group: str, configs: Mapping[str, str | None], replace_all: bool = False,
                                  validate_only: bool = False) -> GroupConfigsAnswer:
        """Set (a value) or delete (None) configs of one group in one metadata-log entry; `replace_all` drops the
        group's keys not given (AlterConfigs). ConfigError (INVALID_CONFIG) names a bad key; nothing is written."""
        async with self.state.lock:
            self.writer.check_fresh()
            group = checked_group(group)
            if not isinstance(configs, Mapping):
                raise ConfigError("group configs must map config names to values (or null to delete)")
            clean = checked_group_configs(configs)
            new, change = config_change(self.state.image.group_configs.get(group, {}), clean, replace_all=replace_all)
            if change and not validate_only:
                await self.writer.append([group_config_record(group, change)])
                log.info("configs of group '%s': %s", group,
                         ", ".join(f"{k}={'(deleted)' if v is None else v}" for k, v in change.items()))
            return {"group": group, "configs": dict(sorted(new.items())), "metadata_offset": self.state.image.offset}
