"""The event loop a server process runs on (``EVENT_LOOP``).

uvloop is asyncio's event loop written in Cython over libuv: the same API, with the loop, its
callbacks and the socket transports in C. Every request's frames, store replies and wake-ups go
through them, so on this project's load it cuts the server's CPU per job by about a tenth
(``benches/cost_per_job.py``). It is a dependency where it builds (not on Windows), and
``auto`` uses it when it is installed; ``asyncio`` keeps the standard loop (to rule the loop out
when chasing a problem, say).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(event_loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the loop ``EVENT_LOOP`` names (validated: ``auto``, ``uvloop`` or ``asyncio``)."""
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":  # the settings' check makes this unreachable in the server
                raise
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: what runs ``loop``, for the start-up line."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], event_loop: str) -> T:
    """``asyncio.run`` on the loop ``EVENT_LOOP`` names."""
    with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
        return runner.run(main)


async def off_loop(fn: Callable[..., T], *args: Any, executor: Executor | None = None) -> T:
    """``fn(*args)`` on ``executor`` (the running loop's default one if None): for the extension's
    work on many jobs, which releases the GIL (``DETACH_JOBS``), so the loop serves other
    connections meanwhile. Called here if no worker takes it (the executor shut down as the
    server stops)."""
    loop = asyncio.get_running_loop()
    try:
        running = loop.run_in_executor(executor, fn, *args)
    except RuntimeError:
        return fn(*args)
    return await running
