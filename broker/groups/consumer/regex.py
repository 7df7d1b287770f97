"""Regex subscriptions of KIP-848 consumer groups (ConsumerGroupHeartbeat v1's SubscribedTopicRegex).

Why: a Kafka 4 consumer subscribing with a pattern (`subscribe(SubscriptionPattern)`, librdkafka's `^topic-.*`
with `group.protocol=consumer`) no longer lists the topics itself: it sends the regex and the coordinator
matches it, RE2/J-style, against the whole of every topic name, now and whenever topics are created or
deleted, and assigns the matching topics' partitions. Kelp matches with RE2 (`kelp.broker.client_patterns`:
linear time, on the CPU pool, never on the event loop); a regex RE2 does not compile is
INVALID_REGULAR_EXPRESSION with Kafka's message (`Utils.throwIfRegularExpressionIsInvalid`), and the member is
not admitted. The topics a regex matched are filtered by the subscribing member's DESCRIBE permission, as
Kafka's `filterTopicDescribeAuthorizedTopics` does with the context of the member that caused the resolution.

Bounded work: `RegexRefresh` runs at most one resolution per group at a time; topic changes arriving meanwhile
coalesce into one more pass, and each pass matches each distinct regex of the group once against the topic
names. This module must never change a group: it computes matches, the coordinator writes and applies them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

from ...client_patterns import InvalidPattern, full_matches

__all__ = ["TopicFilter", "InvalidPattern", "resolve", "invalid_message", "RegexRefresh"]

log = logging.getLogger("kelp.broker.groups")

TopicFilter = Callable[[set[str]], set[str]]
"""The subset of topic names a member may describe (its ACLs); None when authorization is off."""


async def resolve(regex: str, names: Iterable[str], allowed: TopicFilter | None) -> frozenset[str]:
    """The topic names the whole of which `regex` matches, that the member may describe (on the CPU pool);
    InvalidPattern when RE2 does not compile it."""
    matched = set(await full_matches(regex, sorted(names)))
    return frozenset(allowed(matched) if allowed is not None and matched else matched)


def invalid_message(regex: str, exc: InvalidPattern) -> str:
    return f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}."


class RegexRefresh:
    """One background resolution per group at a time; requests while one runs coalesce into one more pass."""

    def __init__(self, refresh: Callable[[str], Awaitable[None]]) -> None:
        self._refresh = refresh
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()

    def request(self, group_id: str) -> None:
        if group_id in self._running:
            self._again.add(group_id)
            return
        try:
            task = asyncio.get_running_loop().create_task(self._run(group_id))
        except RuntimeError:  # no loop (metadata applied synchronously in a unit test): nothing to refresh
            return
        self._running[group_id] = task
        task.add_done_callback(lambda _t: self._running.pop(group_id, None))

    async def _run(self, group_id: str) -> None:
        while True:
            self._again.discard(group_id)
            try:
                await self._refresh(group_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed pass leaves the group as it was; the next topic change retries
                log.exception("resolving the regexes of consumer group '%s' failed", group_id)
            if group_id not in self._again:
                return

    async def settled(self, timeout_s: float) -> None:
        """Wait (bounded) until no resolution runs: what the topic changes so far caused is applied."""
        async with asyncio.timeout(timeout_s):
            while self._running:
                await asyncio.wait(list(self._running.values()))

    def stop(self) -> None:
        for task in self._running.values():
            task.cancel()
        self._running.clear()
        self._again.clear()
