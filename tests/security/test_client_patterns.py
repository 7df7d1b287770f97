"""Client regular expressions (issue 33, item 1): ListTransactions v2's transactional-id pattern and
`GET /admin/v1/transactions?pattern=` are matched by RE2 off the event loop, after the ACLs.

The attack: `(.*.*)*X` against a 13-character id backtracks for about a second in Python's `re`, on the
broker's only loop. Each attack test measures the CPU time the loop's thread spent while the request ran (not
wall time, which a busy machine stretches): the old code spent the whole backtracking there.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest
from kafka.protocol.admin import ListTransactionsRequest

from kelp.broker.client_patterns import InvalidPattern, full_matches
from kelp.errors import ErrorCode
from tests.authorization.harness import InProcessBroker
from tests.authorization.matrix import BOB, acl, grant

EVIL = "(.*.*)*X"
# Python's re needs about 0.3 s for (.*.*)*X against 12 characters, ten times that per two more.
VICTIMS = ("a" * 12, "b" * 13)
LOOP_CPU_BOUND_S = 0.05  # the bound on one request's loop time


def _list(pattern: str | None) -> ListTransactionsRequest:
    return ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1,
                                   transactional_id_pattern=pattern)


# -- the matcher -------------------------------------------------------------------------------------------------
async def test_whole_id_match_as_javas_matches() -> None:
    ids = ["my-special-0", "your-special-1", "plain", "ünïcode-1"]
    assert await full_matches(".*special-.*", ids) == ["my-special-0", "your-special-1"]
    assert await full_matches("special", ids) == []  # a part of an id is no match (Matcher.matches)
    assert await full_matches("(?<name>pl)ain|\\p{L}+code-\\d", ids) == ["plain", "ünïcode-1"]
    assert await full_matches("\\Q.*\\E", [".*", "ab"]) == [".*"]


@pytest.mark.parametrize("pattern", ["(ab(cd", "(a)\\1", "(?=a)a", "(?!b)a", "(?<=a)b", "(?>a)", "a*+",
                                     "x{1001}", "(?:" + "a" * 1000 + "){100}"])
async def test_patterns_that_need_backtracking_or_are_too_big_are_refused(pattern: str) -> None:
    with pytest.raises(InvalidPattern) as refused:
        await full_matches(pattern, ["a"])
    assert str(refused.value)  # says what RE2 refused


async def test_the_evil_pattern_is_linear_and_off_the_loop() -> None:
    ids = [f"{c}" * 200 for c in "abcdefghij"] * 100  # 1,000 ids of 200 characters
    cpu = time.thread_time()
    assert await full_matches(EVIL, ids) == []
    assert time.thread_time() - cpu < LOOP_CPU_BOUND_S


# -- the attack, through the broker ------------------------------------------------------------------------------
@pytest.fixture
async def b(tmp_path: Path):
    async with InProcessBroker(tmp_path) as broker:
        for tid in VICTIMS:
            await broker.init_transactional_id(tid)
        yield broker


async def test_list_transactions_v2_evil_pattern_does_not_hold_the_loop(b: InProcessBroker) -> None:
    await grant(b, acl("TRANSACTIONAL_ID", "*", "DESCRIBE"))
    cpu = time.thread_time()
    listed = await b.call(_list(EVIL), 2, principal=BOB)
    spent = time.thread_time() - cpu
    assert listed.error_code == 0 and listed.transaction_states == []
    assert spent < LOOP_CPU_BOUND_S, f"the loop's thread computed for {spent * 1000:.0f} ms"
    listed = await b.call(_list("a+|c+"), 2, principal=BOB)
    assert [t.transactional_id for t in listed.transaction_states] == [VICTIMS[0]]
    listed = await b.call(_list("(a)\\1"), 2, principal=BOB)  # a backreference: RE2 refuses it, Kafka's error
    assert listed.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


async def test_list_transactions_matches_only_ids_the_principal_may_describe(b: InProcessBroker, monkeypatch) -> None:
    seen: list[list[str]] = []
    from kelp.broker.kafka.handlers import transactions

    async def spy(pattern: str, names: list[str]) -> list[str]:
        seen.append(list(names))
        return await full_matches(pattern, names)

    monkeypatch.setattr(transactions, "full_matches", spy)
    await grant(b, acl("TRANSACTIONAL_ID", VICTIMS[1], "DESCRIBE"))
    listed = await b.call(_list(".*"), 2, principal=BOB)
    assert [t.transactional_id for t in listed.transaction_states] == [VICTIMS[1]]
    assert seen == [[VICTIMS[1]]]  # the pattern never saw the id bob may not describe


async def test_admin_transactions_evil_pattern_does_not_hold_the_loop(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"authorizer.class.name": ""}) as b:
        for tid in VICTIMS:
            await b.init_transactional_id(tid)
        base = f"http://127.0.0.1:{b.broker.http_port}/admin/v1/transactions?pattern="

        def get(pattern: str) -> tuple[int, dict]:
            try:
                with urllib.request.urlopen(base + urllib.request.quote(pattern), timeout=30) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        cpu = time.thread_time()
        status, body = await asyncio.to_thread(get, EVIL)
        spent = time.thread_time() - cpu
        assert (status, body["transactions"]) == (200, [])
        assert spent < LOOP_CPU_BOUND_S, f"the loop's thread computed for {spent * 1000:.0f} ms"
        status, body = await asyncio.to_thread(get, "b+")
        assert [t["transactional_id"] for t in body["transactions"]] == [VICTIMS[1]]
        status, body = await asyncio.to_thread(get, "(?=a)")
        assert status == 400 and "not a valid regular expression" in body["message"]
