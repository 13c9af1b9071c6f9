"""The floor of a Redis layout: Redis' CPU per job for the commands a layout's scripts call, sent
raw (pipelined, no Lua), beside the layouts' real cost through ``pinlater serve``, in one run.

Issue 16 asks the compact layout for at most 0.27 of the original's Redis CPU per job. A script
costs Redis its own Lua and the commands it calls; no tuning of its Lua goes below its commands.
So the compact layout's commands alone, over the original layout's cost through the server,
estimates the lowest ratio this layout could reach (an estimate, not a bound: sent raw, each
command pays the parsing of its request and the writing of its reply, which a script's own calls
do not; below). Rows (``--layouts`` for the floors, ``--served`` for the real loads):

- ``floor compact``: what the compact layout's common paths call (``lua_compact/``): one packed
  record per job in the queue's records hash (written at the enqueue, read and written at the
  claim), the job's id in its priority's ready list behind a marker, the IN_PROGRESS and
  SUCCEEDED sets by the batch (ZADD, ZMSCORE, ZREM);
- ``floor split``: the compact floor, but a job's record moves at its ack from the records hash
  to a hash of finished jobs' records (SUCCEEDED members kept per job), so the hash the enqueue
  and the claim write holds unfinished jobs only;
- ``floor blocks``: the compact floor, but a job leaves the records hash at its ack: the ack
  reads the batch's records, deletes them and appends them to a string of the second's acked
  jobs, with one SUCCEEDED member a batch; so the records hash holds unfinished jobs only, not
  the hour of finished ones the GC keeps;
- ``floor hybrid``: ``blocks``, and the claim writes one claim record (claimer and ids) and one
  IN_PROGRESS member a batch instead of rewriting each job's record and adding each id; a job's
  record is written once, at its enqueue, and read at its claim and ack. Nothing here says which
  claim holds a job, which an ack by id needs: a floor below what a layout could be;
- ``floor claimed``: ``hybrid`` with that link: the claim sets each id's claim in a hash of the
  jobs in progress (small: only those), which the ack reads and deletes;
- ``floor indexed``: ``claimed``, and the ack also sets each finished job's block in a hash of
  every finished job (an hour of them, as the GC keeps), as a lookup by id would need if the
  index were kept a field per job;
- ``floor ranged``: ``claimed``, with that index kept by runs of ids instead: a string per 4,096
  ids holding each one's block in 4 bytes, a run of acked ids written with one SETRANGE (a
  batch's ids here are one run);
- ``floor batches``: a layout that keeps jobs by the batch instead, which this server does not
  have: one record per batch of jobs (written at the enqueue, read at the claim), a claim record
  per batch, one ready entry and one set member a batch, every batch acked whole. The floor of
  storing jobs by the batch, for comparison;
- ``floor original`` (not by default): the original layout's commands (``lua/``): per job a hash
  of six fields written at the enqueue, read and written at the claim and at the ack, beside its
  member of the PENDING, IN_PROGRESS and SUCCEEDED sets. Its commands are per
  job, and sent raw each pays the parsing of its own request, which its scripts' calls do not:
  this floor lies above what its scripts cost, so the ratios are over ``served redis`` instead;
- ``served redis`` and ``served redis-compact``: ``cost_per_job.py``'s load (``--clients``
  producers and as many consumers) through this tree's server, the original and compact layouts.

Each floor runs ``--clients`` processes, each the full lifecycle in its own queue (its own hash
tag) a batch of ``--batch`` jobs of ``--body-bytes`` at a time: enqueue, claim, ack (success), each
step one pipelined round trip. Finished jobs stay, as in the served runs, where the GC keeps them
an hour (``--keep N`` deletes each batch N batches after its ack instead, with the GC's commands:
then the hashes and sets stay small, which the served runs' are not). Redis runs as
``cost_per_job.py`` runs it (AOF everysec, no AOF rewrites: issue 16's figures of 37-46 µs a job
counted them). Each row is Redis' CPU seconds (utime + stime of redis-server and its children) per
job over ``--seconds`` after ``--warmup``, with jobs/min, in a rotated order each round; then the
means, each over ``served redis`` (the per-round range in brackets).

    PYTHONPATH=$PWD/python python benches/redis_layout_floor.py --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_per_job import store_cpu_seconds

LAYOUTS = ("original", "compact", "split", "blocks", "hybrid", "claimed", "indexed", "ranged", "batches")
DEFAULT_LAYOUTS = ("compact", "batches")
CLAIM = b"bench-host:12345"


def _record(body: bytes, claimed: bool) -> bytes:
    """A compact record's bytes as lib/records.lua packs them (the same length and shape)."""
    header = b"\xd9" + bytes([len(body)]) if len(body) < 256 else b"\xda" + len(body).to_bytes(2, "big")
    tail = b"\x0a\x0a\xcf" + (1_700_000_000_000).to_bytes(8, "big")
    if claimed:
        return b"\x97" + header + body + tail + b"\x05\xa0" + bytes([0xA0 + len(CLAIM)]) + CLAIM
    return b"\x97" + header + body + tail + b"\x00\xa0\xc2"


class Queue:
    """One client's queue: the lifecycle of one batch in the given layout, one round trip a step."""

    def __init__(self, client: Any, number: int, batch: int, body: bytes, keep: int) -> None:
        self.r, self.batch, self.body, self.keep = client, batch, body, keep
        tag = f"{{bench:q{number}}}"
        self.records, self.ready = f"plc:{tag}:j", f"plc:{tag}:p1:r"
        self.pending, self.in_progress, self.succeeded = (f"plc:{tag}:p1:s{state}" for state in (0, 1, 2))
        self.original = f"plj_{number}_"  # the original's job hash prefix (one key per job)
        self.next_id = 0
        self.new_record, self.claimed_record = _record(body, False), _record(body, True)

    def cycle(self, layout: str) -> int:
        """One batch enqueued, claimed, acked, and with ``keep``, the batch ``keep`` before collected."""
        first = self.next_id + 1
        self.next_id += self.batch
        ids = [b"%d" % i for i in range(first, first + self.batch)]
        gone = first - self.keep * self.batch
        old = [b"%d" % i for i in range(gone, gone + self.batch)] if self.keep and gone > 0 else []
        getattr(self, f"_{layout}")(ids, old, time.time())
        return self.batch

    def _original(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        p = self.r.pipeline(transaction=False)
        p.execute_command("HINCRBY", self.records, "id", len(ids))
        scores: list[Any] = []
        for i in ids:
            p.execute_command(
                "HSET", self.original + i.decode(), "bd", self.body, "al", 10, "ar", 10, "ca", now, "ua", now, "cs", ""
            )
            scores += [now, i]
        p.execute_command("ZADD", self.pending, *scores)
        p.execute()
        p = self.r.pipeline(transaction=False)
        p.execute_command("ZRANGEBYSCORE", self.pending, "-inf", now, "WITHSCORES", "LIMIT", 0, len(ids) + 1)
        p.execute_command("ZREM", self.pending, *ids)
        for i in ids:
            p.execute_command("HMGET", self.original + i.decode(), "bd", "al", "ar", "ca", "ua", "ex")
            p.execute_command("HSET", self.original + i.decode(), "ua", now, "cd", CLAIM)
        p.execute_command("ZADD", self.in_progress, *scores)
        p.execute()
        p = self.r.pipeline(transaction=False)
        for i in ids:
            p.execute_command("ZREM", self.in_progress, i)
            p.execute_command("HMGET", self.original + i.decode(), "bd", "al", "ar", "cs", "ex")
            p.execute_command("HSET", self.original + i.decode(), "ua", now, "cs", "")
        p.execute_command("ZADD", self.succeeded, *scores)
        if old:
            p.execute_command("ZRANGEBYSCORE", self.succeeded, "-inf", "+inf", "LIMIT", 0, len(old))
            p.execute_command("ZREMRANGEBYRANK", self.succeeded, 0, len(old) - 1)
            for i in old:
                p.execute_command("DEL", self.original + i.decode())
        p.execute()

    def _enqueue(self, ids: list[bytes], now: float) -> None:
        """The compact layout's enqueue: the records, then the ids behind a marker in the ready list."""
        p = self.r.pipeline(transaction=False)
        p.execute_command("HINCRBY", self.records, "id", len(ids))
        fields: list[bytes] = []
        for i in ids:
            fields += [i, self.new_record]
        p.execute_command("HSET", self.records, *fields)
        p.execute_command("RPUSH", self.ready, b"m%d" % int(now * 1000), *ids)
        p.execute()

    def _claim(self, ids: list[bytes]) -> Any:
        """The compact layout's claim of the ready list's head and its records, its pipeline left
        open for what each layout writes of the claim."""
        p = self.r.pipeline(transaction=False)
        p.execute_command("LRANGE", self.ready, 0, len(ids) + 7)
        p.execute_command("LTRIM", self.ready, len(ids) + 1, -1)
        p.execute_command("HMGET", self.records, *ids)
        return p

    def _claim_each(self, p: Any, ids: list[bytes], now: float) -> tuple[list[Any], list[Any]]:
        """The compact layout's claim writes: each record rewritten, each id in IN_PROGRESS; the
        claim's pipeline run. The records' and the scores' arguments."""
        fields: list[Any] = []
        scores: list[Any] = []
        for i in ids:
            fields += [i, self.claimed_record]
            scores += [now, i]
        p.execute_command("HSET", self.records, *fields)
        p.execute_command("ZADD", self.in_progress, *scores)
        p.execute()
        return fields, scores

    def _claim_batch(self, p: Any, ids: list[bytes], now: float) -> bytes:
        """One claim record and IN_PROGRESS member for the batch, named by its first id (the
        claim's pipeline left open)."""
        name = ids[0]
        p.execute_command("HSET", self.records, b"c" + name, CLAIM + b"".join(ids))
        p.execute_command("ZADD", self.in_progress, now, name)
        return name

    def _finish_in_block(
        self, p: Any, ids: list[bytes], gone: list[bytes], name: bytes, now: float, old: list[bytes]
    ) -> None:
        """The ack of the batch ``name`` into a block: its records read and deleted (with
        ``gone``) and appended to the second's block, one SUCCEEDED member; the pipeline run."""
        p.execute_command("HMGET", self.records, *ids)
        p.execute_command("HDEL", self.records, *gone, *ids)
        p.execute_command("APPEND", f"{self.records}:b{int(now)}", self.claimed_record * len(ids))
        p.execute_command("ZADD", self.succeeded, now, name)
        if old:
            p.execute_command("ZREM", self.succeeded, old[0])
        p.execute()

    def _compact(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        self._enqueue(ids, now)
        _, scores = self._claim_each(self._claim(ids), ids, now)
        p = self.r.pipeline(transaction=False)
        p.execute_command("ZMSCORE", self.in_progress, *ids)
        p.execute_command("ZREM", self.in_progress, *ids)
        p.execute_command("ZADD", self.succeeded, *scores)
        if old:
            p.execute_command("ZRANGEBYSCORE", self.succeeded, "-inf", "+inf", "LIMIT", 0, len(old))
            p.execute_command("ZREMRANGEBYRANK", self.succeeded, 0, len(old) - 1)
            p.execute_command("HDEL", self.records, *old)
        p.execute()

    def _split(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        self._enqueue(ids, now)
        fields, scores = self._claim_each(self._claim(ids), ids, now)
        p = self.r.pipeline(transaction=False)
        p.execute_command("ZMSCORE", self.in_progress, *ids)
        p.execute_command("ZREM", self.in_progress, *ids)
        p.execute_command("HMGET", self.records, *ids)
        p.execute_command("HDEL", self.records, *ids)
        p.execute_command("HSET", f"{self.records}:f", *fields)
        p.execute_command("ZADD", self.succeeded, *scores)
        if old:
            p.execute_command("ZRANGEBYSCORE", self.succeeded, "-inf", "+inf", "LIMIT", 0, len(old))
            p.execute_command("ZREMRANGEBYRANK", self.succeeded, 0, len(old) - 1)
            p.execute_command("HDEL", f"{self.records}:f", *old)
        p.execute()

    def _blocks(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        self._enqueue(ids, now)
        self._claim_each(self._claim(ids), ids, now)
        p = self.r.pipeline(transaction=False)
        p.execute_command("ZMSCORE", self.in_progress, *ids)
        p.execute_command("ZREM", self.in_progress, *ids)
        self._finish_in_block(p, ids, [], ids[0], now, old)

    def _hybrid(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        self._enqueue(ids, now)
        p = self._claim(ids)
        name = self._claim_batch(p, ids, now)
        p.execute()
        p = self.r.pipeline(transaction=False)
        p.execute_command("ZSCORE", self.in_progress, name)
        p.execute_command("HGET", self.records, b"c" + name)
        p.execute_command("ZREM", self.in_progress, name)
        self._finish_in_block(p, ids, [b"c" + name], name, now, old)

    def _claimed(self, ids: list[bytes], old: list[bytes], now: float, indexed: str = "") -> None:
        self._enqueue(ids, now)
        p = self._claim(ids)
        name = self._claim_batch(p, ids, now)
        marks: list[bytes] = []
        for i in ids:
            marks += [i, name]
        p.execute_command("HSET", self.in_progress + ":ip", *marks)
        p.execute()
        p = self.r.pipeline(transaction=False)
        p.execute_command("HMGET", self.in_progress + ":ip", *ids)
        p.execute_command("HDEL", self.in_progress + ":ip", *ids)
        p.execute_command("HGET", self.records, b"c" + name)
        p.execute_command("ZREM", self.in_progress, name)
        if indexed == "ranged":  # 4 bytes an id, in a string per 4,096 ids: a run of ids, one write
            first = int(ids[0])
            p.execute_command(
                "SETRANGE", f"{self.records}:f{first >> 12}", (first & 4095) * 4, int(now).to_bytes(4, "big") * len(ids)
            )
        elif indexed:
            found: list[Any] = []
            for i in ids:
                found += [i, int(now)]
            p.execute_command("HSET", self.records + ":f", *found)
        self._finish_in_block(p, ids, [b"c" + name], name, now, old)

    def _indexed(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        self._claimed(ids, old, now, indexed="field")

    def _ranged(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        self._claimed(ids, old, now, indexed="ranged")

    def _batches(self, ids: list[bytes], old: list[bytes], now: float) -> None:
        name = ids[0]
        p = self.r.pipeline(transaction=False)
        p.execute_command("HINCRBY", self.records, "id", len(ids))
        p.execute_command("HSET", self.records, name, self.new_record * len(ids))
        p.execute_command("RPUSH", self.ready, name)
        p.execute()
        p = self.r.pipeline(transaction=False)
        p.execute_command("LPOP", self.ready)
        p.execute_command("HGET", self.records, name)
        p.execute_command("HSET", self.records, b"c" + name, CLAIM)
        p.execute_command("ZADD", self.in_progress, now, name)
        p.execute()
        p = self.r.pipeline(transaction=False)
        p.execute_command("ZSCORE", self.in_progress, name)
        p.execute_command("ZREM", self.in_progress, name)
        p.execute_command("ZADD", self.succeeded, now, name)
        if old:
            p.execute_command("ZREM", self.succeeded, old[0])
            p.execute_command("HDEL", self.records, old[0], b"c" + old[0])
        p.execute()


def client_loop(port: int, number: int, layout: str, options: argparse.Namespace, stop_at: float) -> None:
    import redis

    queue = Queue(redis.Redis("127.0.0.1", port), number, options.batch, b"x" * options.body_bytes, options.keep)
    while time.time() < stop_at:
        queue.cycle(layout)


def jobs_done(port: int, clients: int) -> int:
    """Jobs enqueued so far by every client (their id counters): each batch goes through whole."""
    import redis

    r = redis.Redis("127.0.0.1", port)
    return sum(int(r.hget(f"plc:{{bench:q{n}}}:j", "id") or 0) for n in range(clients))


def run(layout: str, options: argparse.Namespace, directory: Path) -> tuple[float, float]:
    """(Redis CPU seconds per job, jobs/min) of one run of ``layout`` on a fresh Redis."""
    from tests.support.redis_server import RedisServer

    server = RedisServer(directory, appendonly=True, extra_args=("--auto-aof-rewrite-percentage", "0"))
    pid = server.pid
    assert pid is not None
    try:
        start = time.time() + options.warmup
        stop_at = start + options.seconds + 0.5
        context = multiprocessing.get_context("fork")
        workers = [
            context.Process(target=client_loop, args=(server.port, n, layout, options, stop_at))
            for n in range(options.clients)
        ]
        for worker in workers:
            worker.start()
        time.sleep(max(0.0, start - time.time()))
        cpu0, jobs0, t0 = store_cpu_seconds(pid), jobs_done(server.port, options.clients), time.time()
        time.sleep(options.seconds)
        cpu1, jobs1, t1 = store_cpu_seconds(pid), jobs_done(server.port, options.clients), time.time()
        for worker in workers:
            worker.join()
    finally:
        server.stop()
    jobs = jobs1 - jobs0
    return (cpu1 - cpu0) / jobs, jobs / (t1 - t0) * 60


def served(backend: str, round_no: int, options: argparse.Namespace, directory: Path) -> tuple[float, float]:
    """(Redis CPU seconds per job, jobs/min) of ``cost_per_job.py``'s load through ``pinlater serve``
    (this tree) on ``backend`` (redis: the original layout; redis-compact), with ``--clients``
    producers and as many consumers."""
    from cost_per_job import current_build, measure

    load = argparse.Namespace(
        seconds=options.seconds,
        warmup=options.warmup,
        batch=options.batch,
        body_bytes=options.body_bytes,
        producers=options.clients,
        consumers=options.clients,
        backlog=0,
        property=[],
    )
    directory.mkdir()
    run_ = measure(current_build(), backend, round_no, load, directory)
    assert run_.store_cpu is not None
    return run_.store_cpu / run_.acked, run_.acked / run_.seconds * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--layouts", default=",".join(DEFAULT_LAYOUTS), help=f"floors: comma list of {', '.join(LAYOUTS)}"
    )
    parser.add_argument(
        "--served", default="redis,redis-compact", help="also through the server: comma list of redis, redis-compact"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--clients", type=int, default=3, help="client processes, a queue each (default 3)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument(
        "--keep", type=int, default=0, help="delete each batch this many batches after its ack (default 0: never)"
    )
    options = parser.parse_args()
    entries = [f"floor {layout}" for layout in options.layouts.split(",") if layout]
    entries += [f"served {backend}" for backend in options.served.split(",") if backend]
    unknown = [e for e in entries if e.split()[1] not in (*LAYOUTS, "redis", "redis-compact")]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    results: dict[str, list[tuple[float, float]]] = {entry: [] for entry in entries}
    with tempfile.TemporaryDirectory(prefix="pinlater-floor-") as tmp:
        for round_no in range(1, options.rounds + 1):
            shift = (round_no - 1) % len(entries)
            for entry in entries[shift:] + entries[:shift]:
                kind, name = entry.split()
                directory = Path(tmp) / f"{kind}-{name}-{round_no}"
                if kind == "floor":
                    figures = run(name, options, directory)
                else:
                    figures = served(name, round_no, options, directory)
                results[entry].append(figures)
                per_job, rate = figures
                print(f"  {entry} round {round_no}: {per_job * 1e6:.2f} µs/job, {rate / 1e6:.2f}M jobs/min", flush=True)
    print(
        f"Redis CPU per job: each layout's commands alone (floor) and through the server (served); {options.clients} "
        f"client(s), batch {options.batch}, {options.body_bytes}-byte bodies, AOF everysec, {options.rounds} round(s) "
        f"of {options.seconds:g} s"
    )
    base = results.get("served redis")
    for entry, runs in results.items():
        mean = sum(per_job for per_job, _ in runs) / len(runs)
        rate = sum(r for _, r in runs) / len(runs)
        line = f"  {entry:21} {mean * 1e6:6.2f} µs/job  {rate / 1e6:6.2f}M jobs/min"
        if base is not None and entry != "served redis":
            ratios = [mine / theirs for (mine, _), (theirs, _) in zip(runs, base, strict=True)]
            whole = sum(per_job for per_job, _ in base) / len(base)
            line += f"  / served redis {mean / whole:.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        print(line)


if __name__ == "__main__":
    main()
