"""A dequeue of more jobs than one store call claims (``STORE_CALL_JOBS``), through
``ShardedBackend`` on a real store of every kind: each of its store calls claims under a claim of
its own. MySQL reads back the jobs a call claimed by its claim; with one claim for every call,
each call read back all the jobs of the calls before it, and a dequeue of 40,000 jobs took 15 s
where 10,000 took 1.6 (now 0.4 and 1.4 s). Checkpoints still find every job by the source.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.support.hot import dequeue, enqueue, one_shard

from pinlater.backends.base import STORE_CALL_JOBS, CheckpointItem, JobState, NewJob, ShardStore
from pinlater.backends.sharded import ShardedBackend

Q = "large_dequeues"


@pytest.fixture
def backend(store: ShardStore) -> Iterator[ShardedBackend]:
    with one_shard(store, Q) as backend:
        yield backend


def test_each_store_call_of_a_large_dequeue_claims_under_a_claim_of_its_own(
    store: ShardStore, backend: ShardedBackend
) -> None:
    async def scenario() -> None:
        now = backend.clock.now_ms()
        total = 2 * STORE_CALL_JOBS + 500
        for at in range(0, total, STORE_CALL_JOBS):
            batch = range(at, min(total, at + STORE_CALL_JOBS))
            await enqueue(backend, Q, [NewJob(1, b"job-%d" % i, now, 2) for i in batch])
        got = await dequeue(backend, Q, total, "worker-7")
        assert len({j.descriptor for j in got}) == total

        found = await backend.lookup_jobs([j.descriptor for j in got], False)
        claims = {found[j.descriptor].claim_descriptor for j in got}
        assert len(claims) == 3, "one claim a store call"
        assert all(claim is not None and claim.startswith("worker-7|") for claim in claims)
        last = got[-1]
        put_back = [(store.name, CheckpointItem(1, last.job.local_id, now, True))]
        assert await backend.checkpoint_jobs(Q, "worker-7", put_back) == 1
        assert (await backend.lookup_jobs([last.descriptor], False))[last.descriptor].state == JobState.PENDING
        await backend.aclose()

    asyncio.run(scenario())
