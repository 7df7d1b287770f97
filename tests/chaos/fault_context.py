"""What every fault of the nemesis works with: the cluster, the topology, the history, and a few shared moves.

Why a module of its own: the faults live in modules by what they hit (`nemesis` the processes and the
network, `faults_metadata` the topics and the metadata store, `faults_host` a broker's host: its power and
its clock), and all of them pick brokers by role and hold a fault for a while the same way.

It must never check a result.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from .cluster import AdminError, ChaosCluster
from .history import History
from .topology import Topology

__all__ = ["Ctx", "hold", "pick_broker", "trigger_changes", "MAIN_TOPIC", "MOVES_TOPIC", "CHURN_TOPIC", "STOP_BOUND_S"]

# A SIGTERMed broker must exit within this (issue 17 item 16; docs/replication.md "Failover": 56 s + the flush).
STOP_BOUND_S = 60.0
MAIN_TOPIC = "chaos"
MOVES_TOPIC = "chaos-moves"
CHURN_TOPIC = "chaos-churn"


@dataclass
class Ctx:
    cluster: ChaosCluster
    topo: Topology
    history: History
    say: Callable[[str], None]

    @property
    def lease_s(self) -> float:
        return self.cluster.lease_s

    def others(self, *exclude: int) -> list[int]:
        return [i for i in range(self.cluster.n) if i not in exclude]

    def failover(self, topic: str, p: int, old: int) -> int | None:
        return self.cluster.wait_new_leader(topic, p, not_in={old}, timeout_s=3 * self.lease_s + 10)


def hold(c: ChaosCluster, seconds: float, do: Callable[[], Any], undo: Callable[[], Any]) -> None:
    """do(), keep it for `seconds` (supervising the brokers meanwhile), undo() whatever happens."""
    try:
        do()
        c.sleep(seconds)
    finally:
        undo()


def pick_broker(ctx: Ctx, rng: random.Random, how: str) -> int:
    """A broker by role: the leader of a `chaos` partition, the controller, or any (when the role has none)."""
    c = ctx.cluster
    if how == "leader":
        b = c.leader(MAIN_TOPIC, rng.randrange(6))
    elif how == "controller":
        b = c.controller()
    else:
        b = rng.randrange(c.n)
    return b if b >= 0 else rng.randrange(c.n)


def trigger_changes(ctx: Ctx, rng: random.Random, around: int, window: float) -> dict:
    """Make the controller push metadata all through a control-plane fault.

    A topic config change about every 0.7 s (each one a store write and a
    push to every broker: pushes that can overtake each other), and, as the
    seed says, a broker other than the controller killed and restarted, or
    paused past its lease (leaders move, ISRs shrink and grow), or neither.
    """
    c = ctx.cluster
    how = rng.choice(["kill-restart", "pause", "configs-only"])
    victim = rng.choice(ctx.others(around))
    t0 = time.monotonic()
    changes, errors, step = 0, 0, 0
    phase = "before"
    while time.monotonic() - t0 < window:
        elapsed = time.monotonic() - t0
        if how == "kill-restart" and phase == "before" and elapsed >= window * 0.2:
            c.kill(victim)
            phase = "down"
        elif how == "kill-restart" and phase == "down" and elapsed >= window * 0.6:
            c.start(victim, wait=False)
            phase = "after"
        elif how == "pause" and phase == "before" and elapsed >= window * 0.2:
            c.pause(victim)
            phase = "down"
        elif how == "pause" and phase == "down" and elapsed >= window * 0.2 + ctx.lease_s + 0.5:
            c.resume(victim)
            phase = "after"
        step += 1
        try:
            c.admin(f"/admin/v1/topics/{MAIN_TOPIC}/configs", "PATCH",
                    {"configs": {"retention.ms": str(604_800_000 + step)}}, via=around, timeout_s=2)
            changes += 1
        except AdminError:
            errors += 1
        c.sleep(0.7)
    if phase == "down":
        if how == "pause":
            c.resume(victim)
        else:
            c.start(victim, wait=False)
    return {"trigger": how, "victim": victim, "config_changes": changes, "config_change_errors": errors}
