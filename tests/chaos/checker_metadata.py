"""The checker's rules for issue 31's faults: topic incarnations, metadata answered success, brokers' metadata at
the end, and what a power loss may take.

Why a module of its own: these rules read events the rest of the checker does not (`csend`, `churn`, `mop`,
`metadata`) and decide what `checker.check` counts as lost. From the history alone:

- **Topic incarnations** (`chaos-churn`, deleted and re-created by `topic-churn`). The final incarnation is the
  one whose id the final metadata has; it began with the creation that answered that id (or, when no answer
  named it, the last creation asked for). A record the churn producer sent after that creation answered and had
  acknowledged must be in the final log (`lost` otherwise; `moved` when at another offset). A record
  acknowledged before that creation was even asked for belongs to an earlier incarnation: found in the final
  log, it is `resurrected` — an old log served as the new topic's. Records sent in between (the topic being
  deleted and re-created) may land in either: no rule.
- **Metadata changes answered success** (`mop`: the metadata worker's creations and deletions). For each
  topic name, its last operation decides: a creation answered 2xx means the final metadata has the topic with
  the id answered (`metadata-lost` otherwise); a deletion answered 2xx means it has no topic of that name
  (`metadata-undead`). Any other answer (refused, failed, none) leaves the outcome open.
- **Brokers' metadata at the end** (`metadata`): every broker's applied offset and digest must be equal
  (`metadata-divergent`): the digest chain makes equal digests equal histories.
- **Power loss**: at the default flush settings (the run's `log.flush.interval.messages` is not 1) a record
  acknowledged on a topic with min.insync.replicas 1 before a power loss ended may be lost — its ISR may have
  been the leader alone, whose page cache went — and with it what follows from it (a group delivered the lost
  record: `phantom`; committed past the new end: `commit-ahead`, `group-behind`). So may anything
  acknowledged before every broker lost power (`power-loss-all` is scheduled only with
  `log.flush.interval.messages=1`, where none of this may happen; a replayed history is judged the same way).
  Kafka promises the same. Those are counted as anomalies, never as violations; on every other topic, and with
  every record fsynced before its answer, each is a violation.

It must never read anything but the history.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Callable

__all__ = ["METADATA_VIOLATIONS", "churn_check", "metadata_check", "power_loss_allowance"]

METADATA_VIOLATIONS = ["resurrected", "metadata-lost", "metadata-undead", "metadata-divergent"]
POWER_ALL, POWER_ONE = "power-loss-all", "power-loss-one"

Violate = Callable[[str, str], None]


def power_loss_allowance(meta: dict[str, Any], faults: list[list]) -> Callable[[str, float], str | None]:
    """`allowed(topic, t)`: why what happened to `topic` at time `t` (a record acknowledged, delivered, committed)
    may have been undone by a power loss (None: it may not)."""
    settings = meta.get("settings") or {}
    flushes_each = str(settings.get("log.flush.interval.messages", "")) == "1"
    min_insync = meta.get("min_insync") or {}
    all_ends = sorted(f[2] for f in faults if f[4] == POWER_ALL and not f[6].get("error"))
    any_ends = sorted(f[2] for f in faults if f[4] in (POWER_ALL, POWER_ONE) and not f[6].get("error"))

    def allowed(topic: str, at: float) -> str | None:
        if flushes_each:
            return None
        if any(at < t for t in all_ends):
            return ("before every broker lost power, not fsynced by any (log.flush.interval.messages at its "
                    "default; Kafka promises the same)")
        if int(min_insync.get(topic, 2)) < 2 and any(at < t for t in any_ends):
            return f"{topic} has min.insync.replicas=1 and a broker lost power (its ISR may have been that one alone)"
        return None

    return allowed


def churn_check(violate: Violate, *, topic: str, producer: int, acks: list[tuple], csend: dict[tuple[int, int], float],
                churn: list[list], final_topics: dict[str, str], where: dict[tuple[int, int], list],
                allowed: Callable[[str, float], str | None], lost_allowed: Counter) -> dict[str, int]:
    """The incarnation rules for the churn producer's records; returns counts for the run's stats."""
    final_id = final_topics.get(topic)
    creates = [e for e in churn if e[3] == "create" and e[4] == topic]
    named = [e for e in creates if final_id is not None and e[6] == final_id]
    if named:  # the create answered with the final id: the final incarnation began within it
        started_sent, started_done = named[-1][1], named[-1][2]
    else:
        # No create answered the final id: a client's Metadata request auto-created it after a deletion, or a
        # create's answer was lost. It began after the last deletion was sent, and it existed when a later create
        # was answered (refused as existing, or not answered at all: nothing is counted as its own then).
        deletes = [e for e in churn if e[3] == "delete" and e[4] == topic]
        started_sent = deletes[-1][1] if deletes else 0.0
        later = [e for e in creates if e[1] >= started_sent and "already exists" in str(e[7] or "")]
        started_done = later[0][2] if later else (float("inf") if deletes else 0.0)
    counts = Counter()
    for t_ack, prod, seq, t, p, offset in acks:
        if prod != producer or t != topic:
            continue
        found = [f for f in where.get((prod, seq), []) if f[0] == topic]
        sent = csend.get((prod, seq))
        if t_ack < started_sent:
            counts["earlier_incarnations"] += 1
            if found:
                violate("resurrected", f"{topic}: producer {prod} seq {seq} was acknowledged at {t}-{p}@{offset} "
                                       f"({t_ack:.3f}), before the incarnation the final metadata has (id "
                                       f"{final_id}) was created at {started_sent:.3f}; it is in the final log at "
                                       f"{found}")
            continue
        if sent is None or sent <= started_done:
            counts["in_between"] += 1
            continue
        counts["final_incarnation"] += 1
        if not found:
            why = allowed(topic, t_ack)
            if why is not None:
                lost_allowed[why] += 1
            else:
                violate("lost", f"{topic}: producer {prod} seq {seq}: acknowledged at {t}-{p}@{offset} in the "
                                f"incarnation the final metadata has (id {final_id}), in no log")
        elif offset is not None and (t, p, offset) not in found:
            violate("moved", f"{topic}: producer {prod} seq {seq}: acknowledged at {t}-{p}@{offset}, found at {found}")
    return dict(counts)


def metadata_check(violate: Violate, *, mops: list[list], applied: dict[str, list] | None,
                   final_topics: dict[str, str] | None) -> dict[str, int]:
    """Answered metadata changes against the final metadata, and the brokers' applied metadata against each other."""
    stats: Counter = Counter()
    if applied is not None:
        positions = {tuple(x) for x in applied.values()}
        if len(positions) != 1:
            violate("metadata-divergent", "the brokers' applied metadata differ at the end (offset, digest): "
                                          + ", ".join(f"broker {b}: {x}" for b, x in sorted(applied.items())))
    if final_topics is None:
        return dict(stats)
    by_name: dict[str, list[list]] = defaultdict(list)
    for m in mops:
        by_name[m[4]].append(m)
    for name, ops in by_name.items():
        ops.sort(key=lambda m: m[1])
        _, t_sent, _t_done, op, _, status, topic_id, error = ops[-1]
        stats[f"{op}_{'ok' if 200 <= status < 300 else 'other'}"] += 1
        if not 200 <= status < 300:
            continue
        if op == "create" and final_topics.get(name) != topic_id:
            violate("metadata-lost", f"topic {name}: its creation was answered {status} with id {topic_id} at "
                                     f"{t_sent:.3f}, the final metadata has "
                                     + (f"id {final_topics[name]}" if name in final_topics else "no such topic"))
        elif op == "delete" and name in final_topics:
            violate("metadata-undead", f"topic {name}: its deletion was answered {status} at {t_sent:.3f}, the "
                                       f"final metadata still has it (id {final_topics[name]})")
    return dict(stats)
