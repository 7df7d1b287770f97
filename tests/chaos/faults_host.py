"""Faults on a broker's host: its power, and its wall clock (issue 31).

- `power-loss-one`: one broker (a leader, the controller or any) loses power: SIGKILL, and the page cache of
  its log disk (`lazyfs`) drops what was not fsynced; back after 1-4 s.
- `power-loss-all`: every broker and the shared cluster directory lose power at once; back after 1-3 s.
- `clock-step`: a leader's or the controller's wall clock jumps 5-30 s forward or back, stays so 4-10 s, then
  jumps back (a step the other way): CLOCK_REALTIME only, as settimeofday or an NTP step.

What must hold is the checker's: with `acks=all` at RF 3 and min.insync.replicas 2, one broker's power loss
loses nothing acknowledged (the other in-sync replica has it, in its page cache); a power loss of every broker
loses only what no broker had fsynced — at the default settings, records acknowledged before it may be gone
(Apache Kafka promises the same), with `log.flush.interval.messages=1` none — and never reorders, duplicates or
makes replicas diverge. A clock step changes nothing a client sees.

It must never check a result: it records what it did and what it saw.
"""

from __future__ import annotations

import random

from .fault_context import Ctx, pick_broker

__all__ = ["power_loss_one", "power_loss_all", "clock_step"]


def power_loss_one(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["leader", "controller", "random"])
    down = rng.uniform(1.0, 4.0)
    b = pick_broker(ctx, rng, how)
    params = {"target": how, "down_s": round(down, 3)}
    try:
        c.kill(b)
        lost = ctx.topo.power_loss([b], store=False)
        c.sleep(down)
    finally:
        c.start(b)
    return params, {"broker": b, "cache_lost": lost}


def power_loss_all(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    down = rng.uniform(1.0, 3.0)
    lost = {}
    try:
        for b in range(c.n):
            c.kill(b)
        lost = ctx.topo.power_loss(list(range(c.n)), store=True)
        c.sleep(down)
    finally:
        for b in range(c.n):
            c.start(b, wait=False)
        c.wait_listening(list(range(c.n)))
    return {"down_s": round(down, 3)}, {"cache_lost": lost}


def clock_step(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["leader", "controller"])
    direction = rng.choice([1, -1])
    size_s = rng.uniform(5.0, 30.0)
    hold_s = rng.uniform(4.0, 10.0)
    b = pick_broker(ctx, rng, how)
    params = {"target": how, "step_s": round(direction * size_s, 3), "hold_s": round(hold_s, 3)}
    try:
        ctx.topo.step_clock(b, int(direction * size_s * 1000))
        c.sleep(hold_s)
    finally:
        ctx.topo.step_clock(b, 0)
    return params, {"broker": b}
