"""`kelp operator`: run the Kubernetes operator (what the chart's Deployment runs).

Why: broker and operator ship in one image and one console script; the
operator's logic lives in `kelp.operator`, this module only parses flags.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def cmd_operator(args: argparse.Namespace) -> int:
    from kelp.operator.run import main

    return main(args)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("operator", help="run the Kubernetes operator for Cluster, Topic and ConsumerGroup")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch resources in every namespace")
    scope.add_argument("--namespace", "-n", action="append", metavar="NS",
                   help="watch this namespace, repeatable (instead of --all-namespaces)")
    p.add_argument("--liveness", metavar="URL", help="serve a liveness endpoint, e.g. http://0.0.0.0:8081/healthz")
    p.add_argument("--lease-namespace", metavar="NS",
                   help="namespace of the election Lease kelp-operator (env KELP_OPERATOR_NAMESPACE; "
                        "default the first --namespace, else default)")
    p.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS",
                   help="how long a silent active replica keeps the Lease (15)")
    p.set_defaults(func=cmd_operator)
