"""``SharedAnswer``: the queue list and the rate charts are made once for every request while
their inputs are the same, and not again within ten times what the last one took."""

from __future__ import annotations

from pinlater.server.shared_answer import SharedAnswer
from tests.server.test_rate_history import Clock


def test_an_answer_is_made_again_only_for_new_inputs_and_not_soon_after_a_costly_one() -> None:
    clock = Clock()
    shared = SharedAnswer(clock=clock)
    made: list[str] = []

    def make(text: str, cost: float) -> str:
        made.append(text)
        clock.now += cost
        return text

    snapshot, rates = object(), {"q": 1.0}
    assert shared.get((snapshot, rates), lambda: make("first", 0.25)) == "first"
    clock.now += 60
    # the same inputs (the same snapshot, rates equal though another dict): the same answer
    assert shared.get((snapshot, {"q": 1.0}), lambda: make("again", 0.25)) == "first"
    # new inputs: made again...
    assert shared.get((object(), rates), lambda: make("second", 0.25)) == "second"
    # ...but not within ten times its cost (2.5 s) of the last one, whatever the inputs
    clock.now += 2.4
    assert shared.get((object(), rates), lambda: make("third", 0.001)) == "second"
    clock.now += 0.2
    assert shared.get((object(), rates), lambda: make("third", 0.001)) == "third"
    # a cheap answer is made again at once for new inputs (a rate change shows at the next read)
    assert shared.get((snapshot, {"q": 2.0}), lambda: make("fourth", 0.001)) == "fourth"
    assert made == ["first", "second", "third", "fourth"]


def test_requests_while_an_answer_is_made_off_the_loop_share_it() -> None:
    import asyncio

    shared: SharedAnswer[bytes] = SharedAnswer()
    made: list[int] = []

    async def render() -> bytes:
        made.append(1)
        await asyncio.sleep(0.01)  # (made off the loop, as /metrics renders on a worker thread)
        return b"metrics %d" % len(made)

    async def scrapes() -> list[bytes]:
        first = await asyncio.gather(*(shared.get_async(("pass 1",), render) for _ in range(5)))
        again = await shared.get_async(("pass 1",), render)
        changed = await shared.get_async(("pass 2",), render)
        return [*first, again, changed]

    assert asyncio.run(scrapes()) == [b"metrics 1"] * 6 + [b"metrics 2"]
    assert len(made) == 2
