"""The nemesis: a seeded schedule of targeted and random faults, each applied, healed, and written to the history.

Why: a random kill now and then almost never hits the windows issue 17
describes; each targeted fault aims at one:

| kind | aims at (issue 17) | what it does |
| --- | --- | --- |
| leader-kill-then-next | 1 | SIGKILL a partition's leader, then the next leader within a second of its election |
| double-failover | 5, 12 | two quick leader changes: kill (or pause) the leader, restart it at once, kill the next |
| controller-pause-short | 2, 11 | SIGSTOP the controller 1-3 s (past its lease freshness margin, within the lease) |
| controller-pause-long | 2, 11 | SIGSTOP the controller for lease + 1-3 s: another takes over, the old one wakes up |
| control-plane-drop | 2 | controller HTTP dropped or reset 2-8 s while it pushes configs and a broker dies or pauses |
| control-plane-delay | 2 | controller HTTP delayed 0-7 s per connection for 5-9 s (pushes overtake each other) |
| sigterm-fast-restart | 8, 16 | SIGTERM a broker (bounded wait) and restart it at once, within its lease |
| reassign-cancel-failover | 4 | move an RF 2 partition off its leader, kill it, cancel the move (see below) |
| disk-full | - | fill a broker's log filesystem (tmpfs) for 2-6 s, then free it |
| partition-brokers | 2, 7 | cut one broker (the leader, the controller or any) off from the others for 3-10 s |
| partition-clients | - | the clients cannot reach one broker's Kafka port for 3-8 s |
| kill, pause, terminate, kill-all | - | random SIGKILL/SIGSTOP/SIGTERM and restarts |
| topic-churn, store-errors, store-rollback | issue 31 | `faults_metadata.py` |
| power-loss-one, power-loss-all, clock-step | issue 31 | `faults_host.py` |

The control-plane faults act on the brokers' HTTP to and from the
controller (blackholed or reset when dropped); the delay has the drop's
triggers. reassign-cancel-failover cancels the move during or right after
the failover, with the broker being added paused half of the time.

The schedule is a function of the seed: fault `i`'s kind comes from round
`i`'s seeded order (every available targeted kind once per round, each
followed by a random one three times in four) and its parameters from
`Random(f"{seed}:fault:{i}")`, so `(seed, i)` names one fault exactly — what
the regression list keeps. Roles (which broker leads, which controls) are
looked up when the fault runs.

Every fault heals what it did in a `finally`; the runner then waits
(bounded) for the cluster to be whole again.

It must never check a result: it records what it did and what it saw.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator

from .cluster import AdminError
from .fault_context import MAIN_TOPIC, MOVES_TOPIC, STOP_BOUND_S, Ctx, hold, pick_broker, trigger_changes
from .faults_host import clock_step, power_loss_all, power_loss_one
from .faults_metadata import store_errors, store_rollback, topic_churn

__all__ = ["TARGETED", "RANDOM", "NEEDS", "available_kinds", "schedule", "short_schedule", "fault_params_rng",
           "run_fault", "Ctx", "STOP_BOUND_S", "kind_at"]

TARGETED_17 = ["leader-kill-then-next", "double-failover", "controller-pause-short", "controller-pause-long",
               "control-plane-drop", "control-plane-delay", "sigterm-fast-restart", "reassign-cancel-failover",
               "disk-full", "partition-brokers", "partition-clients"]
# issue 31: topics re-created under a down replica, the metadata store failing and going back in time, power loss,
# clock steps (faults_metadata.py, faults_host.py): a schedule stream of their own (below).
TARGETED_31 = ["topic-churn", "store-errors", "store-rollback", "power-loss-one", "power-loss-all", "clock-step"]
TARGETED = TARGETED_17 + TARGETED_31
RANDOM = ["kill", "pause", "terminate", "kill-all"]
RANDOM_WEIGHTS = [4, 3, 3, 1]
NEEDS = {"control-plane-drop": "network", "control-plane-delay": "network", "partition-brokers": "network",
         "partition-clients": "network", "disk-full": "disk", "store-errors": "store", "store-rollback": "store",
         "power-loss-one": "power", "power-loss-all": "power+fsync-each", "clock-step": "clock"}
STREAM_31 = 100_000  # the first index of issue 31's stream: issue 17's keeps the indices it always had
EVERY_31 = 3  # one fault of issue 31's stream after every this many of issue 17's


def available_kinds(capabilities: frozenset[str] | set[str], kinds: list[str] = TARGETED) -> list[str]:
    """The kinds whose needs (`+`-joined) the run has. `fsync-each`: the brokers fsync every record before its
    answer (`log.flush.interval.messages=1`); without it a power loss of every broker may lose what was
    acknowledged, as Kafka's would, so power-loss-all would prove nothing but that."""
    return [k for k in kinds if NEEDS.get(k) is None or set(NEEDS[k].split("+")) <= set(capabilities)]


def _stream(seed: int, kinds: list[str], first: int, tag: str) -> Iterator[tuple[int, str]]:
    """Rounds of every kind in `kinds` in a seeded order, each followed three times in four by a random kind."""
    index = first
    round_no = 0
    while kinds:
        rng = random.Random(f"{seed}:{tag}round:{round_no}")
        order = kinds[:]
        rng.shuffle(order)
        for kind in order:
            yield index, kind
            index += 1
            if rng.random() < 0.75:
                yield index, rng.choices(RANDOM, RANDOM_WEIGHTS)[0]
                index += 1
        round_no += 1


def schedule(seed: int, capabilities: frozenset[str] | set[str]) -> Iterator[tuple[int, str]]:
    """(index, kind) forever: issue 17's stream (its indices and kinds exactly as before issue 31, so the
    regression list's `(seed, index)` still name their faults) with issue 31's stream (indices from STREAM_31)
    woven in, one of its faults after every EVERY_31 of the first."""
    first = _stream(seed, available_kinds(capabilities, TARGETED_17), 0, "")
    second = _stream(seed, available_kinds(capabilities, TARGETED_31), STREAM_31, "31:")
    while True:
        for _ in range(EVERY_31):
            yield next(first)
        item = next(second, None)
        if item is not None:
            yield item


def short_schedule(seed: int, capabilities: frozenset[str] | set[str],
                   kinds: list[str] | None = None) -> list[tuple[int, str]]:
    """The first fault of each targeted kind (or only `kinds`), in the seed's order and with its parameters."""
    wanted = set(kinds or available_kinds(capabilities))
    out = []
    for n, (index, kind) in enumerate(schedule(seed, capabilities)):
        if kind in wanted:
            out.append((index, kind))
            wanted.discard(kind)
            if not wanted:
                return out
        if n > 20 * len(TARGETED):
            return out
    return out


def kind_at(seed: int, capabilities: frozenset[str] | set[str], index: int) -> str:
    for n, (i, kind) in enumerate(schedule(seed, capabilities)):
        if i == index:
            return kind
        if n > 100 * (index % STREAM_31 + 10):
            break
    raise KeyError(f"fault index {index} is not in seed {seed}'s schedule for {sorted(capabilities)}")


def fault_params_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:fault:{index}")


# -- the faults: each returns (params, outcome) and heals in `finally` ------------------------------
def leader_kill_then_next(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    p = rng.randrange(6)
    gap = rng.uniform(0.0, 0.5)
    down = rng.uniform(1.0, 4.0)
    params = {"topic": MAIN_TOPIC, "partition": p, "gap_s": round(gap, 3), "down_s": round(down, 3)}
    first = c.leader(MAIN_TOPIC, p)
    if first < 0:
        return params, {"skipped": f"{MAIN_TOPIC}-{p} has no leader"}
    killed = [first]
    try:
        t0 = time.monotonic()
        c.kill(first)
        second = ctx.failover(MAIN_TOPIC, p, first)
        if second is None:
            return params, {"first": first, "skipped": "no new leader was elected"}
        elected = time.monotonic()
        c.sleep(gap)
        c.kill(second)
        killed.append(second)
        outcome = {"first": first, "second": second, "election_s": round(elected - t0, 3),
                   "second_kill_after_election_s": round(time.monotonic() - elected, 3)}
        c.sleep(down)
        return params, outcome
    finally:
        for b in killed:
            c.start(b, wait=False)
        c.wait_listening(killed)


def double_failover(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    p = rng.randrange(6)
    how = rng.choice(["kill", "pause"])
    gap = rng.uniform(0.0, 1.0)
    params = {"topic": MAIN_TOPIC, "partition": p, "first_by": how, "gap_s": round(gap, 3)}
    first = c.leader(MAIN_TOPIC, p)
    if first < 0:
        return params, {"skipped": f"{MAIN_TOPIC}-{p} has no leader"}
    down: list[int] = []
    try:
        if how == "kill":
            c.kill(first)
            down.append(first)
        else:
            c.pause(first)
        second = ctx.failover(MAIN_TOPIC, p, first)
        if how == "kill":
            c.start(first)
            down.remove(first)
        else:
            c.resume(first)
        if second is None:
            return params, {"first": first, "skipped": "no new leader was elected"}
        c.sleep(gap)
        c.kill(second)
        down.append(second)
        third = ctx.failover(MAIN_TOPIC, p, second)
        return params, {"first": first, "second": second, "third": third}
    finally:
        c.resume(first)
        for b in down:
            c.start(b, wait=False)
        c.wait_listening(down)


def controller_pause(ctx: Ctx, rng: random.Random, *, long: bool) -> tuple[dict, dict]:
    c = ctx.cluster
    pause = ctx.lease_s + rng.uniform(1.0, 3.0) if long else rng.uniform(1.0, 3.0)
    params = {"pause_s": round(pause, 3), "lease_s": ctx.lease_s}
    ctl = c.controller()
    if ctl < 0:
        return params, {"skipped": "no controller"}
    seen: set[int] = set()
    try:
        c.pause(ctl)
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline:
            for i in ctx.others(ctl):
                try:
                    seen.add(int(c.admin("/admin/v1/cluster", via=i, timeout_s=1)["controller"]))
                except (AdminError, KeyError, ValueError):
                    pass
            c.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    finally:
        c.resume(ctl)
    return params, {"controller": ctl, "controllers_seen_during_pause": sorted(seen)}


def _under_rules(ctx: Ctx, rng: random.Random, ctl: int, rules: list[dict], window: float) -> dict:
    """The proxy's rules in force for `window` seconds while the controller is made to push; lifted in any case."""
    t0 = time.monotonic()
    try:
        ctx.topo.control_plane(rules)
        trigger = trigger_changes(ctx, rng, ctl, window)
        ctx.cluster.sleep(window - (time.monotonic() - t0))
    finally:
        ctx.topo.control_plane([])
    return trigger


def control_plane_drop(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    action = rng.choice(["drop", "reset"])
    direction = rng.choice(["from-controller", "to-controller", "both"])
    window = rng.uniform(2.0, 8.0)
    params = {"action": action, "direction": direction, "window_s": round(window, 3)}
    ctl = c.controller()
    if ctl < 0:
        return params, {"skipped": "no controller"}
    rules = []
    if direction in ("from-controller", "both"):
        rules.append({"src": ctl, "dst": "*", "action": action})
    if direction in ("to-controller", "both"):
        rules.append({"src": "*", "dst": ctl, "action": action})
    trigger = _under_rules(ctx, rng, ctl, rules, window)
    return params, {"controller": ctl, **trigger, "proxy": ctx.topo.proxy_stats()}


def control_plane_delay(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    hi = rng.uniform(2000, 7000)
    window = rng.uniform(5.0, 9.0)
    both = rng.random() < 0.5
    params = {"lo_ms": 0, "hi_ms": round(hi), "window_s": round(window, 3), "both_directions": both}
    ctl = c.controller()
    if ctl < 0:
        return params, {"skipped": "no controller"}
    rules = [{"src": ctl, "dst": "*", "action": "delay", "lo_ms": 0, "hi_ms": hi}]
    if both:
        rules.append({"src": "*", "dst": ctl, "action": "delay", "lo_ms": 0, "hi_ms": hi})
    trigger = _under_rules(ctx, rng, ctl, rules, window)
    # Delayed bytes still in the proxy arrive up to hi_ms after the rule is lifted: let them land.
    c.sleep(hi / 1000.0)
    return params, {"controller": ctl, **trigger, "proxy": ctx.topo.proxy_stats()}


def sigterm_fast_restart(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["leader", "controller", "random"])
    params = {"target": how, "stop_bound_s": STOP_BOUND_S}
    b = pick_broker(ctx, rng, how)
    try:
        code, seconds = c.terminate(b, bound_s=STOP_BOUND_S)
        listening = c.start(b)
    finally:
        c.start(b, wait=False)
    return params, {"broker": b, "exit_code": code, "stop_s": round(seconds, 3), "stop_hung": code is None,
                    "restart_listening_s": round(listening, 3)}


def reassign_cancel_failover(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    """Move an RF 2 partition off its leader onto the third broker, kill the leader, cancel the move.

    Variants (seeded): the cancel comes once the new leader is elected, or
    right after the kill, while the failover is still under way; and the
    broker being added is paused (SIGSTOP) from the moment the move is
    accepted to the end of the fault half of the time, so the move cannot
    complete before the cancel.
    """
    c = ctx.cluster
    p = rng.randrange(3)
    before_kill = rng.uniform(0.0, 0.5)
    before_cancel = rng.uniform(0.0, 0.5)
    cancel_when = rng.choice(["after-failover", "during-failover"])
    pause_adding = rng.random() < 0.5
    settle = rng.uniform(0.5, 2.0)
    params = {"topic": MOVES_TOPIC, "partition": p, "kill_after_s": round(before_kill, 3),
              "cancel_after_s": round(before_cancel, 3), "cancel": cancel_when, "pause_adding": pause_adding}
    try:
        state = c.describe(MOVES_TOPIC)[p]
    except (AdminError, IndexError) as exc:
        return params, {"skipped": f"describe failed: {exc}"}
    replicas, leader = list(state["replicas"]), int(state["leader"])
    if leader < 0:
        return params, {"skipped": f"{MOVES_TOPIC}-{p} has no leader"}
    outsiders = [b for b in range(c.n) if b not in replicas]
    keep = [r for r in replicas if r != leader]
    target = outsiders[:1] + keep[: len(replicas) - 1] if outsiders else list(reversed(replicas))
    adding = outsiders[0] if outsiders and pause_adding else None
    outcome: dict[str, Any] = {"replicas": replicas, "leader": leader, "target": target}
    killed = False
    try:
        try:
            outcome["reassign"] = c.admin("/admin/v1/partitions/reassign", "POST",
                                          {"partitions": [{"topic": MOVES_TOPIC, "partition": p, "replicas": target}]},
                                          timeout_s=30)["partitions"][0]
        except AdminError as exc:
            # Not applied as meant (no move to cancel): counted as skipped, the answer kept as an anomaly.
            outcome["error"] = f"the reassignment was not accepted: {exc}"[:400]
            adding = None
            return params, outcome
        if adding is not None:
            # Paused once the move is accepted (paused before, it may be the controller, or gone by the time the
            # move is asked for, and the move is refused): it cannot catch up, so the cancel finds it running.
            c.pause(adding)
        c.sleep(before_kill)
        c.kill(leader)
        killed = True
        if cancel_when == "after-failover":
            outcome["new_leader"] = ctx.failover(MOVES_TOPIC, p, leader)
        c.sleep(before_cancel)
        try:
            outcome["cancel"] = c.admin("/admin/v1/partitions/reassign", "POST",
                                        {"partitions": [{"topic": MOVES_TOPIC, "partition": p, "replicas": None}]},
                                        timeout_s=40)["partitions"][0]
        except AdminError as exc:
            outcome["cancel_error"] = str(exc)[:300]
        if cancel_when == "during-failover":
            outcome["new_leader"] = ctx.failover(MOVES_TOPIC, p, leader)
        c.sleep(settle)
        return params, outcome
    finally:
        if adding is not None:
            c.resume(adding)
        if killed:
            c.start(leader)
        try:
            outcome["after"] = {k: v for k, v in c.describe(MOVES_TOPIC)[p].items()
                                if k in ("leader", "replicas", "isr", "adding", "removing")}
        except (AdminError, IndexError):
            pass


def disk_full(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["leader", "random"])
    hold = rng.uniform(2.0, 6.0)
    b = pick_broker(ctx, rng, how)
    params = {"target": how, "hold_s": round(hold, 3)}
    try:
        taken = ctx.topo.fill_disk(b)
        c.sleep(hold)
    finally:
        ctx.topo.free_disk(b)
    return params, {"broker": b, "filled_bytes": taken, "broker_running_after": c.children[b].running}


def partition_brokers(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["leader", "controller", "random"])
    window = rng.uniform(3.0, 10.0)
    b = pick_broker(ctx, rng, how)
    hold(c, window, lambda: ctx.topo.partition_brokers([[b], ctx.others(b)]), ctx.topo.heal_network)
    return {"isolate": how, "window_s": round(window, 3)}, {"broker": b}


def partition_clients(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["leader", "random"])
    window = rng.uniform(3.0, 8.0)
    b = pick_broker(ctx, rng, how)
    hold(c, window, lambda: ctx.topo.isolate_clients(b), ctx.topo.heal_network)
    return {"target": how, "window_s": round(window, 3)}, {"broker": b}


def random_kill(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    b, down = rng.randrange(c.n), rng.uniform(0.5, 4.0)
    hold(c, down, lambda: c.kill(b), lambda: c.start(b))
    return {"broker": b, "down_s": round(down, 3)}, {}


def random_pause(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    b, pause = rng.randrange(c.n), rng.uniform(0.5, 5.0)
    hold(c, pause, lambda: c.pause(b), lambda: c.resume(b))
    return {"broker": b, "pause_s": round(pause, 3)}, {}


def random_terminate(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    b, down = rng.randrange(c.n), rng.uniform(0.0, 3.0)
    code, seconds = None, 0.0
    try:
        code, seconds = c.terminate(b, bound_s=STOP_BOUND_S)
        c.sleep(down)
    finally:
        c.start(b)
    return {"broker": b, "down_s": round(down, 3), "stop_bound_s": STOP_BOUND_S}, \
        {"exit_code": code, "stop_s": round(seconds, 3), "stop_hung": code is None}


def random_kill_all(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    down = rng.uniform(0.5, 3.0)
    try:
        for b in range(c.n):
            c.kill(b)
        c.sleep(down)
    finally:
        for b in range(c.n):
            c.start(b, wait=False)
        c.wait_listening(list(range(c.n)))
    return {"down_s": round(down, 3)}, {}


FAULTS: dict[str, Callable[[Ctx, random.Random], tuple[dict, dict]]] = {
    "leader-kill-then-next": leader_kill_then_next,
    "double-failover": double_failover,
    "controller-pause-short": lambda ctx, rng: controller_pause(ctx, rng, long=False),
    "controller-pause-long": lambda ctx, rng: controller_pause(ctx, rng, long=True),
    "control-plane-drop": control_plane_drop,
    "control-plane-delay": control_plane_delay,
    "sigterm-fast-restart": sigterm_fast_restart,
    "reassign-cancel-failover": reassign_cancel_failover,
    "disk-full": disk_full,
    "partition-brokers": partition_brokers,
    "partition-clients": partition_clients,
    "topic-churn": topic_churn,
    "store-errors": store_errors,
    "store-rollback": store_rollback,
    "power-loss-one": power_loss_one,
    "power-loss-all": power_loss_all,
    "clock-step": clock_step,
    "kill": random_kill,
    "pause": random_pause,
    "terminate": random_terminate,
    "kill-all": random_kill_all,
}
assert set(FAULTS) == set(TARGETED) | set(RANDOM)


def run_fault(ctx: Ctx, seed: int, index: int, kind: str) -> dict:
    """Apply fault `index` of `seed` (its kind given), heal it, write it to the history; returns the entry's fields."""
    rng = fault_params_rng(seed, index)
    t0 = time.time()
    try:
        params, outcome = FAULTS[kind](ctx, rng)
    except Exception as exc:  # a fault that could not be applied is recorded, never hidden
        params, outcome = {}, {"error": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        ctx.topo.heal_network()
        ctx.topo.heal_store()
        restored = ctx.cluster.restore()
    if restored:
        outcome["restored"] = restored
    t1 = time.time()
    ctx.history.add("fault", t0, t1, index, kind, params, outcome)
    return {"t0": t0, "t1": t1, "index": index, "kind": kind, "params": params, "outcome": outcome}
