"""Dedup keys (#17) in the clients: what ``Job``'s keys put on the wire, ``EnqueueResult``, and
the sync and asyncio clients against a real server (``deduplicated``, keys in lookups and scans,
a group key refused)."""

from __future__ import annotations

import asyncio
import json
import pickle
from types import SimpleNamespace

import pytest

from pinlater.client import (
    AsyncPinLaterClient,
    EnqueueResult,
    Job,
    JobState,
    PinLaterClient,
    ServerError,
    calls,
)
from pinlater.client.codec import encode
from pinlater.idl import idl

# Field headers in the binary protocol: type byte, then the field id (i16, big-endian).
DEDUP_KEY_FIELD = b"\x0b\x00\x06"  # string 6
DEDUP_WINDOW_FIELD = b"\x0a\x00\x07"  # i64 7
GROUP_KEY_FIELD = b"\x0b\x00\x08"  # string 8


def enqueue_frame(*jobs: calls.JobLike) -> bytes:
    call = calls.enqueue("q", jobs)
    return encode(call.method, 1, idl.RequestContext(source="t"), call.args)


# -- no server --------------------------------------------------------------------------------


@pytest.mark.parametrize("job", [b"body", "body", Job(b"body"), Job("body", priority=2, dedup_window_ms=0)])
def test_a_job_without_keys_puts_no_extension_field_on_the_wire(job: calls.JobLike) -> None:
    frame = enqueue_frame(job)
    for header in (DEDUP_KEY_FIELD, DEDUP_WINDOW_FIELD, GROUP_KEY_FIELD):
        assert header not in frame


def test_keys_are_sent_when_set() -> None:
    frame = enqueue_frame(Job(b"body", dedup_key="order-7", dedup_window_ms=60_000, group_key="g"))
    assert DEDUP_KEY_FIELD + b"\x00\x00\x00\x07order-7" in frame
    assert DEDUP_WINDOW_FIELD + (60_000).to_bytes(8, "big") in frame
    assert GROUP_KEY_FIELD + b"\x00\x00\x00\x01g" in frame


def test_enqueue_result_is_the_list_it_was_with_flags() -> None:
    plain = EnqueueResult(["q:s1:p1:1", "q:s1:p1:2"])
    assert plain == ["q:s1:p1:1", "q:s1:p1:2"] and isinstance(plain, list)
    assert plain.deduplicated == (False, False) and plain.created == ["q:s1:p1:1", "q:s1:p1:2"]
    [a, b] = plain
    assert (a, b) == ("q:s1:p1:1", "q:s1:p1:2")
    keyed = EnqueueResult(["q:s1:p1:1", "q:s1:p1:1"], [False, True])
    assert keyed.deduplicated == (False, True) and keyed.created == ["q:s1:p1:1"]
    assert repr(keyed) == repr(["q:s1:p1:1", "q:s1:p1:1"]) and json.dumps(keyed) == '["q:s1:p1:1", "q:s1:p1:1"]'
    copied = pickle.loads(pickle.dumps(keyed))
    assert copied == keyed and copied.deduplicated == (False, True)
    with pytest.raises(ValueError, match="1 deduplicated flags for 2 descriptors"):
        EnqueueResult(["a", "b"], [True])


def test_a_reply_whose_flags_do_not_pair_up_is_a_server_error() -> None:
    convert = calls.enqueue("q", [b"x"]).convert
    result = convert(SimpleNamespace(jobDescriptors=["q:s1:p1:1"], deduplicated=None))
    assert result == ["q:s1:p1:1"] and result.deduplicated == (False,)
    with pytest.raises(ServerError, match="2 deduplicated flags for 1 descriptors"):
        convert(SimpleNamespace(jobDescriptors=["q:s1:p1:1"], deduplicated=[False, True]))


# -- a real server ----------------------------------------------------------------------------


def test_a_held_key_answers_the_live_job(pl: PinLaterClient, queue: str) -> None:
    first = pl.enqueue(queue, [Job(b"one", dedup_key="order-1"), b"plain", Job(b"two", dedup_key="order-1")])
    assert first.deduplicated == (False, False, True)
    assert first[2] == first[0] and first[1] != first[0]
    again = pl.enqueue(queue, [Job(b"three", dedup_key="order-1", priority=2)])
    assert again == [first[0]] and again.deduplicated == (True,)
    assert pl.count(queue, JobState.PENDING) == 2

    found = pl.lookup(first[:2], include_body=True)
    assert found[first[0]].body == b"one" and found[first[0]].dedup_key == "order-1"
    assert found[first[0]].group_key is None
    assert found[first[1]].dedup_key is None and found[first[1]].group_key is None
    scanned = {j.descriptor: j.dedup_key for j in pl.scan(queue, JobState.PENDING).jobs}
    assert scanned == {first[0]: "order-1", first[1]: None}


def test_a_finished_job_frees_its_key_unless_a_window_holds_it(pl: PinLaterClient, queue: str) -> None:
    free, held = pl.enqueue(queue, [Job(b"a", dedup_key="free"), Job(b"b", dedup_key="held", dedup_window_ms=600_000)])
    jobs = pl.dequeue(queue, 10)
    assert {j.descriptor for j in jobs} == {free, held}
    pl.ack(queue, succeeded=[free, held])
    again = pl.enqueue(queue, [Job(b"a2", dedup_key="free"), Job(b"b2", dedup_key="held")])
    assert again.deduplicated == (False, True)
    assert again[0] != free and again[1] == held


def test_plain_enqueues_flag_nothing(pl: PinLaterClient, queue: str) -> None:
    result = pl.enqueue(queue, [b"a", Job(b"b", priority=2)])
    assert isinstance(result, EnqueueResult) and result.deduplicated == (False, False)
    assert pl.count(queue, JobState.PENDING) == 2


def test_a_group_key_runs_its_jobs_in_order(pl: PinLaterClient, queue: str) -> None:
    first, second, plain = pl.enqueue(queue, [Job(b"g1", group_key="g"), Job(b"g2", group_key="g"), b"plain"])
    assert {j.descriptor for j in pl.dequeue(queue, 10)} == {first, plain}, "g2 waits for g1"
    found = pl.lookup([second])
    assert found[second].group_key == "g" and found[second].state == JobState.PENDING
    pl.ack(queue, succeeded=[first])
    assert [j.descriptor for j in pl.dequeue(queue, 10)] == [second]


def test_the_async_client_answers_the_same(address: str, queue: str) -> None:
    async def main() -> None:
        async with AsyncPinLaterClient(address) as client:
            first = await client.enqueue(queue, [Job(b"x", dedup_key="k"), Job(b"y", dedup_key="k")])
            assert first.deduplicated == (False, True) and first[1] == first[0]
            found = await client.lookup([first[0]])
            assert found[first[0]].dedup_key == "k" and found[first[0]].group_key is None
            [job] = (await client.scan(queue, JobState.PENDING)).jobs
            assert job.descriptor == first[0] and job.dedup_key == "k"
            [grouped] = await client.enqueue(queue, [Job(b"z", group_key="g")])
            assert (await client.lookup([grouped]))[grouped].group_key == "g"

    asyncio.run(main())
