"""Job descriptors through the extension: round trips, every malformed form, batches."""

from __future__ import annotations

import pickle
import random

import pytest

from pinlater._pinlater import (
    DescriptorError,
    decode_descriptor,
    decode_descriptors,
    encode_descriptor,
    encode_descriptors,
)

U64_MAX = 2**64 - 1


def test_contract_example() -> None:
    assert decode_descriptor("test_queue:s1d1:p1:42") == ("test_queue", "1d1", 1, 42)
    assert encode_descriptor("test_queue", "1d1", 1, 42) == "test_queue:s1d1:p1:42"
    assert decode_descriptors(["test_queue:s1d1:p1:42"]) == [("test_queue", "1d1", 1, 42)]
    assert encode_descriptors("test_queue", "1d1", [1], [42]) == ["test_queue:s1d1:p1:42"]


@pytest.mark.parametrize(
    ("queue", "shard", "priority", "local_id"),
    [
        ("q", "1", 1, 0),
        ("Queue_9", "x_Y", 127, U64_MAX),
        ("_", "_", 64, 1),
        ("a" * 200, "2d17", 3, 12345678901234567890),
    ],
)
def test_round_trip(queue: str, shard: str, priority: int, local_id: int) -> None:
    text = encode_descriptor(queue, shard, priority, local_id)
    assert text == f"{queue}:s{shard}:p{priority}:{local_id}"
    assert decode_descriptor(text) == (queue, shard, priority, local_id)


def test_leading_zeros_decode_to_canonical_numbers() -> None:
    assert decode_descriptor("q:s1:p007:0042") == ("q", "1", 7, 42)


def test_result_types() -> None:
    queue, shard, priority, local_id = decode_descriptor("q:s1:p2:3")
    assert (type(queue), type(shard), type(priority), type(local_id)) == (str, str, int, int)
    assert type(encode_descriptors("q", "1", [1], [1])) is list


MALFORMED = [
    ("", "expected 4 colon-separated parts `{queue}:s{shard}:p{priority}:{local_id}`, found 1"),
    ("q:s1:p1", "found 3"),
    ("q:s1:p1:2:3", "found 5"),
    ("test_queue/s1/p1/42", "found 1"),
    (":s1:p1:2", "queue name is empty"),
    ("a-b:s1:p1:2", 'queue name "a-b" may only contain ASCII letters, digits and underscores'),
    ("qué:s1:p1:2", 'queue name "qué" may only contain'),
    ("q q:s1:p1:2", 'queue name "q q" may only contain'),
    ("q:1:p1:2", "shard part \"1\" does not start with 's'"),
    ("q::p1:2", "shard part \"\" does not start with 's'"),
    ("q:s:p1:2", "shard name is empty"),
    ("q:s1 :p1:2", 'shard name "1 " may only contain'),
    ("q:s1*5:p1:2", 'shard name "1*5" may only contain'),
    ("q:s1:1:2", "priority part \"1\" does not start with 'p'"),
    ("q:s1:P1:2", "priority part \"P1\" does not start with 'p'"),
    ("q:s1:p:2", 'priority "" is not a decimal integer in 1..=127'),
    ("q:s1:p0:2", 'priority "0" is not a decimal integer in 1..=127'),
    ("q:s1:p128:2", 'priority "128" is not'),
    ("q:s1:p-1:2", 'priority "-1" is not'),
    ("q:s1:p+1:2", 'priority "+1" is not'),
    ("q:s1:p 1:2", 'priority " 1" is not'),
    ("q:s1:p1.0:2", 'priority "1.0" is not'),
    ("q:s1:p99999999999999999999:2", 'priority "99999999999999999999" is not'),
    ("q:s1:p1:", 'local id "" is not an unsigned 64-bit decimal integer'),
    ("q:s1:p1:-2", 'local id "-2" is not'),
    ("q:s1:p1:+2", 'local id "+2" is not'),
    ("q:s1:p1:2x", 'local id "2x" is not'),
    ("q:s1:p1: 2", 'local id " 2" is not'),
    ("q:s1:p1:0x10", 'local id "0x10" is not'),
    ("q:s1:p1:18446744073709551616", 'local id "18446744073709551616" is not'),
]


@pytest.mark.parametrize(("descriptor", "problem"), MALFORMED)
def test_every_malformed_form_is_named(descriptor: str, problem: str) -> None:
    with pytest.raises(DescriptorError) as single:
        decode_descriptor(descriptor)
    assert str(single.value).startswith(f'invalid job descriptor "{descriptor}": ')
    assert problem in str(single.value)

    batch = ["q:s1:p1:1", "q:s1:p1:2", descriptor, "also bad"]
    with pytest.raises(DescriptorError) as batched:
        decode_descriptors(batch)
    assert str(batched.value) == f"descriptor at index 2: {single.value}"


def test_descriptor_error_is_a_value_error_of_the_extension() -> None:
    assert issubclass(DescriptorError, ValueError)
    assert DescriptorError.__module__ == "pinlater._pinlater"
    with pytest.raises(ValueError, match="found 1"):
        decode_descriptor("nope")
    err = DescriptorError("x")
    assert str(pickle.loads(pickle.dumps(err))) == "x"


@pytest.mark.parametrize(
    ("queue", "shard", "problem"),
    [
        ("", "1", "queue name is empty"),
        ("a:b", "1", 'queue name "a:b" may only contain'),
        ("q", "", "shard name is empty"),
        ("q", "s:1", 'shard name "s:1" may only contain'),
        ("q", "1{2}", 'shard name "1{2}" may only contain'),
    ],
)
def test_encode_rejects_bad_names(queue: str, shard: str, problem: str) -> None:
    with pytest.raises(DescriptorError, match=r"^cannot encode job descriptor: ") as single:
        encode_descriptor(queue, shard, 1, 1)
    assert problem in str(single.value)
    with pytest.raises(DescriptorError) as batch:
        encode_descriptors(queue, shard, [1], [1])
    assert str(batch.value) == str(single.value)


@pytest.mark.parametrize(
    ("priority", "local_id", "problem"),
    [
        (0, 1, 'priority "0" is not a decimal integer in 1..=127'),
        (128, 1, 'priority "128"'),
        (-1, 1, 'priority "-1"'),
        (2**70, 1, f'priority "{2**70}"'),
        (1, -1, 'local id "-1" is not an unsigned 64-bit decimal integer'),
        (1, 2**64, f'local id "{2**64}"'),
    ],
)
def test_encode_rejects_out_of_range_numbers(priority: int, local_id: int, problem: str) -> None:
    with pytest.raises(DescriptorError, match=r"^cannot encode job descriptor: ") as single:
        encode_descriptor("q", "1", priority, local_id)
    assert problem in str(single.value)
    with pytest.raises(DescriptorError, match=r"^descriptor at index 1: cannot encode") as batch:
        encode_descriptors("q", "1", [1, priority], [1, local_id])
    assert problem in str(batch.value)


def test_encode_rejects_length_mismatch() -> None:
    with pytest.raises(DescriptorError, match="2 priorities but 1 local ids"):
        encode_descriptors("q", "1", [1, 2], [1])


def test_wrong_types_are_type_errors() -> None:
    with pytest.raises(TypeError, match="not a single str"):
        decode_descriptors("q:s1:p1:1")
    with pytest.raises(TypeError, match=r"descriptors\[1\] must be str, not int"):
        decode_descriptors(["q:s1:p1:1", 5])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        decode_descriptors(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_descriptors("q", "1", ["1"], [1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        encode_descriptors("q", "1", [1], [1.5])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not a single str"):
        encode_descriptors("q", "1", "1", [1])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_descriptor("q", "1", "1", 1)  # type: ignore[arg-type]


def test_any_sequence_is_accepted() -> None:
    assert encode_descriptors("q", "1", (1, 2), range(5, 7)) == ["q:s1:p1:5", "q:s1:p2:6"]
    assert decode_descriptors(("q:s1:p1:5",)) == [("q", "1", 1, 5)]
    assert encode_descriptors("q", "1", [], []) == []
    assert decode_descriptors([]) == []


def test_large_batches_round_trip() -> None:
    rng = random.Random(20240601)
    n = 100_000
    priorities = [rng.randint(1, 127) for _ in range(n)]
    local_ids = [rng.randint(0, U64_MAX) for _ in range(n)]
    encoded = encode_descriptors("big_queue", "3d2", priorities, local_ids)
    assert len(encoded) == n
    assert encoded[:3] == [f"big_queue:s3d2:p{p}:{i}" for p, i in zip(priorities[:3], local_ids[:3], strict=True)]
    decoded = decode_descriptors(encoded)
    assert decoded == [("big_queue", "3d2", p, i) for p, i in zip(priorities, local_ids, strict=True)]


def test_large_batch_reports_the_first_bad_index() -> None:
    descriptors = [f"q:s1:p1:{i}" for i in range(50_000)]
    descriptors[31_337] = "q:s1:p1:bad"
    descriptors[40_000] = "worse"
    with pytest.raises(DescriptorError, match=r'^descriptor at index 31337: invalid job descriptor "q:s1:p1:bad"'):
        decode_descriptors(descriptors)
