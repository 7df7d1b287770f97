"""The control-plane proxy: all HTTP between brokers passes through here, where it can be dropped or delayed.

Why: issue 17 item 2 — metadata pushes that time out and arrive later, out
of order, or not at all. Faults at the network level keep working whatever
the brokers say to each other over that port (the control-plane protocol
may change): in each broker's network namespace an iptables DNAT rule sends
connections to a peer's HTTP port to this proxy's listener for that ordered
pair (src -> dst), and the proxy connects on to the real peer. Per pair it
passes bytes through, or by the rules in force:

- `drop`: new connections are accepted and their bytes swallowed, nothing
  is forwarded or answered (a blackhole: the client times out); connections
  already open stall while the rule holds (TCP retransmitting), and what
  they carry arrives once it is lifted.
- `reset`: new connections are closed at once with a RST, and open ones
  when they next carry a byte.
- `delay`: each connection draws a share in [0, 1) when it opens; while a
  delay rule holds, every byte it carries, in either direction, is forwarded
  lo_ms + share * (hi_ms - lo_ms) after it arrived (never before an earlier
  byte of the same connection). A client that
  gives up and closes does not take its request back: the bytes already sent
  still reach the server late, after requests sent later on connections
  with shorter delays — request-level reordering across connections, as
  with a slow network and handlers that are not cancelled.

Run as `python -m tests.chaos.proxy --listen IP --seed N --pair SRC:DST:HOST:PORT ...`;
it prints `{"event": "proxy-listening", "ports": {"SRC-DST": port}}` and then
reads JSON commands on stdin, one per line: `{"op": "rules", "rules": [{"src",
"dst", "action", "lo_ms", "hi_ms"}]}` replaces the rules ("*" matches any
broker), `{"op": "stats"}` prints the counters. EOF on stdin stops it.

It must never decide anything itself: what to drop or delay comes from the
nemesis, drawn from the run's seed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import struct
import sys
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass
class Rule:
    src: str
    dst: str
    action: str
    lo_ms: float = 0.0
    hi_ms: float = 0.0

    def matches(self, src: int, dst: int) -> bool:
        return self.src in ("*", str(src)) and self.dst in ("*", str(dst))


@dataclass
class Stats:
    connections: int = 0
    dropped: int = 0
    reset: int = 0
    delayed: int = 0
    late_after_close: int = 0  # connections whose client had closed before all its bytes reached the server
    bytes: int = 0
    pairs: dict[str, int] = field(default_factory=dict)


class Proxy:
    def __init__(self, seed: int) -> None:
        self.rules: list[Rule] = []
        self.rng = random.Random(seed)
        self.stats = Stats()

    def rule_for(self, src: int, dst: int) -> Rule | None:
        for rule in self.rules:
            if rule.matches(src, dst):
                return rule
        return None

    async def serve(self, src: int, dst: int, host: str, port: int,
                    reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        key = f"{src}-{dst}"
        self.stats.pairs[key] = self.stats.pairs.get(key, 0) + 1
        rule = self.rule_for(src, dst)
        if rule is not None and rule.action == "reset":
            self.stats.reset += 1
            _reset(writer)
            return
        if rule is not None and rule.action == "drop":
            self.stats.dropped += 1
            await self._swallow(reader, writer)
            return
        # Where a delay rule holds (now or later), this connection's bytes wait lo + share * (hi - lo):
        # one share per connection, so connections overtake each other but bytes within one never do.
        share = self.rng.random()
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        except (OSError, asyncio.TimeoutError):
            writer.close()
            return
        client_closed = asyncio.Event()
        await asyncio.gather(
            self._pipe(reader, up_writer, writer, src, dst, share, client_closed, upstream=True),
            self._pipe(up_reader, writer, up_writer, src, dst, share, client_closed, upstream=False),
            return_exceptions=True,
        )

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await asyncio.wait_for(reader.read(CHUNK), 120):
                pass
        except (OSError, asyncio.TimeoutError):
            pass
        writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: asyncio.StreamWriter,
                    src: int, dst: int, share: float, client_closed: asyncio.Event, *, upstream: bool) -> None:
        """Copy bytes, each chunk delayed by the delay rule in force when it arrived; stall while a drop rule holds."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        last_due = 0.0
        delayed = False

        def due_now() -> float:
            nonlocal last_due, delayed
            rule = self.rule_for(src, dst)
            delay = 0.0
            if rule is not None and rule.action == "delay":
                delay = (rule.lo_ms + share * (rule.hi_ms - rule.lo_ms)) / 1000.0
                if not delayed and upstream:
                    delayed = True
                    self.stats.delayed += 1
            last_due = max(last_due, loop.time() + delay)
            return last_due

        async def feed() -> None:
            try:
                while True:
                    data = await reader.read(CHUNK)
                    if not data:
                        break
                    queue.put_nowait((due_now(), data))
            except OSError:
                pass
            finally:
                if upstream:
                    client_closed.set()
                queue.put_nowait((due_now(), b""))

        feeder = asyncio.create_task(feed())
        late_counted = False
        try:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    break
                # A partition met by an open connection stalls it (TCP retransmits) until the rule is lifted;
                # a reset rule resets it.
                while (rule := self.rule_for(src, dst)) is not None and rule.action == "drop":
                    await asyncio.sleep(0.05)
                if rule is not None and rule.action == "reset":
                    self.stats.reset += 1
                    for w in (writer, peer):
                        _reset(w)
                    break
                if upstream and client_closed.is_set() and not late_counted:
                    late_counted = True
                    self.stats.late_after_close += 1
                writer.write(data)
                self.stats.bytes += len(data)
                await writer.drain()
            if upstream:
                if writer.can_write_eof():
                    writer.write_eof()
            else:
                writer.close()
        except (OSError, RuntimeError):
            writer.close()
        finally:
            feeder.cancel()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a RST (SO_LINGER 0), as a middlebox that drops the connection would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.close()


async def main_async(args: argparse.Namespace) -> None:
    proxy = Proxy(args.seed)
    ports: dict[str, int] = {}
    servers = []
    for spec in args.pair:
        src, dst, host, port = spec.split(":")

        def handler(r, w, s=int(src), d=int(dst), h=host, p=int(port)):
            return proxy.serve(s, d, h, p, r, w)

        server = await asyncio.start_server(handler, args.listen, 0)
        servers.append(server)
        ports[f"{src}-{dst}"] = server.sockets[0].getsockname()[1]
    print(json.dumps({"event": "proxy-listening", "ports": ports}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            cmd = json.loads(line)
        except ValueError:
            print(json.dumps({"event": "error", "message": f"not JSON: {line[:100]!r}"}), flush=True)
            continue
        if cmd.get("op") == "rules":
            proxy.rules = [Rule(str(r["src"]), str(r["dst"]), r["action"], float(r.get("lo_ms", 0)),
                                float(r.get("hi_ms", 0))) for r in cmd.get("rules", [])]
            print(json.dumps({"event": "rules", "count": len(proxy.rules)}), flush=True)
        elif cmd.get("op") == "stats":
            print(json.dumps({"event": "stats", **proxy.stats.__dict__}), flush=True)
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pair", action="append", default=[], help="SRC:DST:HOST:PORT")
    asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    main()
