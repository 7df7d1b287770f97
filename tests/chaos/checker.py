"""The checker: from a run's history alone, what was promised and what was broken.

Why: the suite's verdict must be re-checkable (`runner --replay FILE`) and
must not lean on the system under test, so it reads only the history
(history.py) and proves:

| violation | what it means |
| --- | --- |
| lost | an acknowledged record is in no partition's log |
| moved | an acknowledged record is in the log, but not at the partition and offset it was acknowledged at (see below) |
| duplicated | a record (producer, seq) is in the logs more than once (any record, acknowledged or not) |
| order | two acknowledged records of one idempotent producer in one partition are in the log against their order |
| divergent | a replica's bytes below the high watermark differ from the leader's, end before it, or cannot be read |
| phantom | a consumer was delivered a record at an offset where the final log holds another one, or none |
| commit-ahead | a group committed an offset covering a record it had not been delivered by the time it committed |
| isr-not-restored | at the end a partition has no leader, or its ISR is not its full replica set |
| group-stalled | a group delivered nothing for more than STALL_S seconds while producers were acknowledged |
| group-behind | at the end a group's committed offset is not a partition's high watermark |
| stop-hung | a SIGTERMed broker did not exit within the bound (issue 17 item 16) |
| resurrected | a record of an earlier incarnation of a re-created topic is in the current one's log (issue 31) |
| metadata-lost | a topic creation answered success is not in the final metadata (issue 31) |
| metadata-undead | a topic deletion answered success is undone in the final metadata (issue 31) |
| metadata-divergent | at the end the brokers' applied metadata (offset, digest) differ (issue 31) |
| incomplete | the history has no end: the run did not finish, so nothing final could be checked |

The rules of the last four, and what a power loss may take, are `checker_metadata`'s.

`moved` leaves out records acknowledged without an offset (librdkafka
acknowledges a timed-out batch that a later one proved stored without an
offset): those count for lost, duplicated and order only.

`duplicated` leaves out the copies the client made itself: librdkafka's
idempotent producer bumps its epoch for the whole producer (KIP-360 "drain
and bump") and renumbers every unacknowledged batch of every partition
from sequence 0, so a batch a broker stored but answered with a retriable
error (NOT_LEADER_OR_FOLLOWER after a leader change, a timeout) is stored
again under the new epoch, and no broker can tell — Apache Kafka's
neither (docs/chaos.md, "Duplicates the client causes"). A duplicate
counts as the client's only with proof: each copy from the same producer
id under a different epoch, the record not failed, its acknowledgement
(if any) at the newest copy, and every bump between the copies' epochs
logged by the producer (`pidem`) with reasons any correct broker causes
too — messages timed out in the client, or "skipped sequence numbers"
after an OUT_OF_ORDER_SEQUENCE_NUMBER that the final log confirms (the
partition does not keep the sequence right before the refused batch's, nor
any later one, of that producer epoch). Anything else stays a violation: a batch stored twice
under one epoch, a bump for an unknown producer id or a permanent error, a
bump whose reason was not logged. They are counted and listed as
anomalies.

The churn producer (not idempotent, one request in flight per connection)
is held to neither `duplicated` nor `order`: a retry may store a batch
twice, and librdkafka counts requests in flight per broker connection, not
per partition, and waits for a partition's requests to the old leader
before producing to a new one only when idempotent (rdkafka_broker.c
`rd_kafka_toppar_producer_serve`), so a batch in flight to the old leader
when leadership moved is retried after records the new leader stored
meanwhile. Both are counted and listed as anomalies.

It prints how many faults of each kind were applied, each violation's count
with examples, and anomalies that are not violations (brokers that exited
by themselves, producers replaced after a fatal error, faults skipped,
slow recoveries).

It must never read anything but the history.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kelp.cli.output import format_table

from .checker_metadata import METADATA_VIOLATIONS, churn_check, metadata_check, power_loss_allowance

__all__ = ["Verdict", "check", "VIOLATIONS", "STALL_S"]

VIOLATIONS = ["lost", "moved", "duplicated", "order", "divergent", "phantom", "commit-ahead", "isr-not-restored",
              "group-stalled", "group-behind", "stop-hung", *METADATA_VIOLATIONS, "incomplete"]
STALL_S = 60.0
SLOW_RECOVERY_S = 60.0
EXAMPLES = 5
AIMS = {"leader-kill-then-next": "item 1", "double-failover": "items 5, 12", "controller-pause-short": "items 2, 11",
        "controller-pause-long": "items 2, 11", "control-plane-drop": "item 2", "control-plane-delay": "item 2",
        "sigterm-fast-restart": "items 8, 16", "reassign-cancel-failover": "item 4", "disk-full": "",
        "partition-brokers": "items 2, 7", "partition-clients": "", "topic-churn": "31: 2", "store-errors": "31: 3",
        "store-rollback": "31: 1, 3", "power-loss-one": "31", "power-loss-all": "31", "clock-step": "31: 6",
        "kill": "random", "pause": "random", "terminate": "random", "kill-all": "random"}


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
        lines += ["", "faults", format_table(rows, ["KIND", "APPLIED", "SKIPPED", "AIMS AT (issue 17; 31: issue 31)"])]
        s = self.stats
        lines += ["", f"records: acknowledged {s.get('acked', 0):,} ({s.get('acked_without_offset', 0):,} without an "
                      f"offset), failed {s.get('nacked', 0):,}, "
                      f"outcome unknown {_n(s.get('unknown', 0))}, delivered to groups {s.get('delivered', 0):,}, "
                      f"commits ok {s.get('commits_ok', 0):,} / failed {s.get('commits_failed', 0):,}, "
                      f"longest recovery {s.get('max_recovery_s', '-')} s"
                      + (f", copies stored again by the client's epoch bump {s['duplicated_by_client']:,}"
                         if s.get("duplicated_by_client") else "")]
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


def _n(value: object) -> str:
    """A count with thousands separators; anything else (unknown: '?') as it is."""
    return f"{value:,}" if isinstance(value, int) else str(value)


# librdkafka's debug=eos lines (rdkafka_request.c, rdkafka_idempotence.c) as the workload records them (`pidem`).
_ERRSEQ = re.compile(r"ProduceRequest for (?P<topic>\S+) \[(?P<p>\d+)\] with \d+ message\(s\) failed due to skipped "
                     r"sequence numbers \(PID\{Id:(?P<pid>\d+),Epoch:(?P<epoch>\d+)\}, base seq (?P<base>-?\d+) > "
                     r"next seq (?P<next>-?\d+)\)")
_BUMP_REASON = re.compile(r"epoch bump for \d+ partition\(s\) with in-flight requests: (?P<reason>.*)$")
_BUMPED = re.compile(r"bumped epoch to PID\{Id:(?P<pid>\d+),Epoch:(?P<epoch>\d+)\}")
_TIMED_OUT = re.compile(r"^\d+ message\(s\) timed out on ")


@dataclass(frozen=True)
class ClientBump:
    """One idempotent epoch bump a producer logged: why, and whether every reason is one a correct broker causes
    too (`client_bumps`)."""

    producer: int
    reasons: tuple[str, ...]
    client_caused: bool


def client_bumps(pidem: list[list], last_seq: Callable[[str, int, int, int], int | None]
                 ) -> dict[tuple[int, int], ClientBump]:
    """(producer id, new epoch) -> the bump, from the producers' `pidem` lines in history order.

    The reasons of a bump are the lines its producer logged since its previous bump. A bump is client-caused
    when each is: messages that timed out in the client (`message.timeout.ms`), or "skipped sequence numbers"
    with its ERRSEQ line — OUT_OF_ORDER_SEQUENCE_NUMBER for a batch starting at `base` while the client still
    expected `next` < `base` (an earlier batch failed or is unanswered) — confirmed by the final log:
    `last_seq(topic, partition, producer id, epoch)` (the highest sequence of that producer epoch the partition
    keeps; None: unknown) is below `base - 1`, so no leader kept the sequence right before `base` and any
    broker had to refuse it (Kafka's `checkSequence`: a batch continues its epoch's last one). Anything else —
    an unknown producer id, a permanent error ("message sequence gap"), an ERRSEQ the log does not confirm, no
    reason at all — leaves the bump unexplained (not client-caused).
    """
    out: dict[tuple[int, int], ClientBump] = {}
    pending: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for _, _t, producer, fac, text in pidem:
        bumped = _BUMPED.search(text) if fac == "DRAIN" else None
        if bumped is None:
            pending[producer].append((fac, text))
            continue
        reasons: list[str] = []
        ok, skipped, confirmed = True, 0, []
        for f, tx in pending.pop(producer, []):
            if f == "ERRSEQ":
                e = _ERRSEQ.search(tx)
                if e is None:
                    ok = False
                    reasons.append(f"ERRSEQ not understood: {tx[:120]}")
                    continue
                top, p, pid, ep, base, nxt = (e["topic"], int(e["p"]), int(e["pid"]), int(e["epoch"]),
                                              int(e["base"]), int(e["next"]))
                held = last_seq(top, p, pid, ep)
                good = held is not None and held < base - 1
                confirmed.append(good)
                reasons.append(f"OUT_OF_ORDER_SEQUENCE_NUMBER on {top}-{p} for base seq {base}, the client expecting "
                               f"{nxt} (epoch {ep}): " + (f"the log keeps epoch {ep} only up to sequence {held}"
                                                          if good else f"not confirmed by the log (kept up to {held})"))
            elif f == "DRAIN":
                r = _BUMP_REASON.search(tx)
                if r is None:
                    continue  # not a bump's drain (a producer id reset's)
                if r["reason"] == "skipped sequence numbers":
                    skipped += 1
                elif _TIMED_OUT.match(r["reason"]):
                    reasons.append(r["reason"])
                else:
                    ok = False
                    reasons.append(r["reason"])
            else:  # UNKPID, ERRPID
                ok = False
                reasons.append(f"{f}: {tx[:160]}")
        ok = ok and bool(reasons) and skipped <= len(confirmed) and all(confirmed)
        out[(int(bumped["pid"]), int(bumped["epoch"]))] = ClientBump(producer, tuple(reasons), ok)
    return out


def _last_sequences(logs: dict[tuple[str, int], list[list[int]]]) -> dict[tuple[str, int, int, int], int]:
    """(topic, partition, producer id, epoch) -> the highest sequence the final log keeps. A record's sequence is
    its batch's base sequence plus its place in the batch (a run of offsets under one batch key); two copies of
    one batch next to each other count as one longer batch (a higher sequence: never in the client's favour)."""
    last: dict[tuple[str, int, int, int], int] = {}
    for (topic, p), recs in logs.items():
        key, first = None, 0
        for offset, _prod, _seq, *batch in recs:
            if len(batch) < 3 or batch[2] < 0:
                key = None
                continue
            k = (batch[0], batch[1], batch[2], batch[3] if len(batch) > 3 else None)
            if k != key:
                key, first = k, offset
            at = (topic, p, batch[0], batch[1])
            last[at] = max(last.get(at, -1), batch[2] + offset - first)
    return last


def _client_copy(prod: int, seq: int, found: list[tuple[str, int, int]], stored_by: dict[tuple[str, int, int], list],
                 acked_at: dict[tuple[int, int], tuple[str, int, int | None]], nacked: set[tuple[int, int]],
                 bumps: dict[tuple[int, int], ClientBump]) -> list[ClientBump] | None:
    """The bumps that made the client store (prod, seq) again, when the copies prove it (see the module
    docstring); None when they do not."""
    if (prod, seq) in nacked or any(len(stored_by.get(f) or ()) < 2 for f in found):
        return None
    pids = {stored_by[f][0] for f in found}
    epochs = sorted(stored_by[f][1] for f in found)
    if len(pids) != 1 or len(set(epochs)) != len(epochs):
        return None
    pid = pids.pop()
    newest = max(found, key=lambda f: stored_by[f][1])
    ack = acked_at.get((prod, seq))
    if ack is not None and ack[2] is not None and ack != newest:
        return None
    between = [bumps.get((pid, e)) for e in range(epochs[0] + 1, epochs[-1] + 1)]
    proven = [b for b in between if b is not None and b.client_caused and b.producer == prod]
    return proven if proven and len(proven) == len(between) else None


def check(lines: Iterable[list]) -> Verdict:
    v = Verdict()
    acks: list[tuple] = []
    nacks: Counter = Counter()
    nacked = 0
    nacked_records: set[tuple[int, int]] = set()
    pidem: list[list] = []
    deliveries: dict[tuple[str, str, int], list[tuple[float, int, int, int]]] = defaultdict(list)
    commits: list[tuple] = []
    logs: dict[tuple[str, int], list[list[int]]] = {}
    replicas: dict[tuple[str, int], dict[int, dict]] = defaultdict(dict)
    state: dict[str, list] | None = None
    stops: list[tuple] = []
    end: dict[str, Any] | None = None
    recoveries: list[tuple[int, float | None]] = []
    faults: list[list] = []
    csend: dict[tuple[int, int], float] = {}
    churn: list[list] = []
    mops: list[list] = []
    applied: dict[str, list] | None = None
    final_topics: dict[str, str] | None = None
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
            nacked_records.add((line[2], line[3]))
        elif kind == "pidem":
            pidem.append(line)
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
        elif kind == "csend":
            csend[(line[2], line[3])] = line[1]
        elif kind == "churn":
            churn.append(line)
        elif kind == "mop":
            mops.append(line)
        elif kind == "metadata":
            applied, final_topics = line[2], line[3]

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
    allowed = power_loss_allowance(v.meta, faults)
    lost_allowed: Counter = Counter()
    churn_producer = v.meta.get("churn_producer", 100)
    for t_ack, prod, seq, topic, p, offset in acks:
        if prod == churn_producer:
            continue  # its topic is deleted and re-created: the incarnation rules below
        found = where.get((prod, seq))
        if not found and allowed(topic, t_ack) is not None:
            lost_allowed[allowed(topic, t_ack)] += 1
        elif not found:
            v.violate("lost", f"producer {prod} seq {seq}: acknowledged at {topic}-{p}@{offset}, in no log")
        elif offset is None:
            pass  # librdkafka acknowledged it without an offset (a timed-out batch confirmed by a later one)
        elif (topic, p, offset) not in found:
            held = by_offset.get((topic, p), {}).get(offset)
            v.violate("moved", f"producer {prod} seq {seq}: acknowledged at {topic}-{p}@{offset}, found at "
                               f"{found}; that offset holds {held}")
    for topic in v.meta.get("churn_topics", []):
        v.stats[f"churn_{topic}"] = churn_check(v.violate, topic=topic, producer=churn_producer, acks=acks,
                                                csend=csend, churn=churn, final_topics=final_topics or {}, where=where,
                                                allowed=allowed, lost_allowed=lost_allowed)
    v.stats["metadata_ops"] = metadata_check(v.violate, mops=mops, applied=applied, final_topics=final_topics)
    last_seqs = _last_sequences(logs)
    with_batches = {tp for tp, recs in logs.items() if any(len(r) > 5 for r in recs)}
    bumps = client_bumps(pidem, lambda t, p, pid, ep: last_seqs.get((t, p, pid, ep), -1)
                         if (t, p) in with_batches else None)
    acked_at = {(prod, seq): (topic, p, offset) for _, prod, seq, topic, p, offset in acks}
    by_client: dict[tuple[ClientBump, ...], list[str]] = defaultdict(list)
    client_copies = 0
    churn_copies = 0
    for (prod, seq), found in where.items():
        if len(found) > 1 and prod == churn_producer:
            churn_copies += len(found) - 1  # not idempotent (its topic is re-created): a retry may store it twice
            continue
        if len(found) > 1:
            how = [f"{t}-{p}@{o}" + (" (producer id {}, epoch {}, batch sequence {}, leader epoch {})".format(
                *stored_by[(t, p, o)]) if (t, p, o) in stored_by else "") for t, p, o in found]
            what = f"producer {prod} seq {seq} stored {len(found)} times: {'; '.join(how)}"
            why = _client_copy(prod, seq, found, stored_by, acked_at, nacked_records, bumps)
            if why is not None:
                client_copies += len(found) - 1
                by_client[tuple(why)].append(f"seq {seq} at " + " and ".join(how))
                continue
            pids = {stored_by[f][0] for f in found if f in stored_by}
            seen = sorted({(pid, e): b for (pid, e), b in bumps.items() if pid in pids}.items())
            if seen:
                what += "; client epoch bumps: " + " | ".join(
                    f"to epoch {e} ({'; '.join(b.reasons) or 'no reason logged'}"
                    f"{'' if b.client_caused else ', not shown client-caused'})" for (_, e), b in seen)
            v.violate("duplicated", what, len(found) - 1)
    v.stats["duplicated_by_client"] = client_copies
    if churn_copies:
        v.anomalies.append(f"the churn producer (not idempotent) stored {churn_copies} record(s) twice by retrying")
    for why, copies in by_client.items():
        v.anomalies.append(
            f"producer {why[0].producer} bumped its idempotent epoch ({'; '.join(r for b in why for r in b.reasons)}) "
            f"and stored {len(copies)} record(s) again, not counted as duplicated (librdkafka; docs/chaos.md): "
            + "; ".join(copies[:2]))

    # -- order of acknowledged records, per producer and partition ----------------------------------------
    per: dict[tuple[int, str, int], list[tuple[int, int]]] = defaultdict(list)
    for _, prod, seq, topic, p, _offset in acks:
        for t2, p2, off2 in where.get((prod, seq), []):
            if (t2, p2) == (topic, p):
                per[(prod, topic, p)].append((seq, off2))
                break
    churn_reordered: list[str] = []
    for (prod, topic, p), items in per.items():
        items.sort()
        for (s1, o1), (s2, o2) in zip(items, items[1:], strict=False):
            if o2 > o1:
                continue
            what = f"producer {prod} in {topic}-{p}: seq {s1} at offset {o1} but seq {s2} at {o2}"
            if prod == churn_producer:
                churn_reordered.append(what)  # not idempotent: a batch retried after a leader change comes later
            else:
                v.violate("order", what)
    if churn_reordered:
        v.anomalies.append(
            f"the churn producer (not idempotent) stored {len(churn_reordered)} acknowledged record(s) after later "
            "ones by retrying (librdkafka drains a partition's requests to the old leader before it produces to the "
            "new one only when idempotent; max.in.flight is per connection): " + "; ".join(churn_reordered[:3]))

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
                if r.get("compacted"):
                    v.violate("divergent", f"{where_s} holds other keys or values than broker {src}'s below the high "
                                           f"watermark {r['hw_ref']} ({r.get('keys')} against {ref.get('keys')} keys)")
                    continue
                v.violate("divergent", f"{where_s} differs from broker {src}'s below the high watermark "
                                       f"{r['hw_ref']}: first differing batch at offset {r.get('first_diff_offset')}")

    # -- consumers: what they were given is what the log holds -----------------------------------------
    for (group, topic, p), items in deliveries.items():
        offsets = by_offset.get((topic, p))
        if offsets is None:
            continue
        for t_dlv, offset, prod, seq in items:
            held = offsets.get(offset)
            if held != (prod, seq) and allowed(topic, t_dlv) is not None:
                lost_allowed[f"phantom: {allowed(topic, t_dlv)}"] += 1
            elif held != (prod, seq):
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
        if allowed(topic, t_sent) is not None:
            if (offs and offset > offs[-1] + 1) or (k > 0 and maxes[k - 1] > t_sent):
                lost_allowed[f"commit-ahead: {allowed(topic, t_sent)}"] += 1
        elif offs and offset > offs[-1] + 1:
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
                if hw is not None and got != hw and allowed(topic, math.inf) is not None:
                    lost_allowed[f"group-behind: {allowed(topic, math.inf)}"] += 1
                elif hw is not None and got != hw:
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
    for why, n in lost_allowed.items():
        what = why if ":" in why.split(" ")[0] else f"lost: {why}"
        v.anomalies.append(f"{n:,} x {what} (a power loss may cause it; not a violation)")
    v.stats["power_loss_allowed"] = dict(lost_allowed)
    return v
