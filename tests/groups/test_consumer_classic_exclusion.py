"""A group id is a classic or a consumer-protocol (KIP-848) group (issue 36): as Kafka 4, a classic JoinGroup on
a consumer group with members makes a classic member of it (mixed groups, `test_consumer_migration`), a
ConsumerGroupHeartbeat on a classic group with members is GROUP_ID_NOT_FOUND unless the migration policy lets it
upgrade the group, and an empty group of either kind is replaced by the other with its committed offsets kept.
Attacked with the adversary's interleaving: a JoinGroup arriving while the first heartbeat's write is in flight."""

from __future__ import annotations

import asyncio

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from kelp.broker.groups.group import CommittedOffset
from kelp.errors import ErrorCode

from .harness import MemoryStore, settle
from .test_consumer_reconciliation import Client, G, make

PROTO = [("range", bytes(ConsumerProtocolSubscription(version=0, topics=["t"], user_data=b"").encode()))]


def classic_join(coord: object, member: str = "") -> asyncio.Future:
    return asyncio.ensure_future(coord.join_group(  # type: ignore[attr-defined]
        G, member, session_timeout_ms=10000, rebalance_timeout_ms=10000, protocol_type="consumer",
        protocols=PROTO))


async def test_a_classic_join_on_a_consumer_group_with_members_becomes_a_classic_member_of_it() -> None:
    coord, _ = make()
    a = Client(coord, "A")
    await a.beat()
    r = await asyncio.wait_for(classic_join(coord, "J"), 5)
    assert r.error == ErrorCode.NONE and r.protocol_name == "range" and r.leader == "" and not r.members
    assert coord.consumer.groups[G].members["J"].classic is not None
    assert not (coord.groups.get(G) and coord.groups[G].members)
    assert (await a.beat()).error == ErrorCode.NONE


async def test_a_join_racing_the_first_heartbeats_write_joins_the_consumer_group() -> None:
    store = MemoryStore()
    coord, _ = make(store)
    store.gate = asyncio.Event()  # the first heartbeat's records are being replicated
    beat = asyncio.ensure_future(Client(coord, "A").beat())
    await settle()
    join = classic_join(coord, "J")
    await settle()
    assert not join.done(), "the join waits for the heartbeat under way"
    store.gate.set()
    assert (await asyncio.wait_for(beat, 5)).error == ErrorCode.NONE
    assert (await asyncio.wait_for(join, 5)).error == ErrorCode.NONE
    assert set(coord.consumer.groups[G].members) == {"A", "J"}
    assert not (coord.groups.get(G) and coord.groups[G].members)


async def test_an_empty_consumer_group_becomes_classic_and_keeps_its_offsets() -> None:
    store = MemoryStore()
    coord, sched = make(store)
    a = Client(coord, "A")
    await a.beat()
    err = await coord.commit_offsets(G, offsets={("t", 0): CommittedOffset(42)}, member_id="A",
                                     generation=a.epoch, api_version=9)
    assert err == {("t", 0): ErrorCode.NONE}
    assert (await a.beat(epoch=-1)).error == ErrorCode.NONE  # A leaves: the consumer group is empty
    join = classic_join(coord)
    await sched.advance(2 * coord.config.initial_rebalance_delay_ms + 1)
    r = await asyncio.wait_for(join, 5)
    assert r.error == ErrorCode.NONE
    assert G not in coord.consumer.groups
    assert coord.groups[G].offsets[("t", 0)].offset == 42
    replayed, _ = make(store)  # the consumer group's records were tombstoned: it does not come back
    assert G not in replayed.consumer.groups


async def test_a_heartbeat_on_a_classic_group_with_members_is_group_id_not_found_without_upgrade() -> None:
    coord, sched = make(consumer_migration_policy="disabled")
    join = classic_join(coord)
    await sched.advance(2 * coord.config.initial_rebalance_delay_ms + 1)
    assert (await asyncio.wait_for(join, 5)).error == ErrorCode.NONE
    r = await Client(coord, "A").beat()
    assert (r.error, r.message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {G} is not a consumer group.")
    assert G not in coord.consumer.groups
