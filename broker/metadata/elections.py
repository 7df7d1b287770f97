"""Partition leader election and reassignment rules: pure functions from a partition state to the next one.

Why: the controller's safety lives in these few rules — who may lead, who
leaves the ISR, when a reassignment completes or is reverted — and they must
be testable without a store, a lease or a loop. Kafka's equivalents are
`PartitionChangeBuilder`, `PartitionReassignmentReplicas` and
`PartitionReassignmentReverter`.

Every function returns the same object when nothing changes, and a new
`PartitionState` with `leader_epoch` bumped on every leader change and
`partition_epoch` bumped on every change at all. None of them ever returns a
state whose leader is outside its replicas or its ISR.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from .model import NO_LEADER, PartitionState

__all__ = ["Election", "elect", "describe_change", "complete_reassignment", "revert_reassignment", "RevertRefused"]

log = logging.getLogger("kelp.broker.controller")


@dataclass(frozen=True, slots=True)
class Election:
    """What the controller knows when it re-elects: who is alive, who may lead, and the topic's rule."""

    alive: frozenset[int]           # brokers whose lease is live (ISR members must be among them)
    eligible: frozenset[int]        # alive and not shutting down (may become leader)
    unclean: bool = False           # unclean.leader.election.enable for this topic (and allowed here)
    # Leaving the cluster (`decommission`): they lead only when no other eligible replica can.
    decommissioned: frozenset[int] = frozenset()

    def ranked(self, brokers: list[int]) -> list[int]:
        """`brokers` in order, decommissioned ones last."""
        return [b for b in brokers if b not in self.decommissioned] + [b for b in brokers if b in self.decommissioned]


def elect(name: str, p: int, state: PartitionState, e: Election, *, avoid: int | None = None) -> PartitionState:
    """Drop dead (and `avoid`) ISR members; give a partition whose leader cannot lead a new one from the ISR.

    Offline (no live in-sync replica, unclean off): leader -1, leader epoch bumped, the last ISR kept so its
    members stay eligible when they return. Unclean (only if `e.unclean`): the first live replica, alone in
    the ISR, and a WARNING, because acknowledged records may be lost. A decommissioned broker is chosen
    only when no other candidate is (a partition it leads keeps it until a move takes it away).
    """
    live_isr = tuple(r for r in state.isr if r in e.alive and r != avoid)
    leader_ok = state.leader in e.eligible and state.leader != avoid and state.leader in state.isr
    if leader_ok:
        if live_isr == state.isr:
            return state
        return replace(state, isr=live_isr, partition_epoch=state.partition_epoch + 1)
    candidates = [r for r in state.target_replicas if r in live_isr and r in e.eligible]
    candidates += [r for r in state.replicas if r in live_isr and r in e.eligible and r not in candidates]
    candidates = e.ranked(candidates)
    if candidates:
        return replace(state, leader=candidates[0], leader_epoch=state.leader_epoch + 1, isr=live_isr,
                       partition_epoch=state.partition_epoch + 1)
    others = e.ranked([r for r in state.replicas if r in e.eligible and r != avoid])
    if e.unclean and others:
        return replace(state, leader=others[0], leader_epoch=state.leader_epoch + 1, isr=(others[0],),
                       partition_epoch=state.partition_epoch + 1)
    keep_isr = live_isr or state.isr
    if state.leader == NO_LEADER and keep_isr == state.isr:
        return state
    return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1, isr=keep_isr,
                   partition_epoch=state.partition_epoch + 1)


def describe_change(name: str, p: int, old: PartitionState, new: PartitionState, reason: str) -> None:
    """Log a leadership change the controller commits: INFO, WARNING for unclean, ERROR for offline."""
    if new.leader == old.leader:
        return
    if new.leader == NO_LEADER:
        log.error("%s-%d is OFFLINE: no live in-sync replica among ISR %s (unclean election is off; %s)",
                  name, p, list(old.isr), reason)
    elif new.leader not in old.isr:
        log.warning("%s-%d: no in-sync replica is alive; UNCLEAN election of broker %d at epoch %d (records may "
                    "be lost; %s)", name, p, new.leader, new.leader_epoch, reason)
    else:
        log.info("%s-%d: leader %d -> %d at epoch %d (%s)", name, p, old.leader, new.leader, new.leader_epoch, reason)


def complete_reassignment(name: str, p: int, state: PartitionState, eligible: frozenset[int]) -> PartitionState:
    """Once every target replica is in the ISR: leadership moves into the target set, the old replicas go."""
    if not state.reassigning:
        return state
    target = state.target_replicas
    if any(r not in state.isr for r in target):
        return state
    leader, epoch = state.leader, state.leader_epoch
    if leader not in target:
        candidates = [r for r in target if r in state.isr and r in eligible]
        if not candidates:
            return state
        leader, epoch = candidates[0], epoch + 1
    log.info("%s-%d: reassignment to %s complete (leader %d)", name, p, list(target), leader)
    return replace(state, replicas=target, leader=leader, leader_epoch=epoch,
                   isr=tuple(r for r in state.isr if r in target), adding=(), removing=(), original=(),
                   partition_epoch=state.partition_epoch + 1)


class RevertRefused(ValueError):
    """Cancelling would leave the partition without an in-sync replica among its original replicas."""


def revert_reassignment(name: str, p: int, state: PartitionState, eligible: frozenset[int]) -> PartitionState:
    """Cancel a running reassignment: back to the original replicas, ISR = ISR ∩ original.

    Refused (RevertRefused) when no original replica is in sync — reverting would drop every copy that is
    complete. If the leader was one of the added replicas, a new leader is chosen from the remaining ISR
    (leader epoch + 1); an eligible one is preferred, else the partition stays led by none until one returns.
    """
    original = state.original or tuple(r for r in state.replicas if r not in state.adding)
    isr = tuple(r for r in state.isr if r in original)
    if not isr:
        raise RevertRefused(
            f"{name}-{p}: cannot cancel the reassignment: none of the original replicas {list(original)} is in the "
            f"ISR {list(state.isr)}; let it complete, or reassign to replicas that include an in-sync one")
    leader, epoch = state.leader, state.leader_epoch
    if leader not in isr:
        candidates = [r for r in isr if r in eligible]
        leader = candidates[0] if candidates else NO_LEADER
        epoch += 1
    return replace(state, replicas=original, adding=(), removing=(), original=(), isr=isr, leader=leader,
                   leader_epoch=epoch, partition_epoch=state.partition_epoch + 1)
