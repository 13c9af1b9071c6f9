"""Python clients of the PinLater contract: ``PinLaterClient`` (threads) and
``AsyncPinLaterClient`` (asyncio), with typed results and typed errors.

    from pinlater.client import PinLaterClient, Job, JobState

    with PinLaterClient("127.0.0.1:9010") as client:
        client.create_queue("emails")
        [descriptor] = client.enqueue("emails", [Job(b"hello", priority=2)])
        again = client.enqueue("emails", [Job(b"hi", dedup_key="welcome:42")] * 2)
        assert again.deduplicated == (False, True) and again[1] == again[0]  # one job made
        jobs = client.dequeue("emails", limit=10)
        client.ack("emails", succeeded=[j.descriptor for j in jobs])

        # job control (pinlater extensions): expiry, cancel, paged scans, schedules
        [late] = client.enqueue("emails", [Job(b"promo", expire_at_ms=deadline_ms)])
        client.cancel("emails", [late])
        for info in client.scan_all("emails", JobState.FAILED):  # every page, one call each
            print(info.descriptor, info.custom_status)
        client.upsert_schedule("emails", "digest", cron="0 8 * * *", body=b"daily digest")
        [digest] = client.list_schedules("emails")  # digest.next_run_ms: the next 08:00 UTC
"""

from pinlater.client.aio import AsyncPinLaterClient
from pinlater.client.calls import Call
from pinlater.client.errors import (
    ERROR_CLASSES,
    EnqueueRejected,
    InvalidRequest,
    PasswordInvalid,
    PinLaterConnectionError,
    QueueNotFound,
    RateLimited,
    ServerError,
    ServerUnavailable,
)
from pinlater.client.servers import ServerSet
from pinlater.client.sync import PinLaterClient, default_source
from pinlater.client.types import (
    SCAN_END,
    SCAN_START,
    Ack,
    Checkpoint,
    DequeuedJob,
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    ScanResult,
    ScheduleInfo,
)
from pinlater.errors import ErrorCode, PinLaterError

__all__ = [
    "ERROR_CLASSES",
    "SCAN_END",
    "SCAN_START",
    "Ack",
    "AsyncPinLaterClient",
    "Call",
    "Checkpoint",
    "DequeuedJob",
    "EnqueueRejected",
    "EnqueueResult",
    "ErrorCode",
    "InvalidRequest",
    "Job",
    "JobInfo",
    "JobState",
    "PasswordInvalid",
    "PinLaterClient",
    "PinLaterConnectionError",
    "PinLaterError",
    "QueueNotFound",
    "RateLimited",
    "ScanResult",
    "ScheduleInfo",
    "ServerError",
    "ServerSet",
    "ServerUnavailable",
    "default_source",
]
