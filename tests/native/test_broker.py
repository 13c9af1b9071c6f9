"""The broker's buffer (``JobBuffer``) through the extension: order, bounds, no copies."""

from __future__ import annotations

import threading

import pytest

from pinlater._pinlater import DescriptorError, JobBuffer


def test_take_is_priority_order_then_first_in_first_out() -> None:
    buffer = JobBuffer(10)
    assert buffer.push("1", 2, [(1, b"a", 2, 2)], 100) == []
    assert buffer.push("2", 1, [(2, b"b", 3, 1), (3, b"c", 3, 3)], 101) == []
    assert (len(buffer), buffer.room, buffer.lengths()) == (3, 7, {1: 2, 2: 1})
    assert buffer.take(2) == [("2", 1, 2, b"b", 3, 1, 101), ("2", 1, 3, b"c", 3, 3, 101)]
    assert buffer.take(5) == [("1", 2, 1, b"a", 2, 2, 100)]
    assert buffer.take(5) == []


def test_push_is_bounded_and_returns_what_did_not_fit() -> None:
    buffer = JobBuffer(2)
    assert buffer.push("1", 1, [(i, b"x", 1, 1) for i in range(4)], 0) == [2, 3]
    assert len(buffer) == 2 and buffer.room == 0


def test_bodies_are_not_copied() -> None:
    body = b"y" * 1000
    buffer = JobBuffer(1)
    buffer.push("1", 1, [(1, body, 1, 1)], 0)
    assert buffer.drain()[0][3] is body


def test_take_older_than_and_drain() -> None:
    buffer = JobBuffer(10)
    buffer.push("1", 1, [(1, b"", 1, 1)], 5)
    buffer.push("1", 1, [(2, b"", 1, 1)], 50)
    assert [e[2] for e in buffer.take_older_than(10)] == [1]
    assert [e[2] for e in buffer.drain()] == [2]
    assert len(buffer) == 0


def test_bad_arguments_raise_ordinary_errors() -> None:
    with pytest.raises(ValueError):
        JobBuffer(-1)
    buffer = JobBuffer(1)
    with pytest.raises(TypeError):
        buffer.push("1", 1, [(1, "not bytes", 1, 1)], 0)  # type: ignore[list-item]
    assert buffer.take(-5) == []


def test_concurrent_takes_hand_out_each_entry_once() -> None:
    buffer = JobBuffer(10_000)
    buffer.push("1", 1, [(i, b"", 1, 1) for i in range(10_000)], 0)
    taken: list[list[int]] = [[] for _ in range(4)]

    def work(k: int) -> None:
        while batch := buffer.take(7):
            taken[k] += [e[2] for e in batch]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = sorted(i for batch in taken for i in batch)
    assert everything == list(range(10_000))


def test_hand_out_encodes_descriptors_and_keeps_stale_entries_apart() -> None:
    buffer = JobBuffer(10)
    body = b"payload"
    buffer.push("1", 2, [(7, body, 3, 2)], 100)
    buffer.push("east_2", 1, [(9, b"b", 2, 2)], 100)
    buffer.push("1", 1, [(8, b"old", 2, 1)], 10)  # reserved before the cutoff
    fresh, stale = buffer.hand_out("emails", 5, 50)
    assert fresh == [("emails:seast_2:p1:9", "east_2", 1, 9, b"b", 2, 2), ("emails:s1:p2:7", "1", 2, 7, body, 3, 2)]
    assert fresh[1][4] is body
    assert stale == [("1", 1, 8, b"old", 2, 1, 10)]
    assert len(buffer) == 0


def test_hand_out_takes_at_most_the_limit_in_priority_order() -> None:
    buffer = JobBuffer(10)
    buffer.push("1", 3, [(1, b"", 1, 1), (2, b"", 1, 1)], 0)
    buffer.push("1", 1, [(3, b"", 1, 1)], 0)
    fresh, stale = buffer.hand_out("q", 2, 0)
    assert [f[0] for f in fresh] == ["q:s1:p1:3", "q:s1:p3:1"] and stale == []
    assert buffer.hand_out("q", 0, 0) == ([], []) and len(buffer) == 1


def test_hand_out_rejects_a_queue_name_no_descriptor_can_hold() -> None:
    buffer = JobBuffer(2)
    buffer.push("1", 1, [(1, b"", 1, 1)], 0)
    with pytest.raises(DescriptorError, match="queue name"):
        buffer.hand_out("bad:queue", 1, 0)
