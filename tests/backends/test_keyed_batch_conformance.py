"""A whole keyed enqueue request on one shard (``HotPath.enqueue_keyed_batch``), for every
backend kind: how the server places a request whose jobs carry dedup keys, groups or expiries
when one shard takes new jobs. The embedded store hands it whole to its Rust writer; the others
split it in Python (``place_keyed_batch``). Either way a key repeated in the request is answered
with its first job's place, a held key with its holder's, and jobs without a key ride along as
plain PENDING jobs, all in request order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.store_ops import T0, Ops

from pinlater._pinlater import KeyedJobBatch, KeyedPlacement
from pinlater.backends.base import AckItem, Enqueued, JobFilter, JobState, KeyedJob, NewJob, ShardStore

Q = "keyed_batch"


@pytest.fixture
def ops(store: ShardStore) -> Iterator[Ops]:
    store.create_queue(Q, 3)
    made = Ops(store, Q, hot=True)
    try:
        yield made
    finally:
        made.close()


def keyed(body: bytes, key: str | None = None, *, priority: int = 1, expire_at: int | None = None) -> KeyedJob:
    return KeyedJob(NewJob(priority, body, T0, 3), key, 0, None, expire_at)


def bodies_of(store: ShardStore, placed: list[Enqueued]) -> dict[tuple[int, int], bytes]:
    records = store.lookup_jobs(Q, [(p.priority, p.local_id) for p in placed], True)
    return {(r.priority, r.local_id): r.body for r in records}


def test_a_request_is_placed_in_order_with_repeats_and_holders_answered_by_the_first_job(ops: Ops) -> None:
    (held,) = ops.enqueue([keyed(b"held", "k0", priority=2)])
    assert not held.deduplicated

    placed = ops.enqueue(
        [
            keyed(b"first", "k1"),
            keyed(b"plain"),  # no key: a plain job in the same request
            keyed(b"again", "k1", priority=3),  # repeats k1: the first job's place
            keyed(b"held again", "k0"),  # held by the earlier request's job
            keyed(b"expiring", expire_at=T0 + 60_000, priority=3),
        ]
    )

    assert [p.deduplicated for p in placed] == [False, False, True, True, False]
    assert placed[2] == Enqueued(placed[0].priority, placed[0].local_id, True)
    assert placed[3] == Enqueued(2, held.local_id, True)
    new = [placed[0], placed[1], placed[4]]
    assert len({(p.priority, p.local_id) for p in new}) == 3, "three jobs were written"
    assert bodies_of(ops.store, [*new, held]) == {
        (1, placed[0].local_id): b"first",
        (1, placed[1].local_id): b"plain",
        (3, placed[4].local_id): b"expiring",
        (2, held.local_id): b"held",
    }
    pending = sum(ops.store.count_jobs(Q, JobFilter(JobState.PENDING, p, T0, None), None) for p in (1, 2, 3))
    assert pending == 4, "nothing was written for the two deduplicated jobs"


def test_a_key_is_held_while_its_job_runs_and_free_once_it_succeeded(ops: Ops) -> None:
    (first,) = ops.enqueue([keyed(b"one", "k")])
    (claimed,) = ops.dequeue(1, 10)
    assert claimed.local_id == first.local_id
    (again,) = ops.enqueue([keyed(b"two", "k")])
    assert again == Enqueued(1, first.local_id, True), "IN_PROGRESS holds the key"

    ops.ack(succeeded=[AckItem(1, first.local_id)])
    second, repeat = ops.enqueue([keyed(b"three", "k"), keyed(b"four", "k")])
    assert not second.deduplicated and second.local_id != first.local_id
    assert repeat == Enqueued(1, second.local_id, True)
    assert [j.body for j in ops.dequeue(1, 10)] == [b"three"]


def test_a_batch_holds_one_keys_tuple_per_job_and_says_what_a_placement_wrote() -> None:
    with pytest.raises(ValueError, match="2 jobs but 1 keys"):
        KeyedJobBatch([(1, b"a", 0, 3, ""), (1, b"b", 0, 3, "")], [(None, 0, None, None)])
    keys = [("k", 0, None, None), (None, 0, "g", 7), ("ключ", 5, None, None)]
    batch = KeyedJobBatch([(2, b"a", 5, 3, ""), (3, b"bb", 9, 3, ""), (1, b"ccc", 5, 3, "")], keys)
    assert (len(batch), batch.max_priority, batch.first_grouped) == (3, 3, 1)
    assert batch.keys() == keys
    assert [job[1] for job in batch.batch().to_list()] == [b"a", b"bb", b"ccc"]
    placement = KeyedPlacement([(2, 10, False), (3, 11, False), (2, 10, True)])
    assert (len(placement), placement.deduplicated) == (3, 1)
    assert batch.written(placement) == (2, 3, 1, 1), "the deduplicated third job wrote nothing"
    assert batch.written_ready(placement, 5) == ([2], [(3, 9)])
