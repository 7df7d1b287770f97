"""The security section's printed report (bench/security/section.py): Kelp beside Kafka per listener and case, the CPU
that TLS and SASL cost per GB, and the cost of ACL checks.

Why: the section's measuring and its printing are separate roles; this module only formats a result dict.
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["print_report", "ACL_PREFIX", "CASES"]

# The section's topic prefix for the ACL-check runs and its cases, named here (the section imports this module).
ACL_PREFIX = "acl-bench-"
CASES = ("produce acks=1", "produce acks=all", "consume")

def _fmt(value: float | None, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def _paired_ratios(row: dict[str, Any]) -> list[float]:
    """Kelp's rate over Kafka's in each run (the two measured back to back, so load drift hits both alike)."""
    return [k / f for k, f in zip(row["kelp"]["runs_mb_s"], row["kafka"]["runs_mb_s"], strict=True)]


def print_report(res: dict[str, Any]) -> None:
    from kelp.cli.output import print_table

    rows = res["rows"]
    brokers = [b for b in ("kelp", "kafka", "cluster") if any(b in r for r in rows)]
    both = brokers == ["kelp", "kafka"]
    where = f" against {res['bootstrap']}" if "bootstrap" in res else ""
    print(f"\nsecurity{where}: {res['records']:,} records of {res['size']:,} B produced per run, "
          f"{res['consume_records']:,} consumed from offset 0; medians of {res['runs']} run(s)"
          + (", alternating which broker goes first" if both else ""))
    header = ["SECURITY", "CASE"]
    for b in brokers:
        header += [f"{b.upper()} MB/s", f"{b.upper()} rec/s"]
    if both:
        header += ["KELP/KAFKA", "PER RUN (min-max)"]
    for b in brokers:
        if b != "cluster":
            header.append(f"{b.upper()} CPU s/GB")
    header.append("CLIENT CPU s/GB" + (" (kelp | kafka)" if both else ""))
    table = []
    for r in rows:
        line = [r["security"], r["case"]]
        for b in brokers:
            line += [_fmt(r[b]["mb_s"]), _fmt(r[b]["records_s"], ",.0f")]
        if both:
            paired = _paired_ratios(r)
            line += [f"{r['kelp']['mb_s'] / r['kafka']['mb_s']:.2f}x",
                     f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f})"]
        for b in brokers:
            if b != "cluster":
                line.append(_fmt(r[b]["broker_cpu_s_per_gb"], ".2f"))
        line.append(" | ".join(_fmt(r[b]["client_cpu_s_per_gb"], ".2f") for b in brokers))
        table.append(line)
    print_table(table, header)
    if both:
        print("KELP/KAFKA: the medians' ratio; PER RUN: the median (and range) of each run's ratio, the two brokers "
              "measured back to back")
    print("MB/s: 10^6 B of record values per second; CPU s/GB: utime+stime of the broker's processes (client: this "
          "process, librdkafka's threads) per 10^9 B of values")
    if res["tls"]:
        print("TLS negotiated (SSL listener, an OpenSSL client): "
              + "; ".join(f"{b} {v}" for b, v in res["tls"].items()))
    cpu = {(r["security"], r["case"], b): r[b]["broker_cpu_s_per_gb"] for r in rows for b in brokers
           if b != "cluster" and r[b]["broker_cpu_s_per_gb"] is not None}
    secured_modes = [m for m in res["modes"] if m != "PLAINTEXT"]
    columns = [(b, m) for b in brokers for m in secured_modes if b != "cluster"]
    if "PLAINTEXT" in res["modes"] and columns:
        cost_rows = []
        for case in CASES:
            line = [case]
            for b, m in columns:
                plain, secured_cpu = cpu.get(("PLAINTEXT", case, b)), cpu.get((m, case, b))
                line.append("-" if plain is None or secured_cpu is None else f"{secured_cpu - plain:+.2f}")
            cost_rows.append(line)
        print_table(cost_rows, ["SECURITY'S CPU s/GB OVER PLAINTEXT", *(f"{b.upper()} {m}" for b, m in columns)])
    if both:
        secured = [r for r in rows if r["security"] != "PLAINTEXT"]
        slower = [f"{r['security']} {r['case']} {r['kelp']['mb_s'] / r['kafka']['mb_s']:.2f}x" for r in secured
                  if r["kelp"]["mb_s"] < r["kafka"]["mb_s"]]
        if secured:
            verdict = "met" if not slower else "MISSED"
            print(f"goal Kelp >= 1.0x Kafka with TLS and SASL_SSL: {verdict}"
                  + (f" (below on {', '.join(slower)})" if slower else ""))
    acl = res.get("acl")
    if acl:
        print(f"ACL cost: two Kelp brokers alike but for the authorizer, acks=1 produce of {res['records']:,} "
              f"records as alice over SASL_PLAINTEXT (SCRAM-SHA-512), medians of {acl['runs']} alternating runs")
        print_table([["no authorizer", _fmt(acl["none"]["mb_s"]), _fmt(acl["none"]["records_s"], ",.0f"),
                      _fmt(acl["none"]["broker_cpu_s_per_gb"], ".2f"), "-", "-"],
                     [f"authorizer, {acl['acl_count']:,} ACLs", _fmt(acl["acls"]["mb_s"]),
                      _fmt(acl["acls"]["records_s"], ",.0f"), _fmt(acl["acls"]["broker_cpu_s_per_gb"], ".2f"),
                      f"{acl['delta_pct']:+.1f}%", _fmt(acl["cpu_delta_pct"], "+.1f") + "%"]],
                    ["ACLS", "MB/s", "rec/s", "CPU s/GB", "TIME DELTA", "CPU/GB DELTA"])
        print(f"ACLs: {acl['acl_count'] - 1:,} LITERAL WRITE ACLs of other users and topics, one PREFIXED WRITE ACL "
              f"({ACL_PREFIX}*) allowing alice; each run's time delta (the two back to back) "
              f"{acl['paired_delta_pct']} %, median {statistics.median(acl['paired_delta_pct']):+.1f}% (the noise)")
    load = res["load_average"]
    print(f"machine: {res['cpus']} CPUs, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
          "(client and brokers share them)")
