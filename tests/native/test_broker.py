"""The broker's buffer (``JobBuffer``), hand-outs and claim flushes through the extension: order,
bounds, and the reply written from a hand-out, with no Python object per job in between."""

from __future__ import annotations

import threading

import pytest

from pinlater._pinlater import (
    ClaimedJobs,
    ClaimFlush,
    ClaimItems,
    DescriptorError,
    JobBuffer,
    encode_dequeue_handout,
    encode_dequeue_reply,
)
from pinlater.backends.base import ClaimedJob
from pinlater.backends.sharded import DequeuedJob


def jobs(*items: tuple[int, bytes, int, int]) -> ClaimedJobs:
    """A reserve call's answer: ``(local_id, body, attempts_allowed, attempts_remaining)`` each."""
    return ClaimedJobs([(i, body, allowed, remaining, 1, 2) for i, body, allowed, remaining in items])


def test_take_is_priority_order_then_first_in_first_out() -> None:
    buffer = JobBuffer(10)
    assert buffer.push("1", 2, jobs((1, b"a", 2, 2)), 100) == []
    assert buffer.push("2", 1, jobs((2, b"b", 3, 1), (3, b"c", 3, 3)), 101) == []
    assert (len(buffer), buffer.room, buffer.lengths()) == (3, 7, {1: 2, 2: 1})
    assert buffer.take(2) == [("2", 1, 2, b"b", 3, 1, 101), ("2", 1, 3, b"c", 3, 3, 101)]
    assert buffer.take(5) == [("1", 2, 1, b"a", 2, 2, 100)]
    assert buffer.take(5) == []


def test_push_is_bounded_and_returns_what_did_not_fit() -> None:
    buffer = JobBuffer(2)
    assert buffer.push("1", 1, jobs(*[(i, b"x", 1, 1) for i in range(4)]), 0) == [2, 3]
    assert len(buffer) == 2 and buffer.room == 0
    assert buffer.push("1", 1, ClaimedJobs([]), 0) == []


def test_take_older_than_and_drain() -> None:
    buffer = JobBuffer(10)
    buffer.push("1", 1, jobs((1, b"", 1, 1)), 5)
    buffer.push("1", 1, jobs((2, b"body", 1, 1)), 50)
    assert [e[2] for e in buffer.take_older_than(10)] == [1]
    assert buffer.drain() == [("1", 1, 2, b"body", 1, 1, 50)]
    assert len(buffer) == 0


def test_bad_arguments_raise_ordinary_errors() -> None:
    with pytest.raises(ValueError):
        JobBuffer(-1)
    buffer = JobBuffer(1)
    with pytest.raises(TypeError):
        buffer.push("1", 1, [(1, b"x", 1, 1, 0, 0)], 0)  # type: ignore[arg-type]
    assert buffer.take(-5) == []
    assert len(buffer.hand_out("q", -5, 1 << 30, 0)) == 0


def test_concurrent_hand_outs_take_each_entry_once() -> None:
    buffer = JobBuffer(10_000)
    buffer.push("1", 1, jobs(*[(i, b"", 1, 1) for i in range(10_000)]), 0)
    taken: list[list[str]] = [[] for _ in range(4)]

    def work(k: int) -> None:
        while out := buffer.hand_out("q", 7, 1 << 30, 0):
            taken[k] += [d for d, *_ in out.to_list()]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = sorted(int(d.rsplit(":", 1)[1]) for batch in taken for d in batch)
    assert everything == list(range(10_000))


def test_hand_out_keeps_stale_entries_apart() -> None:
    buffer = JobBuffer(10)
    buffer.push("1", 2, jobs((7, b"payload", 3, 2)), 100)
    buffer.push("east_2", 1, jobs((9, b"b", 2, 2)), 100)
    buffer.push("1", 1, jobs((8, b"old", 2, 1)), 10)  # reserved before the cutoff
    out = buffer.hand_out("emails", 5, 1 << 30, 50)
    assert (len(out), out.queue, out.stale_count) == (2, "emails", 1)
    assert out.to_list() == [("emails:seast_2:p1:9", b"b", 2, 2), ("emails:s1:p2:7", b"payload", 3, 2)]
    assert out.stale() == [("1", 1, 8, b"old", 2, 1, 10)]
    assert len(buffer) == 0


def test_hand_out_takes_at_most_the_limit_in_priority_order() -> None:
    buffer = JobBuffer(10)
    buffer.push("1", 3, jobs((1, b"", 1, 1), (2, b"", 1, 1)), 0)
    buffer.push("1", 1, jobs((3, b"", 1, 1)), 0)
    out = buffer.hand_out("q", 2, 1 << 30, 0)
    assert [d for d, *_ in out.to_list()] == ["q:s1:p1:3", "q:s1:p3:1"] and out.stale() == []
    empty = buffer.hand_out("q", 0, 1 << 30, 0)
    assert not empty and empty.stale_count == 0 and len(buffer) == 1


def test_hand_out_rejects_a_queue_name_no_descriptor_can_hold() -> None:
    buffer = JobBuffer(2)
    buffer.push("1", 1, jobs((1, b"", 1, 1)), 0)
    with pytest.raises(DescriptorError, match="queue name"):
        buffer.hand_out("bad:queue", 1, 1 << 30, 0)


def test_the_hand_out_reply_is_the_reply_of_its_jobs() -> None:
    """``encode_dequeue_handout`` writes what ``encode_dequeue_reply`` writes for the same jobs
    as ``DequeuedJob``s (itself checked byte for byte against thriftpy2)."""
    buffer = JobBuffer(10)
    buffer.push("east_2", 2, jobs((9, b"\x00\xffbody", 5, 4)), 100)
    buffer.push("1", 1, jobs((3, b"", 1, 1), (4, b"x" * 300, 2**31 - 1, 0)), 100)
    buffer.push("east_2", 1, jobs((10, b"z", 3, 3)), 100)
    out = buffer.hand_out("emails", 10, 1 << 30, 0)
    as_jobs = [DequeuedJob(d, ClaimedJob(0, body, a, r, 0, 0)) for d, body, a, r in out.to_list()]
    assert [j.descriptor for j in as_jobs] == [
        "emails:s1:p1:3",
        "emails:s1:p1:4",
        "emails:seast_2:p1:10",
        "emails:seast_2:p2:9",
    ]
    assert encode_dequeue_handout("dequeueJobs", 41, out) == encode_dequeue_reply("dequeueJobs", 41, as_jobs)
    nothing = buffer.hand_out("emails", 10, 1 << 30, 0)
    assert encode_dequeue_handout("dequeueJobs", 1, nothing) == encode_dequeue_reply("dequeueJobs", 1, [])


def test_a_flush_groups_claims_by_queue_and_shard_and_knows_its_jobs() -> None:
    a, b = JobBuffer(10), JobBuffer(10)
    a.push("1", 1, jobs((1, b"", 1, 1), (2, b"", 1, 1)), 0)
    a.push("2", 2, jobs((1, b"", 1, 1)), 0)
    b.push("1", 1, jobs((5, b"", 1, 1)), 0)
    flush = ClaimFlush()
    flush.add("w1|c", a.hand_out("qa", 2, 1 << 30, 0))
    flush.add("w2|c", a.hand_out("qa", 5, 1 << 30, 0))
    flush.add("w3|c", b.hand_out("qb", 5, 1 << 30, 0))
    assert len(flush) == 4
    assert [(q, s, items.to_list()) for q, s, items in flush.batches()] == [
        ("qa", "1", [(1, 1, "w1|c"), (1, 2, "w1|c")]),
        ("qa", "2", [(2, 1, "w2|c")]),
        ("qb", "1", [(1, 5, "w3|c")]),
    ]
    assert [len(items) for _q, _s, items in flush.batches()] == [2, 1, 1]
    assert flush.holds_queue("qb") and not flush.holds_queue("qc")
    other = ClaimFlush()
    assert ClaimFlush.holding([other, flush], [("qa", "2", 2, 1)]) == [1]
    assert ClaimFlush.holding([other, flush], [("qa", "1", 2, 1), ("qb", "2", 1, 5)]) == []
    assert ClaimFlush.holding([], [("qa", "2", 2, 1)]) == []
    # a descriptor's id may be any u64: one past i64 (no job has one) is held by none
    assert ClaimFlush.holding([other, flush], [("qa", "2", 2, 2**64 - 1), ("qa", "2", 2, 1)]) == [1]
    assert ClaimFlush.holding([other, flush], [("qa", "2", 2, 2**63)]) == []


def test_claim_items_keep_order_and_each_claim() -> None:
    items = [(1, 1, "a"), (1, 2, "a"), (2, 3, "b"), (1, 4, "a")]
    assert ClaimItems(items).to_list() == items
    assert len(ClaimItems(items)) == 4 and not ClaimItems([])
