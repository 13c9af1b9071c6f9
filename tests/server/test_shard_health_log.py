"""A shard whose store refuses writes while it answers pings flips between unhealthy (each failed
write) and healthy (the next ping). Each flip was logged: 892 lines in 25 s of enqueues to a full
disk, two a request. A shard now logs a change of health at most once per
``HEALTH_LOG_SECONDS``, and the health loop logs the state it ended in, with the count of the
changes not logged."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

from pinlater.backends.embedded import EmbeddedStore
from pinlater.backends.shardmap import HEALTH_LOG_SECONDS, Shard
from pinlater.client import PinLaterClient, ServerUnavailable

HEALTH_LINE = re.compile(r"shard 1 (marked unhealthy|is healthy again)")
FILE_SIZE_LIMIT = 4 << 20  # bytes any file of the server may reach: its WAL stops growing there
FAILED_WRITES = 30


class SizeLimitedServer(ServerProcess):
    """A server whose files cannot pass ``FILE_SIZE_LIMIT`` (RLIMIT_FSIZE: the store's writes
    past it fail, as on a full disk, while its reads go on; Python ignores SIGXFSZ)."""

    def command(self) -> list[str]:
        return ["prlimit", f"--fsize={FILE_SIZE_LIMIT}", *super().command()]


def test_a_shard_that_refuses_writes_but_answers_pings_logs_its_flapping_health_in_few_lines(
    tmp_path: Path,
) -> None:
    server = SizeLimitedServer(tmp_path / "data").start()
    try:
        client = PinLaterClient(f"127.0.0.1:{server.port}")
        client.create_queue("q")
        body = b"x" * 20_000
        failed, started = 0, time.monotonic()
        while failed < FAILED_WRITES:
            assert time.monotonic() - started < 120, f"only {failed} writes failed"
            try:
                client.enqueue("q", [body] * 20)
            except ServerUnavailable as exc:
                assert "shard 1" in str(exc)
                failed += 1
        took = time.monotonic() - started
        client.close()
        lines = [line for line in server.lines if HEALTH_LINE.search(line)]
        # each failed write marked the shard and a ping brought it back: 2 changes a failure,
        # of which one a HEALTH_LOG_SECONDS is logged
        assert 1 <= len(lines) <= 2 + took // HEALTH_LOG_SECONDS, "\n".join(lines)
        assert "marked unhealthy: commit failed" in lines[0]
        summary = wait_for(
            lambda: [line for line in server.lines if "changes of health in" in line],
            HEALTH_LOG_SECONDS + 10,
            what="the health loop to log the changes not logged",
        )
        assert "WARNING" in summary[-1] and "marked unhealthy" in summary[-1], summary[-1]
        lines = [line for line in server.lines if HEALTH_LINE.search(line)]
        counts = [int(m.group(1)) for line in lines if (m := re.search(r"\((\d+) changes of health in", line))]
        # every change is a line or counted in one: a failed write's mark and the ping's revival
        assert len(lines) + sum(counts) >= 2 * FAILED_WRITES - 1, lines
    finally:
        server.stop()


def test_changes_of_health_are_logged_once_per_period_and_the_state_they_end_in_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    store = EmbeddedStore(tmp_path / "data", "1")
    try:
        shard = Shard("1", store, clock=lambda: now[0])
        caplog.set_level(logging.INFO, logger="pinlater.backends.shardmap")

        def logged() -> list[str]:
            messages = [r.getMessage() for r in caplog.records]
            caplog.clear()
            return messages

        shard.mark_unhealthy("disk full")
        assert logged() == ["shard 1 marked unhealthy: disk full"]
        for _ in range(5):
            now[0] += 1
            shard.mark_healthy()
            shard.mark_unhealthy("disk full again")
        shard.mark_unhealthy("still")  # no change of health
        shard.log_unlogged()  # too soon
        assert logged() == []
        assert shard.failures == 7 and not shard.healthy

        now[0] = 1000.0 + HEALTH_LOG_SECONDS
        shard.log_unlogged()
        quiet = f"10 changes of health in {HEALTH_LOG_SECONDS:.0f} s were not logged"
        marks = "marked unhealthy 5 times, the last: still"
        assert logged() == [f"shard 1 marked unhealthy: still ({quiet}; {marks})"]
        shard.log_unlogged()  # nothing new
        assert logged() == []

        now[0] += HEALTH_LOG_SECONDS
        shard.mark_healthy()  # a change after a quiet period is logged at once
        assert logged() == ["shard 1 is healthy again"]
        now[0] += HEALTH_LOG_SECONDS
        shard.log_unlogged()
        assert logged() == []

        # Flapping past the period: the change that comes first after it (a request's, before
        # the health loop's next tick) is logged with the count, as a warning while the shard
        # was marked unhealthy in the period, whatever its state now.
        shard.mark_unhealthy("full")  # after a quiet period: at once
        assert logged() == ["shard 1 marked unhealthy: full"]
        for _ in range(3):
            now[0] += 1
            shard.mark_healthy()
            shard.mark_unhealthy("full")
        now[0] += HEALTH_LOG_SECONDS
        shard.mark_healthy()
        [line] = caplog.records
        assert line.levelno == logging.WARNING
        marks = "marked unhealthy 3 times, the last: full"
        assert line.getMessage() == f"shard 1 is healthy again (6 changes of health in 13 s were not logged; {marks})"
        caplog.clear()
        shard.mark_unhealthy("stop")
        shard.log_unlogged(now=True)  # at a stop, whatever the time
        marks = "marked unhealthy 1 times, the last: stop"
        assert logged() == [f"shard 1 marked unhealthy: stop (1 changes of health in 0 s were not logged; {marks})"]
    finally:
        store.close()
