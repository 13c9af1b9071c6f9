"""Run Python functions as PinLater job handlers.

    from pinlater.worker import Worker, JobContext, exponential

    worker = Worker("127.0.0.1:9010", concurrency=16)

    @worker.register("emails", retry=exponential(base=2.0))
    def send_email(ctx: JobContext) -> None:
        deliver(ctx.body)            # raise to fail; the error text goes to the custom status

    worker.run()                     # until SIGTERM/SIGINT: then finish or release, ack, return 0

Or from the command line: ``pinlater worker mymodule:send_email --queue emails``.
"""

from pinlater.worker.context import HandlerTimeout, JobContext, JobKeys
from pinlater.worker.queue_runner import Handler, Registration, WorkerStats, failure_status
from pinlater.worker.retry import RetryPolicy, by_name, constant, exponential, linear
from pinlater.worker.runner import Worker

__all__ = [
    "Handler",
    "HandlerTimeout",
    "JobContext",
    "JobKeys",
    "Registration",
    "RetryPolicy",
    "Worker",
    "WorkerStats",
    "by_name",
    "constant",
    "exponential",
    "failure_status",
    "linear",
]
