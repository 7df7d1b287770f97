"""A share group and its members as the coordinator holds them (KIP-932): plain data.

Why a module of its own: membership (`membership`, which changes them) and their records (`records`, which
writes and replays them) both build them; neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Assignment", "ShareMember", "ShareGroup"]

Assignment = dict[str, frozenset[int]]  # topic id (32 hex digits) -> partitions


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...]
    assigned: Assignment = field(default_factory=dict)
    timer: object | None = None


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"
