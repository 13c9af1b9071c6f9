"""MySQL backend throughput: our server against the original's SQL pattern and against no server.

In ONE run, on one MariaDB it starts itself (``innodb_flush_log_at_trx_commit=1``, a temporary
datadir, stopped by PID at the end), five phases of ``--seconds`` each, every one on a fresh queue:

A1. **original enqueue**: the original's pattern, one autocommitted INSERT per job, driven straight
    at MariaDB with PyMySQL by ``--clients`` processes.
A0. **direct batched enqueue** (a reference): the store's multi-row INSERT of ``--enqueue-batch``
    jobs (rendered by the store's own ``inserts.py``), one per transaction, straight at MariaDB
    by ``--clients`` processes: the ceiling for A2.
A2. **server enqueue**: ``pinlater serve --backend mysql`` with ``--clients`` producer processes
    sending ``enqueueJobs`` batches of ``--enqueue-batch`` (one multi-row INSERT each on the
    shard). The issue wants A2 >= 10 x A1. It does not fix the request size: A1 is per job
    whatever the size of the requests the original was sent (it did one INSERT per job), so
    ``--enqueue-batch`` (default: ``--batch``) sets A0's and A2's alone. On 2 cores, batches of
    100 leave the ratio at the edge: MariaDB itself spends about 20-25 us of CPU per job on a
    100-row INSERT and its commit, and A1 swings with fsync latency (1,000-4,500/s seen here);
    ``--enqueue-batch 1000`` measures the batched path where per-request costs stop dominating.
B1. **direct lifecycle**: the store's own SQL files (``enqueue_jobs.sql``, ``dequeue_jobs.sql`` +
    ``select_claimed_jobs.sql``, ``ack_succeeded_jobs.sql``), rendered by ``queries.py`` (the
    INSERT by ``inserts.py``, as the store renders it), driven straight at MariaDB by two
    processes: a producer inserting batches of ``--batch`` (the issue's 100) and a
    consumer that claims a batch, reads it, and acks it, each step one transaction as in the
    store. No server: the ceiling for this SQL on this machine.
B2. **server lifecycle**: the same two roles through the server: a producer of ``enqueueJobs``
    batches and a consumer that dequeues ``--batch`` with the previous batch's acks piggy-backed
    (the original's example worker). The issue wants B2 >= 0.60 x B1 (jobs acked per second).

Bodies are ``--body-bytes`` bytes. Server clients are thriftpy2's cython framed binary client;
direct clients (A0, B1) use the server's own PyMySQL connection class (``pool.py``), A1 plain
PyMySQL with autocommit. Printed: jobs/s per phase, the ratios, and CPU (cores busy) of mariadbd,
the server and the client processes in each phase (from /proc/PID/stat and process_time), plus
deadlocks/lock waits retried. ``--profile FILE`` records the server's GIL holders with py-spy
(``pip install py-spy``) during ``--profile-phase`` (.json: speedscope, else a flame graph SVG).
The machine is measured as it is: run it a few times and compare the spread.

    python benches/mysql_lifecycle.py --seconds 10
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import await_ready, cpu_seconds, thrift_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support.mariadb_server: the MariaDB helper the tests use

SHARD = "1"


@dataclass(frozen=True)
class Db:
    host: str
    port: int
    user: str
    password: str


# -- processes and CPU ------------------------------------------------------------------------


def sleep_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def connect_db(db: Db, autocommit: bool) -> Any:
    import pymysql

    return pymysql.connect(
        host=db.host,
        port=db.port,
        user=db.user,
        password=db.password,
        autocommit=autocommit,
        charset="utf8mb4",
        ssl_disabled=True,
        init_command="SET time_zone = '+00:00'",
    )


def table_of(queue: str) -> str:
    from pinlater.backends.mysql import names

    return names.quoted_table(SHARD, queue, 1)


def row(body: bytes, now: Any) -> tuple[Any, ...]:
    # state, attempts_allowed, attempts_remaining, custom_status, created_at, updated_at, run_after, body
    return (0, 2, 2, "", now, now, now, body)


# -- A1 and B1: straight at MariaDB -----------------------------------------------------------


def original_single_inserts(db: Db, queue: str, body: bytes, start_at: float, deadline: float, out: Any) -> None:
    """The original's enqueue: one INSERT per job, each its own (autocommitted) transaction."""
    from datetime import UTC, datetime

    from pinlater.backends.mysql import queries

    conn = connect_db(db, autocommit=True)
    sql = queries.ENQUEUE_JOBS.render(table=table_of(queue), rows=(1, 8))
    done = 0
    sleep_until(start_at)
    cpu0 = time.process_time()
    with conn.cursor() as cur:
        while time.time() < deadline:
            cur.execute(sql, row(body, datetime.now(UTC).replace(tzinfo=None)))
            done += 1
    out.put({"enqueued": done, "client_cpu_ms": int((time.process_time() - cpu0) * 1000)})


def store_pool(db: Db) -> Any:
    """A one-connection pool made the way the server makes them (``pool.py``: autocommit off,
    UTC session, the same fast parameter escaping), so A0 and B1 differ from A2 and B2 only by
    the server."""
    from pinlater.backends.mysql.pool import ConnectionPool

    return ConnectionPool(host=db.host, port=db.port, user=db.user, password=db.password, size=1, timeout=30)


def direct_producer(db: Db, queue: str, batch: int, body: bytes, start_at: float, deadline: float, out: Any) -> None:
    """The store's enqueue: one multi-row INSERT of ``batch`` jobs per transaction, rendered by
    the store's own code (``inserts.py``)."""
    from pinlater.backends.base import NewJob
    from pinlater.backends.mysql.inserts import insert_jobs

    table = table_of(queue)
    pool = store_pool(db)
    done = 0
    with pool.connection() as conn, conn.cursor() as cur:
        sleep_until(start_at)
        cpu0 = time.process_time()
        while time.time() < deadline:
            now_ms = int(time.time() * 1000)
            jobs = [NewJob(priority=1, body=body, run_after_ms=now_ms, attempts_allowed=2) for _ in range(batch)]
            insert_jobs(pool, None, cur, table, jobs, now_ms)
            conn.commit()
            done += batch
    out.put({"enqueued": done, "client_cpu_ms": int((time.process_time() - cpu0) * 1000)})


def direct_consumer(db: Db, queue: str, batch: int, start_at: float, deadline: float, out: Any) -> None:
    """The store's dequeue (UPDATE ... LIMIT stamping a claim, SELECT by claim) and ack (one
    UPDATE by ids), each one transaction, as the server runs them."""
    from datetime import UTC, datetime

    import pymysql

    from pinlater.backends.base import RESERVATION_PREFIX
    from pinlater.backends.mysql import queries

    table = table_of(queue)
    claim_sql = queries.DEQUEUE_JOBS.render(table=table)
    select_sql = queries.SELECT_CLAIMED_JOBS.render(table=table)
    acks: list[int] = []
    done = empty = seq = deadlocks = 0
    with store_pool(db).connection() as conn, conn.cursor() as cur:
        sleep_until(start_at)
        cpu0 = time.process_time()
        while time.time() < deadline:
            now = datetime.now(UTC).replace(tzinfo=None)
            try:
                if acks:
                    ack_sql = queries.ACK_SUCCEEDED_JOBS.render(table=table, ids=len(acks))
                    cur.execute(ack_sql, ("", 5000, now, *sorted(acks)))
                    conn.commit()
                    done += len(acks)
                    acks = []
                seq += 1
                claim = f"bench:direct|{os.getpid()}:{seq}"
                now_ms = time.time_ns() // 1_000_000  # the expiry check's now
                args = (claim, now, now, now_ms, now, RESERVATION_PREFIX, RESERVATION_PREFIX, batch)
                if cur.execute(claim_sql, args):
                    cur.execute(select_sql, (claim,))
                    acks = [int(r[0]) for r in cur.fetchall()]
                else:
                    empty += 1
                conn.commit()
            except pymysql.err.OperationalError as exc:
                if exc.args[0] not in (1205, 1213):
                    raise
                conn.rollback()  # the store retries deadlocks and lock waits the same way
                deadlocks += 1
    cpu_ms = int((time.process_time() - cpu0) * 1000)
    out.put({"acked": done, "empty_dequeues": empty, "client_cpu_ms": cpu_ms, "deadlocks": deadlocks})


# -- A2 and B2: through the server ------------------------------------------------------------


def server_producer(port: int, queue: str, batch: int, body: bytes, start_at: float, deadline: float, out: Any) -> None:
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"bench-producer:{os.getpid()}")
    request = idl.PinLaterEnqueueRequest(queueName=queue, jobs=[idl.PinLaterJob(body=body) for _ in range(batch)])
    done = 0
    sleep_until(start_at)
    cpu0 = time.process_time()
    while time.time() < deadline:
        client.enqueueJobs(ctx, request)
        done += batch
    out.put({"enqueued": done, "client_cpu_ms": int((time.process_time() - cpu0) * 1000)})


def server_consumer(port: int, queue: str, batch: int, start_at: float, deadline: float, out: Any) -> None:
    from pinlater.idl import idl

    client = thrift_client(port)
    ctx = idl.RequestContext(source=f"bench-consumer:{os.getpid()}")
    acks: list[Any] = []
    done = empty = 0
    sleep_until(start_at)
    cpu0 = time.process_time()
    while time.time() < deadline:
        ack_request = idl.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks) if acks else None
        got = client.dequeueJobs(
            ctx, idl.PinLaterDequeueRequest(queueName=queue, limit=batch, jobAckRequest=ack_request)
        )
        done += len(acks)
        acks = [idl.PinLaterJobAckInfo(jobDescriptor=d) for d in got.jobs]
        if not got.jobs:
            empty += 1
    out.put({"acked": done, "empty_dequeues": empty, "client_cpu_ms": int((time.process_time() - cpu0) * 1000)})


# -- phases -----------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    seconds: float
    totals: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    def rate(self, key: str) -> float:
        return self.totals.get(key, 0) / self.seconds

    def cores(self, label: str) -> str:
        return f"{self.cpu[label] / self.seconds:.2f}" if label in self.cpu else "-"


def run_phase(
    name: str,
    seconds: float,
    workers: list[tuple[Any, tuple[Any, ...]]],
    pids: dict[str, int],
    profile: tuple[int, Path] | None = None,
) -> Phase:
    """Start ``workers`` (function, args before start_at/deadline/out), all begin at one moment.
    ``profile`` (pid, file): record that process with py-spy for the phase."""
    out: Any = mp.Queue()
    start_at = time.time() + 1.5  # room for the processes to start and connect
    deadline = start_at + seconds
    procs = [mp.Process(target=fn, args=(*args, start_at, deadline, out)) for fn, args in workers]
    for proc in procs:
        proc.start()
    sleep_until(start_at)
    cpu0 = {label: cpu_seconds(pid) for label, pid in pids.items()}
    profiler = None
    if profile is not None:
        record = ["py-spy", "record", "--gil", "-p", str(profile[0]), "-d", str(int(seconds)), "-r", "100"]
        record += ["-f", "speedscope" if profile[1].suffix == ".json" else "flamegraph", "-o", str(profile[1])]
        profiler = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sleep_until(deadline)
    cpu = {label: cpu_seconds(pid) - cpu0[label] for label, pid in pids.items()}
    if profiler is not None:
        profiler.wait(60)
    phase = Phase(name, seconds, cpu=cpu)
    for _ in procs:  # one message from each worker
        try:
            message = out.get(timeout=30)
        except Exception:
            raise SystemExit(f"{name}: a worker process failed (exit codes {[p.exitcode for p in procs]})") from None
        for key, value in message.items():
            phase.totals[key] = phase.totals.get(key, 0) + value
    for proc in procs:
        proc.join(60)
        if proc.exitcode != 0:
            raise SystemExit(f"{name}: a worker process failed (exit {proc.exitcode})")
    return phase


class Server:
    """``pinlater serve --backend mysql`` in a subprocess, its log drained by a thread."""

    def __init__(self, tmp: Path, config: Path, properties: dict[str, Any]) -> None:
        props = tmp / "pinlater.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        cmd = [sys.executable, "-m", "pinlater.cli", "serve", "--port", "0", "--admin-port", "0"]
        cmd += ["--data-dir", str(tmp / "data"), "--properties", str(props)]
        cmd += ["--backend", "mysql", "--backend-config", str(config)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port, self.lines = await_ready(self.proc)

    def count_lines(self, needle: str) -> int:
        return sum(1 for line in list(self.lines) if needle in line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10, help="length of each of the four phases")
    parser.add_argument("--clients", type=int, default=2, help="processes in the two enqueue phases")
    parser.add_argument("--batch", type=int, default=100, help="jobs per request or statement (B1, B2)")
    parser.add_argument("--enqueue-batch", type=int, help="jobs per enqueue in A0 and A2 (default: --batch)")
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--buffer-pool", default="256M", help="innodb_buffer_pool_size")
    parser.add_argument("--profile", type=Path, help="record the server with py-spy into this file (.svg or .json)")
    parser.add_argument("--profile-phase", choices=("a2", "b2"), default="b2", help="the phase --profile records")
    parser.add_argument(
        "--phases", default="a1,a0,a2,b1,b2", help="comma-separated subset to run (a ratio needs both its phases)"
    )
    args = parser.parse_args()
    enqueue_batch = args.enqueue_batch or args.batch

    from tests.support.mariadb_server import MariaDBServer

    from pinlater.backends.mysql import Endpoint, MySQLShardConfig, MySQLStore

    body = b"x" * args.body_bytes
    secs = args.seconds
    with tempfile.TemporaryDirectory(prefix="pinlater-mysql-bench-") as tmp_name:
        tmp = Path(tmp_name)
        mariadb = MariaDBServer(
            tmp / "mariadb",
            flush_log_at_trx_commit=1,
            extra_args=(f"--innodb-buffer-pool-size={args.buffer_pool}",),
        )
        server: Server | None = None
        try:
            db = Db(mariadb.host, mariadb.port, mariadb.user, mariadb.password)
            admin = MySQLStore(SHARD, MySQLShardConfig(Endpoint(db.host, db.port), db.user, db.password))
            queues = {
                "a0": "bench_batched",
                "a1": "bench_single",
                "a2": "bench_enqueue",
                "b1": "bench_direct",
                "b2": "bench_server",
            }
            for queue in queues.values():
                admin.create_queue(queue, 3)
            config = tmp / "mysql.json"
            config.write_text(json.dumps({SHARD: mariadb.shard_entry()}))
            server = Server(tmp, config, {})
            db_pid = mariadb.pid
            assert db_pid is not None
            pids = {"mariadbd": db_pid, "server": server.proc.pid}
            phases: dict[str, Phase] = {}
            plan: dict[str, tuple[str, list[tuple[Any, tuple[Any, ...]]]]] = {
                "a1": (
                    "A1 original: one INSERT per job, no server",
                    [(original_single_inserts, (db, queues["a1"], body)) for _ in range(args.clients)],
                ),
                "a0": (
                    f"A0 direct: {enqueue_batch}-row INSERTs, no server",
                    [(direct_producer, (db, queues["a0"], enqueue_batch, body)) for _ in range(args.clients)],
                ),
                "a2": (
                    f"A2 server: enqueueJobs batches of {enqueue_batch}",
                    [(server_producer, (server.port, queues["a2"], enqueue_batch, body)) for _ in range(args.clients)],
                ),
                "b1": (
                    "B1 lifecycle, the store's SQL straight at MariaDB",
                    [
                        (direct_producer, (db, queues["b1"], args.batch, body)),
                        (direct_consumer, (db, queues["b1"], args.batch)),
                    ],
                ),
                "b2": (
                    "B2 lifecycle through pinlater serve",
                    [
                        (server_producer, (server.port, queues["b2"], args.batch, body)),
                        (server_consumer, (server.port, queues["b2"], args.batch)),
                    ],
                ),
            }
            for key in [k.strip() for k in args.phases.split(",") if k.strip()]:
                name, workers = plan[key]
                profile = None
                if args.profile is not None and key == args.profile_phase:
                    profile = (server.proc.pid, args.profile)
                retries_before = server.count_lines("retrying after MySQL error")
                phases[key] = run_phase(name, secs, workers, pids, profile)
                if key in ("a2", "b2"):
                    phases[key].totals["deadlocks"] = server.count_lines("retrying after MySQL error") - retries_before
                admin.delete_queue(queues[key])  # frees the buffer pool for the next phase
            admin.close()
        finally:
            if server is not None:
                server.stop()
            mariadb.stop()

    print(
        f"MariaDB (innodb_flush_log_at_trx_commit=1), batch {args.batch} (A0, A2: {enqueue_batch}), "
        f"{args.body_bytes}-byte bodies, "
        f"{secs:g} s per phase, {os.cpu_count()} CPUs"
    )
    print(f"{'phase':52} {'jobs/s':>9} {'mariadbd':>9} {'server':>7} {'clients':>8}")
    for key, phase in phases.items():
        label = "enqueued" if key.startswith("a") else "acked"
        extra = ""
        if label == "acked":
            extra = (
                f"  (enqueued {phase.rate('enqueued'):.0f}/s, empty dequeues {phase.totals.get('empty_dequeues', 0)})"
            )
        print(
            f"{phase.name:52} {phase.rate(label):9.0f} {phase.cores('mariadbd'):>9} {phase.cores('server'):>7}"
            f" {phase.totals.get('client_cpu_ms', 0) / 1000 / phase.seconds:8.2f}{extra}"
        )
    if "a1" in phases and "a2" in phases:
        a_ratio = phases["a2"].rate("enqueued") / max(phases["a1"].rate("enqueued"), 1e-9)
        print(f"enqueue: server batched / original per-job = {a_ratio:.1f}x (target >= 10x)")
    if "a0" in phases and "a2" in phases:
        a0_ratio = phases["a2"].rate("enqueued") / max(phases["a0"].rate("enqueued"), 1e-9)
        print(f"enqueue: server batched / the same batched INSERT with no server = {a0_ratio:.2f}")
    if "b1" in phases and "b2" in phases:
        b_ratio = phases["b2"].rate("acked") / max(phases["b1"].rate("acked"), 1e-9)
        print(f"lifecycle: server / direct SQL = {b_ratio:.2f} (target >= 0.60)")
    print("CPU columns: cores busy during the phase (CPU seconds / wall seconds); no server in A1, A0, B1")


if __name__ == "__main__":
    main()
