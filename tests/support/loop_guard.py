"""The loop-lag guard's two parts: a probe that times every step the event loop runs, and a request filler that
builds a large, awkward request of any Kafka API from its schema (issue 33).

Why: a broker is one event loop; a request that computes for 50 ms on it delays every other client by as much.
The probe wraps `asyncio.Handle._run` (every callback and task step the loop runs goes through it) and keeps the
longest step in CPU time of the loop's thread (`time.thread_time`), naming what ran: a busy machine stretches
wall time, never this. Garbage collection inside a step is left out of it and summed apart (`gc_s`): a
collection is the process's, whichever request's allocation set it off. The filler walks kafka-python's schema
of a request (struct arrays, arrays, primitives, the version each field exists in) and fills every field:
top-level arrays `width` long and the arrays inside them `inner` long, names of topics, groups and transactional
ids that exist (so the handlers do real work), long strings, a backtracking regular expression where a pattern
goes, a record batch where records go, timeouts of 0 so no request parks.

Used by `tests/broker/test_loop_lag_guard.py` (the short form in `make test`); it must never decide a verdict.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kelp.records.build import build_batch

EVIL_PATTERN = "(.*.*)*X"


@dataclass
class StepProbe:
    """The longest loop step seen while `measuring()`, in the loop thread's CPU seconds, and what ran."""

    longest_s: float = 0.0
    longest: str = ""
    steps: int = 0

    gc_s: float = 0.0  # garbage collection inside steps: left out of them (a collection is no request's doing)

    @contextmanager
    def measuring(self) -> Iterator[StepProbe]:
        handle_run = asyncio.events.Handle._run
        probe = self
        collecting: list[float] = []

        def on_gc(phase: str, _info: dict[str, int]) -> None:
            if phase == "start":
                collecting.append(time.thread_time())
            elif collecting:
                probe.gc_s += time.thread_time() - collecting.pop()

        def timed(handle: asyncio.events.Handle) -> None:
            resumes = _where(handle)  # where the step starts: a task's last step leaves no frames to name after
            start, gc_before = time.thread_time(), probe.gc_s
            try:
                handle_run(handle)
            finally:
                spent = time.thread_time() - start - (probe.gc_s - gc_before)
                probe.steps += 1
                if spent > probe.longest_s:
                    probe.longest_s, probe.longest = spent, f"{resumes} (resumed there)"

        asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
        gc.callbacks.append(on_gc)
        try:
            yield self
        finally:
            asyncio.events.Handle._run = handle_run  # type: ignore[method-assign]
            gc.callbacks.remove(on_gc)

    def reset(self) -> None:
        self.longest_s, self.longest, self.steps = 0.0, "", 0


def _where(handle: asyncio.events.Handle) -> str:
    """What a step ran: for a task's step, the coroutines it is suspended in after it (innermost last)."""
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    if not isinstance(task, asyncio.Task):
        return repr(handle)[:300]
    chain: list[str] = []
    coro: Any = task.get_coro()
    while coro is not None and len(chain) < 20:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        chain.append(f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " -> ".join(chain) or repr(handle)[:300]


@dataclass
class Names:
    """What exists on the broker, for the filler to name."""

    topics: Sequence[str]
    transactional_ids: Sequence[str]
    groups: Sequence[str] = ("fuzz-group",)
    width: int = 1000  # elements of a request's top-level arrays
    inner: int = 4  # elements of the arrays inside them (width x inner elements in all, not width^depth)
    text: int = 1000  # characters of a free string
    _count: int = field(default=0, repr=False)

    def pick(self, items: Sequence[str], i: int) -> str:
        return items[i % len(items)] if items else f"missing-{i}"


_ZERO_INTS = ("timeout", "wait", "delay", "rebalance", "session", "throttle", "duration")


def _primitive(kind: str, name: str, entity: str | None, names: Names, i: int) -> Any:
    if kind == "string":
        if entity == "topicName":
            return names.pick(names.topics, i) if i % 5 else f"no-such-topic-{i}"
        if entity == "transactionalId":
            return names.pick(names.transactional_ids, i)
        if entity == "groupId":
            return names.pick(names.groups, i)
        if "pattern" in name:
            return EVIL_PATTERN
        if "mechanism" in name:
            return "PLAIN"
        if "member_id" in name or "instance_id" in name:
            return f"member-{i}"
        return ("a" * names.text) if i % 2 == 0 else f"value-{i}"
    if kind in ("int8", "int16", "int32"):
        if name == "acks":
            return 1
        if any(word in name for word in _ZERO_INTS):
            return 0
        if "partition" in name or "index" in name:
            return i % 3
        if name.endswith("epoch"):
            return -1
        return i % 7
    if kind == "int64":
        if "producer_id" in name:
            return -1
        return 0
    if kind == "bool":
        return i % 2 == 0
    if kind == "float64":
        return float(i) * 1024
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind == "bytes":
        return b"\0user\0password" if i % 2 else b"x" * names.text
    if kind == "records":
        return build_batch([(b"k", b"v" * 100)] * 10)
    raise ValueError(f"no filler for a {kind} field ({name})")


def _fields(fields: dict[str, Any], version: int, names: Names, i: int, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n = names.width if depth == 0 else names.inner
    for name, f in fields.items():
        if not f.for_version_q(version):
            continue
        if f.is_struct_array():
            out[name] = [f.data_class(**_fields(f.fields, version, names, j, depth + 1)) for j in range(n)]
        elif f.is_struct():
            out[name] = f.data_class(**_fields(f.fields, version, names, i, depth + 1))
        elif f.is_array():
            kind = f._type_str[2:]
            out[name] = [_primitive(kind, name, f._entity_type, names, j) for j in range(n)]
        else:
            out[name] = _primitive(f._type_str, name, f._entity_type, names, i)
    return out


def filled(request_class: Any, version: int, names: Names) -> Any:
    """A request of `request_class` at `version`, every field filled (see the module docstring)."""
    return request_class(**_fields(request_class.fields, version, names, 0))


@dataclass
class Served:
    """One API version sent through `guard_every_api`: the longest loop step it took and where."""

    api: str
    version: int
    longest_s: float
    where: str


async def serve(parts: Any, spec: Any, version: int, body: bytes, principal: Any,
                peer: str = "10.1.2.3:40000") -> None:
    """The request as the listener serves it (`KafkaServer._run`): decoded from its bytes, handled as
    `principal`, its answer encoded (on the CPU pool when large, as the listener does)."""
    from kelp.broker.kafka.handlers import RequestContext
    from kelp.broker.kafka.handlers.registry import RawResponse
    from kelp.broker.kafka.server import OFF_LOOP_CODEC_BYTES, decode_request, encode_response

    frame = memoryview(bytearray(body))
    request = await decode_request(spec, frame, version)
    ctx = RequestContext(broker=parts, api_key=spec.api_key, api_version=version, correlation_id=1,
                         client_id="loop-guard", peer=peer, principal=principal)
    answer = await spec.func(ctx, request)
    if answer is not None and not isinstance(answer, RawResponse):
        await encode_response(answer, version, large=spec.decoder is None and len(body) > OFF_LOOP_CODEC_BYTES)


async def guard_every_api(parts: Any, names: Names, principal: Any, *, timeout_s: float = 5.0,
                          on_served: Any = None) -> list[Served]:
    """Every served Kafka API at its lowest and highest version, filled from `names`, served as `principal` while
    a `StepProbe` times the loop; each one's longest step. A first pass with tiny requests takes kafka-python's
    one-off codec generation (tens of ms per API version and process) out of the measured one."""
    from kelp.broker.kafka.handlers import all_handlers

    small = Names(topics=names.topics, transactional_ids=names.transactional_ids, groups=names.groups, width=2,
                  inner=1)
    for spec in all_handlers():
        for version in sorted({spec.min_version, spec.max_version}):
            try:
                body = filled(spec.request_class, version, small).encode(version=version)
                await asyncio.wait_for(serve(parts, spec, version, body, principal), timeout_s)
            except Exception:  # refused or invalid: the codecs are generated either way
                pass
    probe = StepProbe()
    out: list[Served] = []
    with probe.measuring():
        for spec in all_handlers():
            for version in sorted({spec.min_version, spec.max_version}):
                body = filled(spec.request_class, version, names).encode(version=version)
                await asyncio.sleep(0)  # the step that built the request (the client's work) ends here
                probe.reset()  # from here on: what the broker does (decode, handle, encode), nothing of the client
                try:
                    await asyncio.wait_for(serve(parts, spec, version, body, principal), timeout_s)
                except Exception:  # refused, invalid or timed out: the loop time is what is measured
                    pass
                out.append(Served(spec.name, version, probe.longest_s, probe.longest))
                if on_served is not None:
                    on_served(out[-1])
    return out
