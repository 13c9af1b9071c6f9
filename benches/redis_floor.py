"""The floor under the server's Python request path on Redis: the same load against ``pinlater
serve`` and against a bare server that does only what no request can skip, side by side.

The bare server (this file run with ``--serve``; not a PinLater server: it answers
``enqueueJobs`` and ``dequeueJobs`` on one Redis shard, queue priority 1, and a void reply to
anything else) reads frames in a plain asyncio protocol on uvloop, and per request makes the
crossings into Rust that ``pinlater serve`` makes (``decode_hot_call``, the batch, the Redis
hot path's commands and replies on its pipelined connection, the reply written by
``encode_enqueue_reply`` / ``encode_dequeue_batches``), with nothing between them: no
dispatcher, handler, sharded backend, metrics, hints, rate limits, broker, health checks or
concurrency bound. What ``pinlater serve`` spends above it per job is what its Python layers
cost; the floor is what the design of one crossing per request under Python's loop could reach.

Each of ``--rounds`` rounds measures both (alternating which goes first) with
``cost_per_job.py``'s load and figures (``measure``): server CPU per acked job, store CPU per
job, jobs/min.

    PYTHONPATH=$PWD/python python benches/redis_floor.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cost_per_job import QUEUE, SHARD, Build, Figures, Run, _jobs, _us, current_build, measure

_I32 = struct.Struct(">i")


# -- the bare server ------------------------------------------------------------------------


def serve(host: str, port: int, listen: int) -> None:
    """Serve the bare floor on ``listen`` over the Redis at ``host:port`` (prints ``ready``)."""
    import uvloop

    from pinlater._pinlater import (
        EnqueueCall,
        decode_hot_call,
        encode_dequeue_batches,
        encode_enqueue_reply,
        encode_void_reply,
    )
    from pinlater.backends.redis import RedisEndpoint, RedisShardConfig, RedisStore
    from pinlater.config import Settings
    from pinlater.server.dispatch import _parse_header

    store = RedisStore(SHARD, RedisShardConfig(RedisEndpoint(host, port), layout="original"), Settings())
    store.create_queue(QUEUE, 3)  # the load's createQueue gets a void reply and nothing more
    hot = store.hot_path(None)  # type: ignore[arg-type]  # no blocking calls to offload
    claims = iter(range(1, 1 << 62))

    async def answer(payload: bytes) -> bytes:
        name, _mtype, seqid, offset = _parse_header(payload)
        if name not in ("enqueueJobs", "dequeueJobs"):
            return encode_void_reply(name, seqid)
        call = decode_hot_call(name, payload, offset)
        now = time.time_ns() // 1_000_000
        if isinstance(call, EnqueueCall):
            batch = call.batch(3, now)
            ids = await hot.enqueue_jobs(call.queue, batch, now)
            return encode_enqueue_reply(name, seqid, call.queue, SHARD, batch, ids)
        claim = f"floor|floor:{next(claims)}"
        if call.ack is not None:
            acks = call.ack.groups()[0][1]
            jobs = await hot.ack_and_dequeue_jobs(call.queue, acks, 1, call.limit, claim, now)
        else:
            jobs = await hot.dequeue_jobs(call.queue, 1, call.limit, claim, now, False)
        return encode_dequeue_batches(name, seqid, call.queue, [(SHARD, 1, jobs)])

    class Frames(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport
            self.held = b""

        def data_received(self, data: bytes) -> None:
            buf = self.held + data if self.held else data
            pos = 0
            while len(buf) - pos >= 4:
                (n,) = _I32.unpack_from(buf, pos)
                if len(buf) - pos - 4 < n:
                    break
                asyncio.get_running_loop().create_task(self.reply(buf[pos + 4 : pos + 4 + n]))
                pos += 4 + n
            self.held = buf[pos:]

        async def reply(self, payload: bytes) -> None:
            try:
                out = await answer(payload)
            except Exception as exc:  # a throwaway server: say why, and hang up on the caller
                print(f"floor: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                self.transport.close()
                return
            self.transport.write(len(out).to_bytes(4, "big") + out)

    async def main() -> None:
        await asyncio.get_running_loop().create_server(Frames, "127.0.0.1", listen)
        print("ready", flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


class FloorServer:
    """The bare server in a subprocess, started as ``cost_per_job.measure`` starts a server."""

    def __init__(self, build: Build, directory: Path, store_args: list[str], properties: list[str]) -> None:
        from tests.support.redis_server import free_port

        config = json.loads(Path(store_args[store_args.index("--backend-config") + 1]).read_text())
        master = config["shards"][0]["shardConfig"]["master"]
        self.port = free_port()
        self.lines: list[str] = []
        cmd = [build.python, __file__, "--serve", master["host"], str(master["port"]), str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=build.env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise SystemExit(f"the floor server did not start: {line}{self.proc.stdout.read()}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


# -- the comparison -------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", nargs=3, metavar=("HOST", "PORT", "LISTEN"), help="run the bare server")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=3)
    args = parser.parse_args()
    if args.serve:
        host, port, listen = args.serve
        serve(host, int(port), int(listen))
        return
    load = argparse.Namespace(
        seconds=args.seconds,
        warmup=args.warmup,
        batch=100,
        body_bytes=100,
        producers=args.producers,
        consumers=args.consumers,
        backlog=0,
        property=[],
    )
    current = current_build()
    floor = Build("floor", current.python, current.env)
    runs: dict[str, list[Run]] = {"current": [], "floor": []}
    with tempfile.TemporaryDirectory(prefix="pinlater-floor-") as tmp:
        for round_no in range(1, args.rounds + 1):
            order = [current, floor] if round_no % 2 else [floor, current]
            for build in order:
                run = measure(build, "redis", round_no, load, Path(tmp), FloorServer if build is floor else None)
                runs[build.label].append(run)
                f = Figures.of([run]).values()
                print(f"  {build.label} round {round_no}: server {_us(f['server'])} µs/job", file=sys.stderr)
    print(f"Redis, batch 100, 100-byte bodies, {args.producers} producer(s) + {args.consumers} consumer(s)")
    print(f"{'server':<16} {'jobs/min':>9} {'server µs/job':>14} {'store µs/job':>13}")
    figures = {label: Figures.of(rs) for label, rs in runs.items()}
    for label, f in figures.items():
        v = f.values()
        name = "pinlater serve" if label == "current" else "bare floor"
        print(f"{name:<16} {_jobs(f.jobs_per_min):>9} {_us(v['server']):>14} {_us(v['store']):>13}")
    cur, low = figures["current"].values()["server"], figures["floor"].values()["server"]
    if cur and low:
        print(f"the Python request path's share of pinlater serve's CPU per job: {1 - low / cur:.0%}")
    print(f"(queue {QUEUE}, shard {SHARD})")


if __name__ == "__main__":
    main()
