"""Regular expressions clients send: compiled by RE2 (linear time), matched off the event loop.

Why: ListTransactions v2 (KIP-1152) carries a transactional-id pattern, a Java regular expression that Kafka
matches against the whole of each id (`Pattern.matcher(id).matches()`); `GET /admin/v1/transactions?pattern=`
takes the same. Python's `re` backtracks: `(.*.*)*X` against a 30-character id runs for seconds, and on the
broker's one event loop no other request is served meanwhile (issue 33, item 1). RE2 (Google's, through the
`google-re2` binding) runs in time linear in the pattern and the text, and releases the GIL while it matches,
so the match runs on the bounded CPU pool (`cpu_work`) and the loop keeps serving.

Kafka's semantics kept: the whole id must match; an empty or null pattern filters nothing; a pattern that does
not compile is INVALID_REGULAR_EXPRESSION (HTTP 400), its message naming what RE2 refused. Where Java and RE2
differ, RE2 refuses rather than guesses: backreferences (`\\1`), lookaround (`(?=`, `(?!`, `(?<=`), atomic
groups (`(?>`) and possessive quantifiers (`a*+`) need backtracking and are refused as not compiling, and so is
a pattern whose compiled program is over `MAX_PROGRAM_BYTES`. Java's `.` also stops at `\\r` and `\\u2028`,
RE2's only at `\\n` (transactional ids hold neither in practice).

Callers filter by everything cheaper (the ACLs first, then states and producer ids) before they match, so a
pattern is only ever tried against ids the caller may see. This module must never match on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .cpu_work import run_cpu

if TYPE_CHECKING:
    import re2

__all__ = ["InvalidPattern", "full_matches", "MAX_PROGRAM_BYTES"]

# RE2's memory budget for one compiled pattern (its default is 8 MiB): past it the pattern does not compile.
MAX_PROGRAM_BYTES = 1 << 20


class InvalidPattern(ValueError):
    """A client's pattern that RE2 does not compile; the message says why (Kafka: INVALID_REGULAR_EXPRESSION)."""


def _options() -> re2.Options:
    import re2  # with its C++ runtime about 2 MiB, loaded by the first pattern (on the CPU pool; issue 38)

    options = re2.Options()
    options.max_mem = MAX_PROGRAM_BYTES
    options.never_capture = True  # only whether it matches: no groups to track
    options.log_errors = False  # refusals are the caller's to report, not RE2's stderr
    return options


def _match_all(pattern: str, names: Sequence[str]) -> list[str]:
    import re2

    try:
        compiled = re2.compile(pattern.encode("utf-8"), _options())
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidPattern(f"{detail} (patterns are matched by RE2: no backreferences, lookaround, atomic "
                             "groups or possessive quantifiers)") from None
    fullmatch = compiled.fullmatch
    return [name for name in names if fullmatch(name.encode("utf-8")) is not None]


async def full_matches(pattern: str, names: Sequence[str]) -> list[str]:
    """The `names` the whole of which `pattern` matches, in their order (on the CPU pool); InvalidPattern when it
    does not compile."""
    return await run_cpu(_match_all, pattern, list(names))
