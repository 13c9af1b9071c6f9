"""An unexpected error in a Thrift method is answered as an internal error, and its traceback
is logged once per 5 s per method with a count of the others: a request that meets one can be
sent again at will, and each wrote a traceback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pinlater.idl import idl
from pinlater.server.handler import _thrift_errors
from pinlater.server.metrics import Metrics


class Failing:
    metrics = Metrics()

    @_thrift_errors
    async def get_queue_names(self, context: Any) -> None:
        raise RuntimeError("a bug")


def test_an_unexpected_error_is_answered_each_time_and_logged_once_in_a_while(caplog: pytest.LogCaptureFixture) -> None:
    failing = Failing()
    context = idl.RequestContext(source="peer")

    async def calls() -> list[str]:
        messages = []
        for _ in range(50):
            with pytest.raises(idl.PinLaterException) as info:
                await failing.get_queue_names(context)
            messages.append(info.value.message)
        return messages

    with caplog.at_level("ERROR", logger="pinlater.server.handler"):
        messages = asyncio.run(calls())
    assert set(messages) == {"internal error in get_queue_names: RuntimeError: a bug"}
    lines = [r for r in caplog.records if "unexpected error in get_queue_names" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is not None, "one traceback, not fifty"
