"""The original PinLater's example worker (PinLaterExampleWorker.java), in Python.

It shows the moving parts the ``pinlater.worker`` library packages up:

* a dequeue on a timer (every ``--dequeue-interval`` seconds), in batches;
* jobs run on a thread pool;
* a cap on jobs in hand: a dequeue asks for no more than the free room below
  ``--pending-limit`` (the original skipped a dequeue once over its limit);
* acks of finished jobs piggy-backed on the next dequeue request;
* a failed job's error appended to its custom status, and a linear backoff:
  retry delay = 1 s x attempts used so far.

Run a server (``pinlater serve``), put some jobs in (a body of ``fail`` makes the job fail),
then::

    python examples/example_worker.py --queue test_queue --create-queue

With the library, the same worker is::

    from pinlater.worker import Worker, linear
    worker = Worker("127.0.0.1:9010", concurrency=10, retry=linear(1.0))
    worker.register("test_queue", process)   # process(ctx) raises to fail
    worker.run()
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

from pinlater.client import Ack, DequeuedJob, PinLaterClient, PinLaterError

log = logging.getLogger("example_worker")


def process(body: bytes) -> None:
    """The example job: log the body; a body of ``fail`` fails."""
    if body == b"fail":
        raise RuntimeError("the example job was told to fail")
    log.info("processed %r", body[:60])


class ExampleWorker:
    def __init__(self, client: PinLaterClient, queue: str, args: argparse.Namespace) -> None:
        self.client = client
        self.queue = queue
        self.batch_size: int = args.batch_size
        self.pending_limit: int = args.pending_limit
        self.interval: float = args.dequeue_interval
        self.max_jobs: int | None = args.max_jobs
        self.pool = ThreadPoolExecutor(max_workers=args.threads, thread_name_prefix="example-job")
        self.lock = threading.Lock()
        self.pending = 0  # jobs in hand: dequeued, not yet finished
        self.finished = 0  # jobs whose ack has been sent
        self.succeeded: list[str] = []
        self.failed: list[Ack] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.dequeue_once()
            if self.max_jobs is not None and self.finished >= self.max_jobs:
                break
            self.stop.wait(self.interval)
        self.pool.shutdown(wait=True)  # finish the jobs in hand
        self.send_acks()

    def take_acks(self) -> tuple[list[str], list[Ack]]:
        with self.lock:
            succeeded, failed = self.succeeded, self.failed
            self.succeeded, self.failed = [], []
            return succeeded, failed

    def dequeue_once(self) -> None:
        succeeded, failed = self.take_acks()
        with self.lock:
            room = max(0, min(self.batch_size, self.pending_limit - self.pending))
        try:
            jobs = self.client.dequeue(self.queue, room, succeeded=succeeded, failed=failed)
        except PinLaterError as exc:
            log.warning("dequeue failed: %s", exc)
            with self.lock:  # the acks go out with the next request
                self.succeeded[:0], self.failed[:0] = succeeded, failed
            return
        self.finished += len(succeeded) + len(failed)
        with self.lock:
            self.pending += len(jobs)
        for job in jobs:
            self.pool.submit(self.run_job, job)

    def run_job(self, job: DequeuedJob) -> None:
        try:
            process(job.body)
            outcome: str | Ack = job.descriptor
        except Exception as exc:
            used = job.attempts_allowed - job.attempts_remaining + 1
            outcome = Ack(job.descriptor, append_status=f"{type(exc).__name__}: {exc}\n", retry_delay=1.0 * used)
            log.warning("job %s failed (attempt %d): %s", job.descriptor, used, exc)
        with self.lock:
            if isinstance(outcome, Ack):
                self.failed.append(outcome)
            else:
                self.succeeded.append(outcome)
            self.pending -= 1

    def send_acks(self) -> None:
        succeeded, failed = self.take_acks()
        if succeeded or failed:
            self.client.ack(self.queue, succeeded=succeeded, failed=failed)
            self.finished += len(succeeded) + len(failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9010)
    parser.add_argument("--queue", default="test_queue")
    parser.add_argument("--create-queue", action="store_true")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--pending-limit", type=int, default=50, help="cap on jobs in hand")
    parser.add_argument("--dequeue-interval", type=float, default=0.1, help="seconds between dequeues")
    parser.add_argument("--max-jobs", type=int, help="exit once this many jobs have been acked")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    client = PinLaterClient(f"{args.host}:{args.port}", source=None)
    if args.create_queue:
        client.create_queue(args.queue)
    worker = ExampleWorker(client, args.queue, args)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.run()
    client.close()
    log.info("done: %d job(s) acked", worker.finished)


if __name__ == "__main__":
    main()
