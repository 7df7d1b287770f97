"""An in-process broker with an authorizer whose Kafka handlers are called as any principal.

Why: authorization depends on the principal a connection authenticated as, and TLS/SASL is another
slice's; a `RequestContext` built here carries the principal and peer a listener would give it, the request
goes through the handler exactly as the server dispatches it (decoded from its encoded bytes, with the
handler's own decoder), and the answer is encoded and decoded again as a client would read it. Nothing
here is reachable from the network.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path
from typing import Any

from kafka.protocol.api_message import ApiMessage

from kelp.broker.app import Broker
from kelp.broker.kafka.handlers import RequestContext, get_handler
from kelp.broker.kafka.handlers.registry import RawResponse
from kelp.broker.parts import BrokerParts
from kelp.config.broker import BrokerConfig
from kelp.config.keys import KELP_AUTHORIZER
from kelp.security.principal import KafkaPrincipal

ADMIN = KafkaPrincipal.user("admin")
PEER = "10.1.2.3:40000"

_correlation = itertools.count(1)


def broker_config(directory: Path, **settings: object) -> BrokerConfig:
    return BrokerConfig.load(env={}, overrides={
        "log.dirs": str(directory), "port": 0, "http.port": 0, "host": "127.0.0.1",
        "offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
        "authorizer.class.name": KELP_AUTHORIZER, "super.users": str(ADMIN), **settings})


def _body(buffers: list[Any]) -> bytes:
    out = bytearray()
    for buf in buffers:
        if isinstance(buf, (bytes, bytearray, memoryview)):
            out += buf
        else:  # a file range the listener would send with sendfile
            out += os.pread(buf.file.fileno(), buf.size, buf.position)
            buf.close()
    return bytes(out)


async def call(parts: BrokerParts, request: ApiMessage, version: int, *, principal: KafkaPrincipal = ADMIN,
               peer: str = PEER) -> Any:
    """The handler's answer to `request` (sent in `version`) from `principal` at `peer`, as a client decodes it;
    None for a request answered with nothing (acks=0)."""
    spec = get_handler(request.API_KEY)
    assert spec is not None, f"API key {request.API_KEY} is not served"
    assert spec.min_version <= version <= spec.max_version, f"{spec.name} v{version} is not served"
    body = memoryview(bytearray(request.encode(version=version)))
    decoded = spec.decoder(body, version) if spec.decoder is not None else spec.request_class.decode(
        bytes(body), version=version)
    ctx = RequestContext(broker=parts, api_key=spec.api_key, api_version=version, correlation_id=next(_correlation),
                         client_id="acl-matrix", peer=peer, principal=principal)
    answer = await spec.func(ctx, decoded)
    if answer is None:
        return None
    raw = _body(list(answer.buffers)) if isinstance(answer, RawResponse) else bytes(answer.encode(version=version))
    return spec.response_class.decode(raw, version=version)


class InProcessBroker:
    """`async with InProcessBroker(dir) as b:` a started broker; `b.parts`, `await b.call(...)`."""

    def __init__(self, directory: Path, **settings: object) -> None:
        self.broker = Broker(broker_config(directory, **settings))

    async def __aenter__(self) -> "InProcessBroker":
        await self.broker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.broker.stop()

    @property
    def parts(self) -> BrokerParts:
        assert self.broker.parts is not None
        return self.broker.parts

    async def call(self, request: ApiMessage, version: int, *, principal: KafkaPrincipal = ADMIN,
                   peer: str = PEER) -> Any:
        return await call(self.parts, request, version, principal=principal, peer=peer)

    async def init_transactional_id(self, tid: str) -> tuple[int, int]:
        """This broker coordinates `tid` (its __transaction_state partition created and loaded) and the id is
        initialised: (producer id, epoch)."""
        from kafka.protocol.metadata import FindCoordinatorRequest
        from kafka.protocol.producer import InitProducerIdRequest

        for _ in range(300):
            found = await self.call(FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]), 4)
            if found.coordinators[0].error_code == 0 and self.parts.transactions.check(tid) == 0:
                init = await self.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                                             producer_id=-1, producer_epoch=-1), 4)
                assert init.error_code == 0, init
                return init.producer_id, init.producer_epoch
            await asyncio.sleep(0.02)
        raise AssertionError(f"the broker never coordinated transactional id {tid}")
