"""Faults on the cluster's metadata: topics deleted and re-created under a down replica, a metadata store that
fails, and one that goes back in time (issue 31).

- `topic-churn`: a replica of `chaos-churn` goes down (SIGKILL, back 0.5-2 s later), restarts within its
  lease (SIGKILL, started again at once) or pauses; at once — within its lease, so the controller still counts
  it among the live brokers and places the new topic on it — the topic is deleted and re-created under the
  same name; the replica comes back (its old logs on disk, the metadata naming the new topic); then the leader
  of each partition is failed over (SIGKILL or SIGTERM).
- `store-errors`: the metadata store (`<cluster.dir>/metadata/`) answers EIO or ENOSPC to writes, to reads or
  to both for 2-6 s while the controller is made to write (config changes, a broker dying) and, half of the
  time, the controller is killed so a new one loads during the errors.
- `store-rollback`: the store goes back in time — its newest 1-4 entry files removed, or the whole store
  replaced by a copy taken 2-4 s earlier (while topics were created) — and the controller is killed so a new
  one loads the short log; 3-8 s later the store is put back as it was (the removed files into slots still
  free; any slot a controller wrote meanwhile, and anything written to the old copy, is recorded).

What must hold is the checker's (`checker.py`): records acknowledged in a topic's current incarnation are kept,
no record of an earlier one is ever served in it (`resurrected`), and every metadata change answered success is
in the final metadata (`metadata-lost`) — a store that failed or went back must stop or refuse, never answer
success for work no broker does.

It must never check a result: it records what it did and what it saw.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from .cluster import AdminError
from .fault_context import CHURN_TOPIC, STOP_BOUND_S, Ctx, trigger_changes

__all__ = ["topic_churn", "store_errors", "store_rollback", "CHURN_PARTITIONS"]

CHURN_PARTITIONS = 2


def _churn_op(ctx: Ctx, op: str, via: int | None) -> dict[str, Any]:
    """Delete or create the churn topic through a broker's admin API; the answer (and its times) in the history."""
    c = ctx.cluster
    t_sent = time.time()
    out: dict[str, Any] = {"op": op}
    try:
        if op == "delete":
            c.admin(f"/admin/v1/topics/{CHURN_TOPIC}", "DELETE", via=via, timeout_s=30)
        else:
            body = c.admin("/admin/v1/topics", "POST", {"name": CHURN_TOPIC, "partitions": CHURN_PARTITIONS,
                                                         "replication_factor": 3,
                                                         "configs": {"min.insync.replicas": "2"}}, via=via,
                           timeout_s=30)
            out["topic_id"] = (body or {}).get("topic_id")
        out["ok"] = True
    except AdminError as exc:
        out.update(ok=False, error=str(exc)[:300])
    ctx.history.add("churn", t_sent, time.time(), op, CHURN_TOPIC, out.get("ok"), out.get("topic_id"),
                    out.get("error"))
    return out


def _wait_leaders(ctx: Ctx, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    leaders: list[int] = []
    while time.monotonic() < deadline:
        try:
            leaders = [int(p["leader"]) for p in ctx.cluster.describe(CHURN_TOPIC)]
            if len(leaders) == CHURN_PARTITIONS and all(b >= 0 for b in leaders):
                return leaders
        except (AdminError, KeyError, ValueError, TypeError):
            pass
        ctx.cluster.sleep(0.2)
    return leaders


def topic_churn(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["killed", "restarting", "paused"])
    victim = rng.randrange(c.n)
    failover = rng.choice(["kill", "terminate"])
    params = {"replica_down": how, "failover_by": failover}
    outcome: dict[str, Any] = {"victim": victim}
    down = False
    try:
        via = rng.choice(ctx.others(victim))
        if how == "paused":
            c.pause(victim)
        else:  # SIGKILL (not a clean stop: that releases the lease, and the topic could not be placed on it)
            c.kill(victim)
            down = True
            if how == "restarting":
                c.start(victim, wait=False)
                down = False
        outcome["delete"] = _churn_op(ctx, "delete", via)
        outcome["create"] = _churn_op(ctx, "create", via)
        if how == "killed":
            c.sleep(rng.uniform(0.5, 2.0))
            c.start(victim)
            down = False
        elif how == "paused":
            c.sleep(rng.uniform(0.2, 1.0))
            c.resume(victim)
        else:
            c.wait_listening([victim])
        if not outcome["create"].get("ok"):  # e.g. the victim's lease ran out first: the topic must exist again
            c.wait_healthy([], timeout_s=30)
            outcome["create_again"] = _churn_op(ctx, "create", None)
        leaders = _wait_leaders(ctx, 3 * ctx.lease_s + 20)
        outcome["leaders"] = leaders
        c.sleep(rng.uniform(1.0, 3.0))  # records flow into the new incarnation, the returning replica catches up
        failed_over = []
        for p, leader in enumerate(leaders):
            if leader < 0:
                continue
            if failover == "kill":
                c.kill(leader)
            else:
                c.terminate(leader, bound_s=STOP_BOUND_S)
            new = c.wait_new_leader(CHURN_TOPIC, p, not_in={leader}, timeout_s=3 * ctx.lease_s + 10)
            c.start(leader)
            failed_over.append([p, leader, new])
        outcome["failed_over"] = failed_over
        return params, outcome
    finally:
        if down:
            c.start(victim, wait=False)
        c.resume(victim)


def store_errors(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    errno_name = rng.choice(["EIO", "ENOSPC"])
    which = rng.choice(["writes", "reads", "all"])
    ops = {"writes": ["write", "fsync", "create", "link", "rename", "truncate", "mkdir"],
           "reads": ["read", "open", "readdir", "getattr"], "all": []}[which]
    seconds = rng.uniform(2.0, 6.0)
    kill_controller = rng.random() < 0.5
    params = {"errno": errno_name, "ops": which, "seconds": round(seconds, 3), "kill_controller": kill_controller}
    ctl = c.controller()
    outcome: dict[str, Any] = {"controller": ctl}
    killed = None
    try:
        ctx.topo.store_errors(errno_name, seconds, ops)
        if kill_controller and ctl >= 0:
            c.kill(ctl)
            killed = ctl
            c.start(ctl, wait=False)
        outcome.update(trigger_changes(ctx, rng, ctl if ctl >= 0 else 0, seconds))
        return params, outcome
    finally:
        ctx.topo.heal_store()
        if killed is not None:
            c.start(killed, wait=False)


def _store(ctx: Ctx) -> Path:
    return ctx.topo.cluster_dir / "metadata"


def _copy_durably(src: Path, dst: Path) -> None:
    """Copy a store directory (files fsynced: written through the lazyfs cache to its disk)."""
    for root, _dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            if name.startswith("."):
                continue
            with open(Path(root) / name, "rb") as fin, open(dst / rel / name, "wb") as fout:
                shutil.copyfileobj(fin, fout)
                fout.flush()
                os.fsync(fout.fileno())


def store_rollback(ctx: Ctx, rng: random.Random) -> tuple[dict, dict]:
    c = ctx.cluster
    how = rng.choice(["newest-removed", "older-copy"])
    hold_s = rng.uniform(3.0, 8.0)
    params: dict[str, Any] = {"how": how, "hold_s": round(hold_s, 3)}
    store = _store(ctx)
    aside = ctx.topo.run_dir / f"store-aside-{time.time_ns()}"
    live = store.with_name(f"metadata.live-{time.time_ns()}")
    outcome: dict[str, Any] = {}
    state = "untouched"
    try:
        if how == "newest-removed":
            k = rng.randint(1, 4)
            params["removed"] = k
            newest = sorted((store / "log").glob("*.json"))[-k:]
            aside.mkdir(parents=True)
            for f in newest:
                shutil.copy2(f, aside / f.name)
                f.unlink()
            outcome["removed_offsets"] = [int(f.stem) for f in newest]
            state = "removed"
        else:
            before_s = rng.uniform(2.0, 4.0)
            params["copy_age_s"] = round(before_s, 3)
            _copy_durably(store, aside)
            c.sleep(before_s)  # changes land in the live store meanwhile (the metadata workload creates topics)
            store.rename(live)
            _copy_durably(aside, store)
            state = "restored"
        ctl = c.controller()
        outcome["controller"] = ctl
        if ctl >= 0:  # a new controller loads the store as it is now
            c.kill(ctl)
            c.start(ctl, wait=False)
        c.sleep(hold_s)
        return params, outcome
    finally:
        if state == "removed":
            taken = []
            for f in sorted(aside.glob("*.json")):
                target = store / "log" / f.name
                if target.exists():
                    taken.append(int(f.stem))  # a controller wrote into the hole: its entry replaces ours
                    continue
                tmp = store / "log" / f".restore-{f.name}.tmp"
                _copy_durably_file(f, tmp)
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    taken.append(int(f.stem))
                finally:
                    tmp.unlink(missing_ok=True)
            outcome["slots_taken_meanwhile"] = taken
        elif state == "restored":
            written = sorted(int(p.stem) for p in (store / "log").glob("*.json")) if (store / "log").is_dir() else []
            copied = sorted(int(p.stem) for p in (aside / "log").glob("*.json")) if (aside / "log").is_dir() else []
            outcome["written_to_the_old_copy"] = [o for o in written if o not in copied]
            for _attempt in range(10):  # a broker starting meanwhile may make an empty store there again
                shutil.rmtree(store, ignore_errors=True)
                try:
                    live.rename(store)
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                outcome["heal_error"] = f"the live store could not be put back from {live}"
        shutil.rmtree(aside, ignore_errors=True)


def _copy_durably_file(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
        fout.flush()
        os.fsync(fout.fileno())
