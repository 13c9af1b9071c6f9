"""``redis_pack_command``: Redis commands packed by the extension exactly as hiredis packs them
(the Redis backend's connections on the event loop send what it returns)."""

from __future__ import annotations

import random
from typing import Any

import hiredis
import pytest

from pinlater._pinlater import redis_pack_command


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
