"""``lua/lib/order.lua``: the dequeue scripts' (score, id) order, each text read as a number once,
run in a real Redis's Lua against the order Python reads the same texts in."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.support.redis_server import RedisServer

from pinlater.backends.redis import scripts

pytestmark = pytest.mark.redis

SORT_ENTRIES = """
local entries = {}
for i = 1, #ARGV, 2 do
  entries[#entries + 1] = {ARGV[i], ARGV[i + 1]}
end
sort_entries(entries)
local out = {}
for _, e in ipairs(entries) do
  out[#out + 1] = e[1]
  -- the numbers it kept agree with the texts
  assert(e.n == tonumber(e[1]) and e.s == tonumber(e[2]))
end
return out
"""

SORT_IDS = """
local ids = {}
for i, id in ipairs(ARGV) do
  ids[i] = id
end
sort_ids(ids)
return ids
"""


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[redis.Redis]:
    with RedisServer(tmp_path / "redis") as server:
        client = server.client()
        yield client
        client.close()


def run(raw: redis.Redis, driver: str, args: list[str]) -> list[str]:
    source = scripts._library("lua", "order") + driver
    return [member.decode() for member in raw.eval(source, 0, *args)]


def test_entries_come_in_score_then_id_order_as_numbers(raw: redis.Redis) -> None:
    rng = random.Random(5)
    scores = ["1700000000123", "1700000000124", "5", "17", "1.5", "-3"]
    for _ in range(60):
        n = rng.randrange(1, 40)
        ids = rng.sample(range(1, 3000), n)  # ids of 1 to 4 digits: text order is not numeric
        entries = [(str(i), rng.choice(scores[: rng.randrange(1, len(scores) + 1)])) for i in ids]
        if rng.random() < 0.5:  # in order already, as a ZRANGEBYSCORE page mostly is
            entries.sort(key=lambda e: (float(e[1]), int(e[0])))
        args = [text for entry in entries for text in entry]
        want = [i for i, _ in sorted(entries, key=lambda e: (float(e[1]), int(e[0])))]
        assert run(raw, SORT_ENTRIES, args) == want


def test_ids_come_in_numeric_order(raw: redis.Redis) -> None:
    """sort_ids takes the members of one score in the text order Redis answers them in."""
    rng = random.Random(6)
    for _ in range(40):
        ids = sorted(str(i) for i in rng.sample(range(1, 100_000), rng.randrange(0, 50)))
        assert run(raw, SORT_IDS, ids) == sorted(ids, key=int)
    # one length (a batch's consecutive ids): text order is the order by value already
    ids = [str(i) for i in range(10_000, 10_060)]
    assert run(raw, SORT_IDS, ids) == ids
    # a batch across a power of ten: "10" comes before "9" as text, after it by value
    ids = [str(i) for i in range(95, 105)]
    assert run(raw, SORT_IDS, sorted(ids)) == ids
    # two texts of one number: sorted by value all the same (read at each comparison)
    got = run(raw, SORT_IDS, ["07", "10", "7", "9"])
    assert [int(i) for i in got] == [7, 7, 9, 10] and sorted(got) == ["07", "10", "7", "9"]
