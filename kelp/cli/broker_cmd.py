"""`kelp broker [flags]`: run a broker in this process (delegates to `kelp.broker.__main__.main`).

It must never parse broker flags itself: the broker's parser is the one source.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register", "run"]


def run(argv: list[str]) -> int:
    from kelp.broker.__main__ import main as broker_main

    return broker_main(argv)


def register(subparsers: Any) -> None:
    # Only for `kelp --help`: main() hands `kelp broker ...` to the broker's own parser.
    p = subparsers.add_parser("broker", help="run a broker (see `kelp broker --help`)", add_help=False)
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: run(a.args))
