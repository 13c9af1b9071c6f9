"""The admin port's JSON API (``/api/...``), mixed into ``AdminApp`` (``pinlater.server.admin``).

* GET ``queues`` (``?queue=``; each queue with its counts, the age of its oldest ready PENDING
  job in ms and its expired jobs), ``rates``, ``scan`` (``queue state priority limit regex future
  continuation``: a page, and the ``continuation`` that resumes after it, null at the end),
  ``lookup`` (``descriptor``);
* POST ``retry``, ``delete``, ``rate`` with a JSON body carrying ``password``: checked against
  ADMIN_PASSWORD_HASH before anything is done (403 otherwise). Rate changes rewrite the watched
  QUEUE_CONFIG_FILE_PATH atomically and apply at once; without that file they are refused (409).

Errors are raised as ``ApiError`` and answered as JSON by ``AdminApp``'s middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import hdrs, web

from pinlater import admin_files as config_files
from pinlater._pinlater import DescriptorError
from pinlater.backends import body_filter, scan_pages
from pinlater.backends.base import DEFAULT_RULES, GroupCounts, JobRecord, JobState
from pinlater.backends.scan_pages import ScanQuery
from pinlater.errors import ConfigError
from pinlater.eventloop import off_loop
from pinlater.logthrottle import ThrottledLog
from pinlater.queue_rules import parse_queue_file
from pinlater.server.guesses import Guesses
from pinlater.server.handler import QUEUE_NAME, password_matches
from pinlater.server.metrics import memory_snapshot
from pinlater.server.queue_counts import COUNT_COLUMNS, Columns, QueueCounts, QueueSnapshot, count_columns
from pinlater.server.shared_answer import SharedAnswer
from pinlater.server.transport import address_host

if TYPE_CHECKING:
    from pinlater.backends.sharded import ShardedBackend
    from pinlater.server.admin_conns import AdminConnections
    from pinlater.server.app import PinLaterServer
    from pinlater.server.metrics import RateHistory

# The admin app's logger, so audit lines keep the logger name they always had.
log = logging.getLogger("pinlater.server.admin")

MAX_SCAN = 1000
MAX_BULK = 1_000_000
BODY_TEXT_LIMIT = 64 * 1024
BODY_HEX_LIMIT = 4 * 1024
#: Most bytes an admin request's body may hold (aiohttp's ``client_max_size`` of the app).
POST_BYTES = 64 * 1024
#: Requests whose bodies may be longer (a schedule's job body, up to 1 MiB, in base64) read them
#: this many at a time in the process: each may buffer ``_authorized``'s ``max_bytes``, so a
#: flood of them holds this many such bodies, not one per admin connection.
LARGE_POSTS = 2
#: Lookups of a job with its body run this many at a time in the process: each reads the whole
#: body (up to MAX_FRAME_BYTES) to show its first 64 KiB, so the admin port's 256 connections
#: asking for a 16 MiB job at once held 256 bodies, not this many.
BODY_LOOKUPS = 4
#: One queue's view (``/api/queues?queue=``) is counted this many at a time in the process: each
#: is 15 counts and its groups', on the store threads every Thrift call needs; 200 connections
#: asking for one of 300,000 jobs held an enqueue 1.7 s.
ONE_QUEUE_COUNTS = 4
#: Scan pages (``/api/scan``) made at a time in the process, each up to 5 MB of JSON.
SCAN_PAGES = 4
STATES = {s.name.lower(): s for s in JobState}


def _guesser(request: web.Request) -> str:
    """Whose wrong passwords a request's count among (``Guesses``): its host (an IPv6 address by
    its /64, ``transport.address_host``)."""
    return address_host(request.remote or "")


class ApiError(Exception):
    """Answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class AdminApi:
    """The ``/api`` handlers; ``AdminApp`` provides ``server`` and ``history``."""

    server: PinLaterServer
    history: RateHistory
    _queue_counts: QueueCounts | None = None
    #: The queue list's rows and the rate charts, shared by their requests (``shared_answer.py``).
    _queue_list: SharedAnswer[tuple[bytes, int, float]]
    _rates: SharedAnswer[bytes]
    #: Turns of the few requests of a kind run at once (``_turns``), by kind.
    _slots: dict[str, asyncio.Semaphore]
    #: The port's connections (``admin_conns.py``; ``AdminApp`` makes them).
    connections: AdminConnections
    #: Wrong admin passwords by address (``_refuse_guesser``; ``guesses.py``).
    _guesses: Guesses
    #: Held from an edit of the queue config's write to its taking (``api_rate``, ``api_rules``):
    #: two edits parsed at once were taken in either order, the older one left in force.
    _config_edits: asyncio.Lock
    #: The wrong-password line, one per 5 s at most with a count of the others (a peer guessing
    #: wrote one a guess), as the Thrift port's deleteQueue has it.
    _wrong_password = ThrottledLog(log)

    @property
    def backend(self) -> ShardedBackend:
        if self.server.backend is None:
            raise ApiError(503, "the server is not started")
        return self.server.backend

    # -- reads -----------------------------------------------------------------------------------

    async def api_queues(self, request: web.Request) -> web.Response:
        backend = self.backend
        wanted = request.query.get("queue")
        if wanted is not None:  # one queue: its own counts, which cost what it holds
            if wanted not in await backend.get_queue_names():
                raise ApiError(404, f"no queue {wanted!r}")
            names = [wanted]
            async with self._turns("one queue's counts", ONE_QUEUE_COUNTS):
                counts = {wanted: await one_queue_columns(backend, wanted)}
                groups = {wanted: await backend.group_counts(wanted)}
            counted_at_ms, took_ms = int(time.time() * 1000), None
            # the oldest ready job and expired count of the list's pass (shared and spaced as
            # its counts are), not a read of every queue's at each request of one
            depth = await self.queue_counts.read()
            queues = json.dumps(self._queue_rows(names, counts, groups, depth), allow_nan=False).encode()
        else:  # every queue: one count pass per shard, or the last one when passes are slow
            snapshot = await self.queue_counts.read()
            monitor = self.server.monitor
            every_group = {} if monitor is None else monitor.group_counts
            limits = self.server.rate_limits
            rates = None if limits is None else (limits.configured, limits.server_count)

            def make() -> tuple[bytes, int, float]:  # (shared until a new pass, reload or sample)
                names = sorted(snapshot.names)
                counts = count_columns(snapshot.counts, names, backend.num_priorities)
                rows = self._queue_rows(names, counts, every_group, snapshot)
                # (the rows with their pass's time: a costly list is kept past the next pass)
                return (
                    json.dumps(rows, allow_nan=False).encode(),
                    snapshot.taken_at_ms,
                    round(snapshot.took_s * 1000, 1),
                )

            shared = (snapshot, every_group, backend.queue_rules, rates)
            queues, counted_at_ms, took_ms = self._queue_list.get(shared, make)
        s = self.server.settings
        limits = self.server.rate_limits
        rest = json.dumps(
            {
                "priorities": backend.num_priorities,
                "shards": [
                    {"name": sh.name, "healthy": sh.healthy, "dequeue_only": sh.dequeue_only} for sh in backend.shards
                ],
                "gauges": self.server.metrics.snapshot()["gauges"],
                "memory": memory_snapshot(backend.shards, backend.memory_high_water),
                "rate_config_path": None if s.queue_config_file_path is None else str(s.queue_config_file_path),
                "server_count": 1 if limits is None else limits.server_count,
                "password_set": bool(s.admin_password_hash),
                "now_ms": int(time.time() * 1000),
                "counts_at_ms": counted_at_ms,
                "counts_took_ms": took_ms,
            },
            allow_nan=False,
        )
        return _json_body(b"".join((b'{"queues": ', queues, b", ", rest[1:].encode())))

    def _queue_rows(
        self, names: list[str], counts: dict[str, Columns], groups: dict[str, GroupCounts], depth: QueueSnapshot
    ) -> list[dict[str, Any]]:
        """The queue list's rows of ``names``."""
        limits = self.server.rate_limits
        configured = {} if limits is None else limits.configured  # (a copy: once, not per queue)
        return [
            {
                "name": queue,
                "counts": counts[queue],
                "rate": self._rate(queue, configured),
                "rules": self._rules(queue),
                "groups": _groups(groups.get(queue)),
                "oldest_ready_age_ms": depth.oldest_ready_age_ms(queue),
                "expired": depth.expired.get(queue, 0),
            }
            for queue in names
        ]

    @property
    def queue_counts(self) -> QueueCounts:
        """The job counts of every queue, shared by the queue list and ``/metrics``."""
        backend = self.backend
        started = getattr(self.server, "queue_counts", None)  # created, its first pass begun, at start
        if isinstance(started, QueueCounts) and started.backend is backend:
            return started
        if self._queue_counts is None or self._queue_counts.backend is not backend:
            self._queue_counts = QueueCounts(backend)
        return self._queue_counts

    async def queue_snapshot_for_metrics(self) -> QueueSnapshot | None:
        """The queue counts for a ``/metrics`` scrape (``queue_jobs_family``, queue depth), or
        None when the stores do not answer within BACKEND_SOCKET_TIMEOUT_SECONDS: the scrape then
        goes on without them (logged), so a store outage never hides the other metrics."""
        if self.server.backend is None:
            return None
        try:
            timeout = self.server.settings.backend_socket_timeout_seconds
            return await asyncio.wait_for(self.queue_counts.read(), timeout)
        except Exception as exc:
            log.warning("/metrics without queue job counts: %s: %s", type(exc).__name__, exc)
            return None

    def _rate(self, queue: str, configured_rates: Mapping[str, float]) -> dict[str, Any]:
        limits = self.server.rate_limits
        configured = configured_rates.get(queue)
        effective = None if limits is None else limits.effective_rate(queue)
        return {"configured": configured, "effective": effective, "paused": configured == 0}

    def _rules(self, queue: str) -> dict[str, Any]:
        """The queue config's rules in force for ``queue`` (``queue_rules.py``; defaults when
        it sets none): ``max_in_progress`` is the whole queue's cap (None: none)."""
        rules = self.backend.queue_rules.get(queue, DEFAULT_RULES)
        return {
            "group_concurrency": rules.group_concurrency,
            "max_in_progress": rules.max_in_progress,
            "group_jobs_per_second": rules.group_jobs_per_second,
        }

    async def api_rates(self, request: web.Request) -> web.Response:
        history = self.history
        # (shared until the next sample, or an interval's time without one; its last point runs
        # to when it was made)
        shared = (history.last_sample, int(time.monotonic() // history.interval))
        rates = self._rates.get(shared, lambda: json.dumps(history.rates(), allow_nan=False).encode())
        return _json_body(rates)

    async def api_scan(self, request: web.Request) -> web.Response:
        q = request.query
        queue = await self._existing_queue(q.get("queue"))
        state = _state(q.get("state", "failed"))
        priority = self._priority(q.get("priority"))
        limit = _int(q.get("limit", "100"), "limit", 1, MAX_SCAN)
        regex = await _regex(q.get("regex"))
        future = q.get("future", "") in ("1", "true", "yes")
        continuation = q.get("continuation") or scan_pages.START
        query = ScanQuery(queue, state, priority, future, regex)
        # A page of 1,000 jobs with long statuses is 5 MB of JSON, 11 ms of work: made a few at
        # a time (``SCAN_PAGES``), on a worker thread (whose JSON encoding still keeps the GIL)
        async with self._turn("scan pages", SCAN_PAGES, "scan pages are being made: try again"):
            found, resume = await self.backend.scan_page(query, limit, continuation)  # CONTINUATION_INVALID: 400
            more = None if resume == scan_pages.END else resume
            body = await off_loop(_scan_page_json, queue, state.name.lower(), found, more)
        return _json_body(body)

    async def api_lookup(self, request: web.Request) -> web.Response:
        descriptor = request.query.get("descriptor", "").strip()
        if not descriptor:
            raise ApiError(400, "give a job descriptor, like queue:s1:p1:42")
        async with self._turns("lookups with bodies", BODY_LOOKUPS):
            try:
                found = await self.backend.lookup_jobs([descriptor], True)
            except DescriptorError as exc:
                raise ApiError(400, f"invalid job descriptor: {exc}") from None
            if not found:
                raise ApiError(404, f"no job {descriptor}")
            # (under the store's spelling, which the page links to: q:s1:p1:042 finds job 42)
            [(canonical, record)] = found.items()
            job = _job(canonical, record, with_body=True)
            del found, record  # (the body goes with its turn: only its first 64 KiB are shown)
        return _json({"job": job})

    # -- changes ---------------------------------------------------------------------------------

    async def _authorized(self, request: web.Request, action: str, max_bytes: int = POST_BYTES) -> dict[str, Any]:
        """The JSON body of an admin action, once its password is right (else 403). A body may
        hold ``max_bytes``; past ``POST_BYTES`` it is read as one of ``LARGE_POSTS``. Until it is
        read whole, its connection is the first to make room at the port's cap after idle ones
        (``AdminConnections.reading``)."""
        self.connections.reading(request.protocol, True)
        try:
            return await self._read_authorized(request, action, max_bytes)
        finally:
            self.connections.reading(request.protocol, False)

    async def _read_authorized(self, request: web.Request, action: str, max_bytes: int) -> dict[str, Any]:
        if request.content_type != "application/json":
            raise ApiError(415, "send the action as application/json")
        self._refuse_guesser(request)
        encoding = request.headers.get(hdrs.CONTENT_ENCODING, "identity").strip().lower()
        if encoding != "identity":  # (the runner does not inflate bodies: start_admin)
            raise ApiError(415, f"send the body uncompressed: Content-Encoding {encoding[:40]!r} is not taken")
        length = request.content_length
        if max_bytes > POST_BYTES and (length is None or length > POST_BYTES):
            if length is not None and length > max_bytes:
                raise ApiError(413, f"the body is {length} bytes; {action} takes at most {max_bytes}")
            # (a turn waited for past the body timeout is refused: trickling peers holding both
            # turns, one after another, held a real upload 118 s, near the request's cap)
            async with self._turn("long bodies", LARGE_POSTS, "long bodies are being read: try again"):
                return await self._checked(request.clone(client_max_size=max_bytes), action, max_bytes)
        return await self._checked(request, action, POST_BYTES)

    def _refuse_guesser(self, request: web.Request) -> None:
        """429 for an address that spent its wrong passwords (``Guesses``): checked before its
        body is read, and again right before its password is (its requests in flight meanwhile
        were let through the first check)."""
        if wait := self._guesses.wait(_guesser(request), time.monotonic()):
            raise ApiError(
                429, f"too many wrong admin passwords from {request.remote}: try again in {math.ceil(wait)} s"
            )

    def _turns(self, kind: str, size: int) -> asyncio.Semaphore:
        """The ``size`` turns of ``kind``'s requests (made on the event loop that serves the port)."""
        slots = self._slots.get(kind)
        if slots is None:
            slots = self._slots[kind] = asyncio.Semaphore(size)
        return slots

    @contextlib.asynccontextmanager
    async def _turn(self, kind: str, size: int, busy: str) -> AsyncIterator[None]:
        """One of ``kind``'s ``size`` turns, waited for at most ADMIN_BODY_TIMEOUT_SECONDS; past
        that, 503: ``{size} {busy}``."""
        slots = self._turns(kind, size)
        try:
            await asyncio.wait_for(slots.acquire(), self.server.settings.admin_body_timeout_seconds)
        except TimeoutError:
            raise ApiError(503, f"{size} {busy}") from None
        try:
            yield
        finally:
            slots.release()

    async def _checked(self, request: web.Request, action: str, max_bytes: int) -> dict[str, Any]:
        # The body comes whole within ADMIN_BODY_TIMEOUT_SECONDS (a long one's from its turn):
        # no password is checked before it is, so a peer trickling bodies holds its connections
        # (and the long bodies' turns) this long, not the port's ADMIN_REQUEST_SECONDS.
        timeout = self.server.settings.admin_body_timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                body = await request.json()
        except TimeoutError:
            raise ApiError(408, f"the body did not come within {timeout:g} s (ADMIN_BODY_TIMEOUT_SECONDS)") from None
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(413, f"the body is past {max_bytes} bytes, the most {action} takes") from None
        except (ValueError, RecursionError, LookupError):  # (nested past Python's stack; an unknown charset)
            raise ApiError(
                400, "the body is not JSON (in a charset Python knows, nested less than 1,000 deep)"
            ) from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        # The password first: a peer without it costs no walk of its body (a 1.4 MB body of
        # numbers took about 0.1 s of the event loop before the password was looked at).
        expected = self.server.settings.admin_password_hash
        if not expected:
            self._wrong_password(
                "admin %s refused: no ADMIN_PASSWORD_HASH is set", action, extra={"remote": request.remote}
            )
            raise ApiError(403, "admin actions are disabled: the server has no ADMIN_PASSWORD_HASH")
        self._refuse_guesser(request)  # (no await from here to the count of a wrong one)
        if not password_matches(body.get("password"), expected):
            self._guesses.wrong(_guesser(request), time.monotonic())
            self._wrong_password("admin %s refused: wrong admin password", action, extra={"remote": request.remote})
            raise ApiError(403, "wrong admin password: nothing was done")
        try:  # JSON can spell a lone surrogate ("\ud800"), which no text field may hold
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "the body holds a lone surrogate (\\ud800 to \\udfff), which is not text") from None
        if _has_huge_integer(body):  # (a float of it overflows: the checks after would fail on it)
            raise ApiError(400, "the body holds a whole number past 64 bits")
        return body

    async def api_retry(self, request: web.Request) -> web.Response:
        body = await self._authorized(request, "retry")
        queue = await self._existing_queue(body.get("queue"))
        priorities = self._priorities(body.get("priority"))
        attempts = _int(body.get("attempts", 1), "attempts", 1, 1_000_000)
        limit = _int(body.get("limit", 1000), "limit", 1, MAX_BULK)
        done = 0
        for p in priorities:
            if done < limit:
                done += await self.backend.retry_failed_jobs(queue, p, attempts, None, limit - done)
        which = body.get("priority") or "all"
        _audit(
            request, logging.INFO, "retry", queue, f"retried {done} failed jobs (priority {which}, {attempts} attempts)"
        )
        return _json({"queue": queue, "retried": done})

    async def api_delete(self, request: web.Request) -> web.Response:
        body = await self._authorized(request, "delete")
        queue = await self._existing_queue(body.get("queue"))
        state = _state(body.get("state"))
        priorities = self._priorities(body.get("priority"))
        regex = await _regex(body.get("regex"))
        limit = _int(body.get("limit", 1000), "limit", 1, MAX_BULK)
        done = 0
        broker = self.server.broker
        for p in priorities:
            if done < limit:
                delete = functools.partial(self.backend.delete_jobs, queue, state, p, regex, limit - done)
                pending = state is JobState.PENDING
                done += await broker.around_delete(queue, delete) if broker and pending else await delete()
        which = body.get("priority") or "all"
        _audit(
            request,
            logging.WARNING,
            "delete",
            queue,
            f"deleted {done} {state.name} jobs (priority {which}, regex {regex!r})",
        )
        return _json({"queue": queue, "deleted": done})

    async def api_rate(self, request: web.Request) -> web.Response:
        path = self.server.settings.queue_config_file_path
        if path is None:
            raise ApiError(409, "rate limits cannot be changed here: the server has no QUEUE_CONFIG_FILE_PATH")
        body = await self._authorized(request, "rate")
        queue = await self._existing_queue(body.get("queue"))
        action = body.get("action", "set")
        async with self._config_edits:  # (each edit applied in the order of its write)
            return await self._rate_edit(request, path, queue, action, body)

    async def _rate_edit(
        self, request: web.Request, path: Any, queue: str, action: Any, body: dict[str, Any]
    ) -> web.Response:
        loop = asyncio.get_running_loop()
        if action == "set":
            rate = body.get("rate")
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < float("inf"):
                raise ApiError(400, "rate must be a number of jobs per second >= 0")
            text = await loop.run_in_executor(None, config_files.set_queue_rate, path, queue, float(rate))
        elif action == "unlimit":
            text = await loop.run_in_executor(None, config_files.set_queue_rate, path, queue, None)
        elif action == "pause":
            text = await loop.run_in_executor(None, config_files.pause_queue, path, queue)
        elif action == "resume":
            text = await loop.run_in_executor(None, config_files.resume_queue, path, queue)
        else:
            raise ApiError(400, f"action must be set, unlimit, pause or resume, not {action!r}")
        if self.server.rate_limits is not None:  # now, not at the watcher's next look
            self.server.apply_queue_config(await loop.run_in_executor(None, parse_queue_file, text))
        limits = self.server.rate_limits
        rate_info = self._rate(queue, {} if limits is None else limits.configured)
        now = "unlimited" if rate_info["configured"] is None else f"{rate_info['configured']:g} jobs/s"
        _audit(request, logging.WARNING, action, queue, f"rate limit now {now}")
        return _json({"queue": queue, "rate": rate_info, "config_path": str(path)})

    async def api_rules(self, request: web.Request) -> web.Response:
        """Set some of a queue's rules in the queue config file (``admin_files.set_queue_rules``):
        ``{"queue", "password", "group_concurrency"?, "max_in_progress"?, "group_jobs_per_second"?}``,
        each given one set (null removes it), and applied now."""
        path = self.server.settings.queue_config_file_path
        if path is None:
            raise ApiError(409, "rules cannot be changed here: the server has no QUEUE_CONFIG_FILE_PATH")
        body = await self._authorized(request, "rules")
        queue = await self._existing_queue(body.get("queue"))
        names = {"group_concurrency": "groupConcurrency", "max_in_progress": "maxInProgress"}
        names["group_jobs_per_second"] = "groupJobsPerSecond"
        unknown = sorted(set(body) - set(names) - {"queue", "password"})
        if unknown:  # a misspelt rule would otherwise be dropped while the others are set
            raise ApiError(400, f"not a rule: {', '.join(unknown)} (rules: {', '.join(names)}); nothing was changed")
        rules = {key: body[field] for field, key in names.items() if field in body}
        if not rules:
            raise ApiError(400, f"give at least one of {', '.join(names)}")
        loop = asyncio.get_running_loop()
        async with self._config_edits:  # (each edit applied in the order of its write)
            try:
                text = await loop.run_in_executor(None, config_files.set_queue_rules, path, queue, rules)
            except ConfigError as exc:
                raise ApiError(400, str(exc)) from None
            # now, not at the watcher's next look
            self.server.apply_queue_config(await loop.run_in_executor(None, parse_queue_file, text))
        now = self._rules(queue)
        _audit(request, logging.WARNING, "rules", queue, f"rules now {now}")
        return _json({"queue": queue, "rules": now, "config_path": str(path)})

    # -- validation ------------------------------------------------------------------------------

    async def _existing_queue(self, name: Any) -> str:
        if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
            raise ApiError(400, f"queue name {name!r} must be letters, digits and underscores")
        if name not in await self.backend.get_queue_names():
            raise ApiError(404, f"no queue {name!r}")
        return name

    def _priority(self, value: Any) -> int | None:
        if value in (None, "", "all"):
            return None
        return _int(value, "priority", 1, self.backend.num_priorities)

    def _priorities(self, value: Any) -> range:
        p = self._priority(value)
        return range(1, self.backend.num_priorities + 1) if p is None else range(p, p + 1)


async def one_queue_columns(backend: ShardedBackend, queue: str) -> Columns:
    """One queue's count columns, from its own counts (``count_jobs``): ``{column: [per priority]}``."""
    priorities = range(1, backend.num_priorities + 1)
    calls = [
        backend.count_jobs(queue, state, p, future, None) for _, state, future in COUNT_COLUMNS for p in priorities
    ]
    flat = iter(await asyncio.gather(*calls))
    return {column: [next(flat) for _ in priorities] for column, _, _ in COUNT_COLUMNS}


def _audit(request: web.Request, level: int, action: str, queue: str, what: str) -> None:
    """One log line per admin action done, with who asked (JSON logs get the fields as keys)."""
    extra = {"remote": request.remote, "action": action, "queue": queue}
    log.log(level, "admin %s on %s from %s: %s", action, queue, request.remote, what, extra=extra)


def _has_huge_integer(value: Any) -> bool:
    """Whether a decoded JSON value holds an integer outside -2**63..2**64 - 1 anywhere."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int) and not -(2**63) <= item < 2**64:
            return True
    return False


def _int(value: Any, what: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # (OverflowError: JSON's 1e999, an infinite float)
        raise ApiError(400, f"{what} must be a whole number, not {value!r}") from None
    if isinstance(value, bool) or isinstance(value, float) or not low <= number <= high:
        raise ApiError(400, f"{what} must be a whole number in {low}..{high}, not {value!r}")
    return number


def _state(value: Any) -> JobState:
    if isinstance(value, str) and value.lower() in STATES:
        return STATES[value.lower()]
    raise ApiError(400, f"state must be one of {', '.join(STATES)}, not {value!r}")


async def _regex(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ApiError(400, "regex must be a string")
    try:
        await body_filter.checked(value)  # the engine the stores match with (see handler._regex)
    except body_filter.BodyPatternError as exc:
        raise ApiError(400, str(exc)) from None
    return value


def _job(descriptor: str, record: JobRecord, with_body: bool = False) -> dict[str, Any]:
    job: dict[str, Any] = {
        "descriptor": descriptor,
        "state": record.state.name.lower(),
        "priority": record.priority,
        "attempts_allowed": record.attempts_allowed,
        "attempts_remaining": record.attempts_remaining,
        "custom_status": record.custom_status,
        "created_at_ms": record.created_at_ms,
        "updated_at_ms": record.updated_at_ms,
        "run_after_ms": record.run_after_ms,
        "claim_descriptor": record.claim_descriptor,
        "dedup_key": record.dedup_key,
        "group_key": record.group_key,
        "expire_at_ms": record.expire_at_ms,
    }
    if with_body and record.body is not None:
        body = record.body
        job["body_size"] = len(body)
        job["body_text"] = body[:BODY_TEXT_LIMIT].decode("utf-8", "replace")
        job["body_hex"] = body[:BODY_HEX_LIMIT].hex(" ")
        job["body_text_truncated"] = len(body) > BODY_TEXT_LIMIT
        job["body_hex_truncated"] = len(body) > BODY_HEX_LIMIT
    return job


def _groups(counts: GroupCounts | None) -> dict[str, int]:
    """A queue's ordered groups: those with an unfinished job, and the blocked ones (a job
    waiting behind the group's running ones). The queue list gives the monitor's last count
    (none: no group then); one queue's view counts them now."""
    return {"all": 0, "blocked": 0} if counts is None else {"all": counts.groups, "blocked": counts.blocked}


def _scan_page_json(queue: str, state: str, found: list[tuple[str, JobRecord]], more: str | None) -> bytes:
    """A scan page's answer (``api_scan``): its jobs newest change first (a page holds the
    scan's next jobs, newest run-after first)."""
    jobs = [_job(d, r) for d, r in found]
    jobs.sort(key=lambda j: (j["updated_at_ms"], j["descriptor"]), reverse=True)
    return json.dumps({"queue": queue, "state": state, "jobs": jobs, "continuation": more}, allow_nan=False).encode()


def _json(data: Any) -> web.Response:
    return _json_body(json.dumps(data, allow_nan=False).encode())


def _json_body(body: bytes) -> web.Response:
    return web.Response(
        body=body, content_type="application/json", charset="utf-8", headers={"Cache-Control": "no-store"}
    )
