"""Topic ids in OffsetCommit v10 and OffsetFetch v10 (Kafka 4.1+, KIP-848's follow-up): ids to names and back.

Why: from v10 these two requests name each topic by its id, never its name, and the answers carry the id. The group
handlers (`groups.py`) keep working by name, as the coordinator stores offsets by name; this module is the one
place that turns a request's id into the name of the topic that has it now (None for an id no topic has, the
zero UUID included: Kafka answers UNKNOWN_TOPIC_ID for it) and a name back into its current id. An id stays with
its topic: a deleted topic's id never resolves, even when a topic of the same name is created again (the new one
has a new id), so a commit by the old id cannot land on the new topic.

This module must never authorize or decide group rules: it only looks up `ctx.broker.topics`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from .registry import RequestContext

__all__ = ["TOPIC_IDS_VERSION", "NO_ID", "NamedTopic", "name_of", "id_of"]

TOPIC_IDS_VERSION = 10  # the first OffsetCommit and OffsetFetch version that names topics by id
NO_ID = uuid.UUID(int=0)


@dataclass(frozen=True)
class NamedTopic:
    """A topic of an OffsetFetch v10 request once its id is resolved: what `groups._fetch_group` reads."""

    name: str
    partition_indexes: list[int] = field(default_factory=list)


def name_of(ctx: RequestContext, topic_id: uuid.UUID | None) -> str | None:
    """The name of the topic that has `topic_id` now; None for an unknown or zero id."""
    if topic_id is None or topic_id == NO_ID:
        return None
    return ctx.broker.topics.name_of(topic_id.hex)


def id_of(ctx: RequestContext, name: str) -> uuid.UUID | None:
    """The current id of topic `name`; None when no topic has that name (a deleted topic's offsets may linger)."""
    info = ctx.broker.topics.get(name)
    if info is None or not info.topic_id:
        return None
    return uuid.UUID(hex=info.topic_id)
