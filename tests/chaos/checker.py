"""The checker: from a run's history alone, what was promised and what was broken.

Why: the suite's verdict must be re-checkable (`runner --replay FILE`) and
must not lean on the system under test, so it reads only the history
(history.py) and proves:

| violation | what it means |
| --- | --- |
| lost | an acknowledged record is in no partition's log |
| moved | an acknowledged record is in the log, but not at the partition and offset it was acknowledged at (see below) |
| duplicated | a record (producer, seq) is in the logs more than once (any record, acknowledged or not) |
| order | two acknowledged records of one producer in one partition are in the log in reverse sequence order |
| divergent | a replica's bytes below the high watermark differ from the leader's, end before it, or cannot be read |
| phantom | a consumer was delivered a record at an offset where the final log holds another one, or none |
| commit-ahead | a group committed an offset covering a record it had not been delivered by the time it committed |
| isr-not-restored | at the end a partition has no leader, or its ISR is not its full replica set |
| group-stalled | a group delivered nothing for more than STALL_S seconds while producers were acknowledged |
| group-behind | at the end a group's committed offset is not a partition's high watermark |
| stop-hung | a SIGTERMed broker did not exit within the bound (issue 17 item 16) |
| incomplete | the history has no end: the run did not finish, so nothing final could be checked |

`moved` leaves out records acknowledged without an offset (librdkafka
acknowledges a timed-out batch that a later one proved stored without an
offset): those count for lost, duplicated and order only.

It prints how many faults of each kind were applied, each violation's count
with examples, and anomalies that are not violations (brokers that exited
by themselves, producers replaced after a fatal error, faults skipped,
slow recoveries).

It must never read anything but the history.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from kelp.cli.output import format_table

__all__ = ["Verdict", "check", "VIOLATIONS", "STALL_S"]

VIOLATIONS = ["lost", "moved", "duplicated", "order", "divergent", "phantom", "commit-ahead", "isr-not-restored",
              "group-stalled", "group-behind", "stop-hung", "incomplete"]
STALL_S = 60.0
SLOW_RECOVERY_S = 60.0
EXAMPLES = 5
AIMS = {"leader-kill-then-next": "item 1", "double-failover": "items 5, 12", "controller-pause-short": "items 2, 11",
        "controller-pause-long": "items 2, 11", "control-plane-drop": "item 2", "control-plane-delay": "item 2",
        "sigterm-fast-restart": "items 8, 16", "reassign-cancel-failover": "item 4", "disk-full": "",
        "partition-brokers": "items 2, 7", "partition-clients": "", "kill": "random", "pause": "random",
        "terminate": "random", "kill-all": "random"}


@dataclass
class Verdict:
    meta: dict[str, Any] = field(default_factory=dict)
    faults: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    stats: dict[str, Any] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    anomalies: list[str] = field(default_factory=list)

    def violate(self, kind: str, example: str, n: int = 1) -> None:
        self.counts[kind] += n
        if len(self.examples[kind]) < EXAMPLES:
            self.examples[kind].append(example)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "meta": self.meta, "faults": dict(self.faults), "skipped": dict(self.skipped),
                "stats": self.stats, "violations": {k: self.counts.get(k, 0) for k in VIOLATIONS},
                "examples": {k: v for k, v in self.examples.items() if v}, "anomalies": self.anomalies}

    def table(self) -> str:
        m = self.meta
        lines = [f"chaos run: seed {m.get('seed')}, {m.get('mode')}, nemesis {m.get('seconds', '-')} s, "
                 f"network {m.get('network')}, {m.get('brokers')} brokers"]
        if m.get("network_note"):
            lines.append(f"  ({m['network_note']})")
        rows = [[k, self.faults.get(k, 0), self.skipped.get(k, 0), AIMS.get(k, "")]
                for k in sorted(set(self.faults) | set(self.skipped),
                                key=lambda k: list(AIMS).index(k) if k in AIMS else 99)]
        rows.append(["TOTAL", sum(self.faults.values()), sum(self.skipped.values()),
                     f"{sum(1 for k in self.faults if self.faults[k])} kinds"])
        lines += ["", "faults", format_table(rows, ["KIND", "APPLIED", "SKIPPED", "AIMS AT (issue 17)"])]
        s = self.stats
        lines += ["", f"records: acknowledged {s.get('acked', 0):,} ({s.get('acked_without_offset', 0):,} without an "
                      f"offset), failed {s.get('nacked', 0):,}, "
                      f"outcome unknown {s.get('unknown', 0):,}, delivered to groups {s.get('delivered', 0):,}, "
                      f"commits ok {s.get('commits_ok', 0):,} / failed {s.get('commits_failed', 0):,}, "
                      f"longest recovery {s.get('max_recovery_s', '-')} s"]
        vrows = [[k, self.counts.get(k, 0), (self.examples.get(k) or [""])[0][:110]] for k in VIOLATIONS]
        lines += ["", "violations", format_table(vrows, ["VIOLATION", "COUNT", "FIRST EXAMPLE"])]
        for k in VIOLATIONS:
            for ex in (self.examples.get(k) or [])[1:]:
                lines.append(f"  {k}: {ex[:300]}")
        if self.anomalies:
            lines += ["", "anomalies (not violations)"] + [f"  - {a[:300]}" for a in self.anomalies[:40]]
            if len(self.anomalies) > 40:
                lines.append(f"  ... {len(self.anomalies) - 40} more")
        lines += ["", "verdict: " + ("OK, no violation" if self.ok else
                                       f"{sum(self.counts.values())} violation(s): " +
                                       ", ".join(f"{k} {n}" for k, n in self.counts.items() if n))]
        return "\n".join(lines)


def check(lines: Iterable[list]) -> Verdict:
    v = Verdict()
    acks: list[tuple] = []
    nacks: Counter = Counter()
    nacked = 0
    deliveries: dict[tuple[str, str, int], list[tuple[float, int, int, int]]] = defaultdict(list)
    commits: list[tuple] = []
    logs: dict[tuple[str, int], list[list[int]]] = {}
    replicas: dict[tuple[str, int], dict[int, dict]] = defaultdict(dict)
    state: dict[str, list] | None = None
    stops: list[tuple] = []
    end: dict[str, Any] | None = None
    recoveries: list[tuple[int, float | None]] = []
    faults: list[list] = []
    for line in lines:
        kind = line[0]
        if kind == "ack":
            acks.append(tuple(line[1:]))
        elif kind == "dlv":
            _, t, group, member, topic, p, offset, prod, seq = line
            deliveries[(group, topic, p)].append((t, offset, prod, seq))
        elif kind == "commit":
            commits.append(tuple(line[1:]))
        elif kind == "nack":
            nacked += 1
            nacks[line[6].split(":")[0][:60]] += 1
        elif kind == "meta":
            v.meta = line[1]
        elif kind == "fault":
            faults.append(line)
        elif kind == "recovered":
            recoveries.append((line[2], line[3]))
        elif kind == "exit":
            v.anomalies.append(f"broker {line[2]} exited by itself (returncode {line[3]}) at {line[1]:.1f}; "
                               f"log tail: {' | '.join(str(line[4]).splitlines()[-2:])}")
        elif kind == "pfatal":
            v.anomalies.append(f"producer {line[2]} failed fatally and was replaced: {line[3]}")
        elif kind == "stop":
            stops.append(tuple(line[2:]))
        elif kind == "state":
            state = line[2]
        elif kind == "log":
            logs[(line[1], line[2])] = line[4]
        elif kind == "replica":
            replicas[(line[1], line[2])][line[3]] = line[4]
        elif kind == "end":
            end = line[2]

    for f in faults:
        _, t0, t1, index, kind, params, outcome = f
        if outcome.get("skipped") or outcome.get("error"):
            v.skipped[kind] += 1
            v.anomalies.append(f"fault #{index} {kind} not applied: {outcome.get('skipped') or outcome.get('error')}")
        else:
            v.faults[kind] += 1
        if outcome.get("stop_hung"):
            v.violate("stop-hung", f"fault #{index} {kind}: broker "
                                   f"{outcome.get('broker', params.get('broker'))} did not exit "
                                   f"within {params.get('stop_bound_s')} s of SIGTERM (SIGKILLed)")
    for index, seconds in recoveries:
        if seconds is None or seconds > SLOW_RECOVERY_S:
            v.anomalies.append(f"after fault #{index} the cluster was not whole within {SLOW_RECOVERY_S:.0f} s")
    for b, seconds, rc in stops:
        if rc is None:
            v.violate("stop-hung", f"final stop: broker {b} did not exit within {seconds:.0f} s of SIGTERM (SIGKILLed)")
    if nacks:
        v.anomalies.append("failed produce requests by error: " + ", ".join(f"{e} x{n}"
                                                                            for e, n in nacks.most_common(5)))

    recovered_s = [s for _, s in recoveries if s is not None]
    v.stats = {"acked": len(acks), "nacked": nacked, "unknown": (end or {}).get("unknown", "?"),
               "acked_without_offset": sum(1 for a in acks if a[5] is None),
               "delivered": sum(len(d) for d in deliveries.values()),
               "commits_ok": sum(1 for c in commits if c[7] is None),
               "commits_failed": sum(1 for c in commits if c[7] is not None),
               "max_recovery_s": round(max(recovered_s), 1) if recovered_s else None}
    if end is None or state is None:
        v.violate("incomplete", "the history has no final state: the run stopped before its end; "
                                "only the faults above were checked")
        return v

    # -- records: where each one is in the final logs ----------------------------------------------------
    where: dict[tuple[int, int], list[tuple[str, int, int]]] = defaultdict(list)
    by_offset: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
    # (topic, p, offset) -> [producer id, epoch, base seq, leader epoch]
    stored_by: dict[tuple[str, int, int], list] = {}
    for (topic, p), recs in logs.items():
        offsets = {}
        for offset, prod, seq, *batch in recs:
            offsets[offset] = (prod, seq)
            if batch:
                stored_by[(topic, p, offset)] = batch
            if prod >= 0:
                where[(prod, seq)].append((topic, p, offset))
        by_offset[(topic, p)] = offsets
    for _, prod, seq, topic, p, offset in acks:
        found = where.get((prod, seq))
        if not found:
            v.violate("lost", f"producer {prod} seq {seq}: acknowledged at {topic}-{p}@{offset}, in no log")
        elif offset is None:
            pass  # librdkafka acknowledged it without an offset (a timed-out batch confirmed by a later one)
        elif (topic, p, offset) not in found:
            held = by_offset.get((topic, p), {}).get(offset)
            v.violate("moved", f"producer {prod} seq {seq}: acknowledged at {topic}-{p}@{offset}, found at "
                               f"{found}; that offset holds {held}")
    for (prod, seq), found in where.items():
        if len(found) > 1:
            how = [f"{t}-{p}@{o}" + (" (producer id {}, epoch {}, batch sequence {}, leader epoch {})".format(
                *stored_by[(t, p, o)]) if (t, p, o) in stored_by else "") for t, p, o in found]
            v.violate("duplicated", f"producer {prod} seq {seq} stored {len(found)} times: {'; '.join(how)}",
                      len(found) - 1)

    # -- order of acknowledged records, per producer and partition ----------------------------------------
    per: dict[tuple[int, str, int], list[tuple[int, int]]] = defaultdict(list)
    for _, prod, seq, topic, p, _offset in acks:
        for t2, p2, off2 in where.get((prod, seq), []):
            if (t2, p2) == (topic, p):
                per[(prod, topic, p)].append((seq, off2))
                break
    for (prod, topic, p), items in per.items():
        items.sort()
        for (s1, o1), (s2, o2) in zip(items, items[1:], strict=False):
            if o2 <= o1:
                v.violate("order", f"producer {prod} in {topic}-{p}: seq {s1} at offset {o1} but seq {s2} at {o2}")

    # -- replicas --------------------------------------------------------------------------------------
    for (topic, p), reads in sorted(replicas.items()):
        src = next((r.get("source") for r in reads.values() if "source" in r), None)
        ref = reads.get(src, {})
        for b, r in sorted(reads.items()):
            where_s = f"{topic}-{p} replica on broker {b}"
            if r.get("missing") or r.get("error") or r.get("offline"):
                v.violate("divergent", f"{where_s}: "
                                       f"{'missing' if r.get('missing') else r.get('error') or r.get('offline')}")
            elif r["leo"] < r["hw_ref"]:
                v.violate("divergent", f"{where_s} ends at {r['leo']}, below the high watermark {r['hw_ref']}")
            elif b != src and r.get("sha256_below_hw") != ref.get("sha256_below_hw"):
                v.violate("divergent", f"{where_s} differs from broker {src}'s below the high watermark "
                                       f"{r['hw_ref']}: first differing batch at offset {r.get('first_diff_offset')}")

    # -- consumers: what they were given is what the log holds -----------------------------------------
    for (group, topic, p), items in deliveries.items():
        offsets = by_offset.get((topic, p))
        if offsets is None:
            continue
        for _t, offset, prod, seq in items:
            held = offsets.get(offset)
            if held != (prod, seq):
                v.violate("phantom", f"group {group} was delivered producer {prod} seq {seq} at {topic}-{p}@{offset}; "
                                     f"the log holds {held} there")

    # -- commits: never ahead of what the group was delivered -------------------------------------------
    first_seen: dict[tuple[str, str, int], dict[int, float]] = {}
    for key, items in deliveries.items():
        seen: dict[int, float] = {}
        for t, offset, _, _ in items:
            if offset not in seen or t < seen[offset]:
                seen[offset] = t
        first_seen[key] = seen
    prefix: dict[tuple[str, str, int], tuple[list[int], list[float]]] = {}
    for t_sent, _t_done, group, member, topic, p, offset, err in commits:
        if err is not None:
            continue
        key = (group, topic, p)
        if key not in prefix:
            offs = sorted(by_offset.get((topic, p), {}))
            seen = first_seen.get(key, {})
            running, maxes = -math.inf, []
            for o in offs:
                running = max(running, seen.get(o, math.inf))
                maxes.append(running)
            prefix[key] = (offs, maxes)
        offs, maxes = prefix[key]
        k = bisect.bisect_left(offs, offset)
        if offs and offset > offs[-1] + 1:
            v.violate("commit-ahead", f"group {group} ({member}) committed {topic}-{p} offset {offset}, past the log's "
                                      f"end {offs[-1] + 1}")
        elif k > 0 and maxes[k - 1] > t_sent:
            missing = next(o for o in offs[:k] if first_seen.get(key, {}).get(o, math.inf) > t_sent)
            v.violate("commit-ahead", f"group {group} ({member}) committed {topic}-{p} offset {offset} at {t_sent:.3f} "
                                      f"before offset {missing} was delivered to it")

    # -- the end: ISR whole, groups caught up and never stalled -----------------------------------------
    for topic, parts in state.items():
        for p, leader, reps, isr, _hw, _leo in parts:
            if leader < 0 or sorted(isr) != sorted(reps):
                v.violate("isr-not-restored", f"{topic}-{p}: leader {leader}, ISR {isr} of replicas {reps}")
    last_commit: dict[tuple[str, str, int], tuple[float, int]] = {}
    for _t_sent, t_done, group, _member, topic, p, offset, err in commits:
        if err is None and ((group, topic, p) not in last_commit or t_done >= last_commit[(group, topic, p)][0]):
            last_commit[(group, topic, p)] = (t_done, offset)
    groups = sorted({g for g, _, _ in deliveries} | set(v.meta.get("groups", [])))
    for group in groups:
        for topic in v.meta.get("topics", []):
            for p, _leader, _reps, _isr, hw, _leo in state.get(topic, []):
                got = last_commit.get((group, topic, p), (0, 0))[1]
                if hw is not None and got != hw:
                    v.violate("group-behind", f"group {group}: {topic}-{p} committed {got}, high watermark {hw}")
    start, stop = v.meta.get("workload_start"), (end or {}).get("nemesis_end")
    if start and stop:
        ack_times = sorted(a[0] for a in acks)
        for group in groups:
            times = sorted(t for (g, _, _), items in deliveries.items() if g == group for t, *_ in items)
            points = [start] + [t for t in times if start <= t <= stop] + [stop]
            for a, b in zip(points, points[1:], strict=False):
                if b - a > STALL_S and bisect.bisect_left(ack_times, b) - bisect.bisect_right(ack_times, a) > 0:
                    v.violate("group-stalled", f"group {group} delivered nothing for {b - a:.0f} s "
                                               f"(from {a:.1f} to {b:.1f}) while records were acknowledged")
    return v
