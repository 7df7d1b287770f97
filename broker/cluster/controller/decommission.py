"""Decommissioning a broker: the controller marks it leaving, places nothing new on it, and says what it holds.

Why: a broker about to be removed for good (a StatefulSet scale-down deletes the highest pods) must be
emptied first, and must *stay* empty until it is gone. Draining alone cannot promise that: topics created
meanwhile (an application auto-creating them, a Topic growing partitions) are placed on every live broker,
so a drain that checked "nothing left" a moment before the shrink can still strand new replicas on the
broker that goes. Redpanda and KRaft decommission first: the controller records that the broker is
leaving (Kafka's controlled decommission / UnregisterBroker), never places new replicas or leaders on it,
and reports what it still holds, so whoever removes it checks the controller's answer right before.

Here the mark is the `decommissioned` field of the broker's `broker` record in the metadata log (it
survives the broker's restarts and controller failovers; a re-registration leaves it as it is).
Placement of new partitions skips decommissioned brokers, manual assignments and reassignments may not
add replicas on them, and elections pick them as leader only when no other in-sync replica can lead
(`elections.Election.decommissioned`). Recommissioning removes the mark (a scale-down cancelled, or a
scale-up reusing the id).

Composed by `core.Controller`, which gives it the shared state (`state`) and the one fenced write path (`writer`);
every change is one metadata-log entry; nothing here does I/O itself.
"""

from __future__ import annotations

import logging

from kelp.errors import InvalidRequestError

from ...metadata.controller_answers import DecommissionAnswer
from ...metadata.records import broker_record
from .state import ControllerState
from .writer import MetadataWriter

__all__ = ["Decommissions", "MAX_LISTED_PARTITIONS"]

log = logging.getLogger("kelp.broker.controller")

MAX_LISTED_PARTITIONS = 100  # an answer names at most this many partitions; the counts are whole


class Decommissions:
    """Decommission and recommission broker ids, and report what a broker still holds, on the controller."""

    def __init__(self, state: ControllerState, writer: MetadataWriter) -> None:
        self.state = state
        self.writer = writer

    async def decommission_broker(self, *, broker_id: int, decommissioned: bool = True) -> DecommissionAnswer:
        """Mark `broker_id` leaving (or, with `decommissioned` false, back in service); answers what it holds.

        An id no broker registered yet may be marked too: a broker id that is about to be removed must not
        receive replicas if its process registers in between."""
        if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
            raise InvalidRequestError(f"decommission: broker id {broker_id!r} must be an integer >= 0")
        if not isinstance(decommissioned, bool):
            raise InvalidRequestError(f"decommission: 'decommissioned' must be true or false, got {decommissioned!r}")
        async with self.state.lock:
            self.writer.check_fresh()
            reg = self.state.image.brokers.get(broker_id)
            if (reg is not None and reg.decommissioned) != decommissioned:
                await self.writer.append([broker_record(broker_id, reg.incarnation if reg else "",
                                                  shutting_down=reg.shutting_down if reg else False,
                                                  decommissioned=decommissioned)])
                log.info("broker %d %s", broker_id, "decommissioned: no new replicas or leaders go there"
                         if decommissioned else "recommissioned: it takes new replicas again")
            return self._holdings(broker_id)

    async def broker_holdings(self, *, broker_id: int) -> DecommissionAnswer:
        """What `broker_id` holds as of the controller's image: replicas (moves to it included) and leaderships."""
        if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
            raise InvalidRequestError(f"broker holdings: broker id {broker_id!r} must be an integer >= 0")
        async with self.state.lock:
            self.writer.check_fresh()
            return self._holdings(broker_id)

    def _holdings(self, broker_id: int) -> DecommissionAnswer:
        listed: list[str] = []
        replicas = leaders = 0
        for t in self.state.topics.values():
            for p, s in enumerate(t.partition_states):
                if broker_id in s.replicas:
                    replicas += 1
                    if len(listed) < MAX_LISTED_PARTITIONS:
                        listed.append(f"{t.name}-{p}")
                if s.leader == broker_id:
                    leaders += 1
        reg = self.state.image.brokers.get(broker_id)
        return {"broker_id": broker_id, "decommissioned": reg is not None and reg.decommissioned,
                "registered": reg is not None and bool(reg.incarnation), "alive": broker_id in self.state.alive,
                "replicas": replicas, "leaders": leaders, "partitions": listed,
                "metadata_offset": self.state.image.offset}
