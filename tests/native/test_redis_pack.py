"""``redis_pack_command``: Redis commands packed by the extension exactly as hiredis packs them
(the Redis backend's connections on the event loop send what it returns)."""

from __future__ import annotations

import random
from typing import Any

import hiredis
import pytest

from pinlater._pinlater import redis_dequeue_command, redis_pack_command


def random_arg(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.choice([0, 1, rng.randrange(2, 2000)]))
    if kind == 1:
        return "".join(
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(160, 0xD7FF)])) for _ in range(rng.randrange(0, 40))
        )
    if kind == 2:
        return rng.randrange(-(2**63), 2**63)
    if kind == 3:
        return rng.choice([0, -1, 2**63, -(2**63) - 1, 10**40, -(10**40)])
    if kind == 4:
        return rng.choice([0.0, -0.0, 1.5, 0.1, 1e16, 1e-7, float("inf"), float("-inf"), float("nan")])
    return rng.uniform(-1e12, 1e12)


def test_random_commands_pack_as_hiredis_packs_them() -> None:
    rng = random.Random(11)
    for _ in range(500):
        args = tuple(random_arg(rng) for _ in range(rng.choice([0, 1, rng.randrange(2, 600)])))
        assert redis_pack_command(args) == hiredis.pack_command(args)


def test_a_script_call_is_counted_and_length_prefixed() -> None:
    packed = redis_pack_command(("EVALSHA", "ab", 1, b"k\r\n", -7, "é"))
    assert packed == b"*6\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$3\r\nk\r\n\r\n$2\r\n-7\r\n$2\r\n\xc3\xa9\r\n"


class _Str(str):
    pass


@pytest.mark.parametrize("arg", [True, None, bytearray(b"x"), _Str("s"), [1]])
def test_what_hiredis_refuses_is_refused(arg: Any) -> None:
    with pytest.raises(TypeError, match="must be str, int, float or bytes"):
        redis_pack_command(("GET", arg))


def test_a_lone_surrogate_is_a_unicode_error() -> None:
    with pytest.raises(UnicodeEncodeError):
        redis_pack_command(("SET", "\ud800"))


def command_args(packed: bytes) -> list[bytes]:
    """The arguments of one packed command (``*N`` then ``$len`` bulk strings)."""
    reader = hiredis.Reader()
    # a packed command is itself valid RESP: an array of bulk strings
    reader.feed(packed)
    args: list[bytes] = reader.gets()
    return args


def test_times_are_python_float_reprs_of_seconds() -> None:
    """The scripts' times are ``repr(ms / 1000.0)``; the extension prints the usual ones
    (0 <= ms < 10**15) as decimals without float formatting, and must agree with Python."""
    rng = random.Random(15)
    values = list(range(0, 3000)) + [10**k + d for k in range(1, 16) for d in (-1001, -1000, -999, -1, 0, 1, 10, 999)]
    values += [rng.randrange(10 ** rng.randrange(1, 16)) for _ in range(20_000)]
    values += [1_700_000_000_000 + rng.randrange(10**9) for _ in range(5_000)]
    values += [-1, -1000, -1_700_000_000_123, 10**15 + 1, 2**53 + 1, 2**63 - 1, -(2**63)]
    for ms in values:
        args = command_args(redis_dequeue_command("sha", "s", "q", 1, 10, "c", ms, False, 1 << 24))
        # now: ARGV[3], after the nine keys (dequeue_jobs.lua) and EVALSHA, sha, numkeys, queue, prefix
        assert args[14] == repr(ms / 1000.0).encode(), ms
