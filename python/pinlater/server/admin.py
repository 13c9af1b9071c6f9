"""The admin HTTP port: stats, Prometheus metrics, health, the dashboard and its JSON API.

Routes: ``/stats.txt`` (the original's Ostrich-style text), ``/stats.json``, ``/metrics``
(Prometheus), ``/healthz`` (the process answers), ``/readyz`` (every shard answers a ping),
``/`` and ``/static/*`` (the dashboard, shipped as package data), and ``/api/...``:

* GET ``queues`` (``?queue=``), ``rates``, ``scan`` (``queue state priority limit regex future``),
  ``lookup`` (``descriptor``);
* POST ``retry``, ``delete``, ``rate`` with a JSON body carrying ``password``: checked against
  ADMIN_PASSWORD_HASH before anything is done (403 otherwise). Rate changes rewrite the watched
  QUEUE_CONFIG_FILE_PATH atomically and apply at once; without that file they are refused (409).
* job control (``admin_jobcontrol.py``): POST ``cancel``; GET/POST ``schedules`` and POST
  ``schedules/{pause,resume,delete}``; GET/POST ``redrives``, GET ``redrives/{id}``, POST
  ``redrives/{id}/stop`` (paced redrives run in this process: ``pinlater.redrive``).

Every response carries a strict Content-Security-Policy (no inline script, nothing from other
origins), and the dashboard builds its DOM from text, so job bodies and custom statuses
cannot inject script. POSTs must be ``application/json``, which a cross-site form cannot send.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import GaugeMetricFamily, Metric

from pinlater._pinlater import BodyPatternError, __version__
from pinlater.backends.body_filter import BodyFilterBusy
from pinlater.errors import ErrorCode, PinLaterError
from pinlater.logthrottle import ThrottleFilter
from pinlater.redrive import Redrives
from pinlater.server.admin_api import BODY_HEX_LIMIT as BODY_HEX_LIMIT
from pinlater.server.admin_api import BODY_TEXT_LIMIT as BODY_TEXT_LIMIT
from pinlater.server.admin_api import MAX_BULK as MAX_BULK
from pinlater.server.admin_api import MAX_SCAN as MAX_SCAN
from pinlater.server.admin_api import POST_BYTES, ApiError
from pinlater.server.admin_api import STATES as STATES
from pinlater.server.admin_conns import MAX_ADMIN_CONNECTIONS, AdminConnections, GuardedSite
from pinlater.server.admin_jobcontrol import JobControlApi
from pinlater.server.guesses import Guesses
from pinlater.server.metrics import (
    Metrics,
    RateHistory,
    memory_families,
    prometheus_registry,
    queue_depth_families,
    render_families,
)
from pinlater.server.queue_counts import COUNT_COLUMNS as COUNT_COLUMNS
from pinlater.server.shared_answer import SharedAnswer

if TYPE_CHECKING:
    from pinlater.server.app import PinLaterServer

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 2.0
#: Seconds the rest of a body is read and dropped after an answer given before it was whole.
ADMIN_LINGER_SECONDS = 2.0
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
STATIC = {
    "dashboard.js": "text/javascript",
    "jobcontrol.js": "text/javascript",
    "dashboard.css": "text/css",
}
_STATUS_FOR_CODE = {
    ErrorCode.QUEUE_NOT_FOUND: 404,
    ErrorCode.NO_HEALTHY_SHARDS: 503,
    ErrorCode.SHARD_CONNECTION_FAILED: 502,
    ErrorCode.UNKNOWN: 500,
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _dashboard_file(name: str) -> bytes:
    return (resources.files("pinlater.server") / "dashboard" / name).read_bytes()


class AdminApp(JobControlApi):
    """The aiohttp application over a running ``PinLaterServer`` (the ``/api`` handlers:
    ``AdminApi`` and ``JobControlApi``). It owns the server's redrives, stopped with it."""

    def __init__(self, server: PinLaterServer, sample_interval: float = 5.0) -> None:
        self.server = server
        self.history = RateHistory(server.metrics, interval=sample_interval)
        self.registry = prometheus_registry(server.metrics, self._extra_families)
        self._sampler: asyncio.Task[None] | None = None
        self.redrives = Redrives()
        self._guesses = Guesses()  # (the admin port's tally: deleteQueue keeps its own, guesses.py)
        self._config_edits = asyncio.Lock()
        self._slots = {}
        self._queue_list: SharedAnswer[tuple[bytes, int, float]] = SharedAnswer()
        self._rates: SharedAnswer[bytes] = SharedAnswer()
        self._scrape: SharedAnswer[bytes] = SharedAnswer(reuse_factor=5.0)  # (counters a few seconds old at most)
        #: Listening on loopback only: requests must name a loopback host (``_foreign_host``).
        self._loopback_only = _is_loopback(server.settings.admin_host)
        #: Else the host names a request may name besides IP addresses (``_unknown_host``); None: any.
        self._allowed_names: frozenset[str] | None = frozenset()  # (set by ``start_admin``)
        #: The admin port's connections (``admin_conns.py``), counted and timed by the middleware;
        #: on loopback every peer is this machine, one host: no share of the cap per host there.
        self.connections = AdminConnections(peer_cap=MAX_ADMIN_CONNECTIONS if self._loopback_only else None)
        self._register_gauges(server.metrics)

    def _register_gauges(self, metrics: Metrics) -> None:
        """The admin port's connections in ``/stats.txt`` and ``/metrics`` (the process that
        serves it): open now, then totals since start of those refused (for the port's cap or
        their host's share), closed idle or too slow, and closed to make room."""
        c = self.connections
        metrics.gauge("admin_connections_open", lambda: len(c.open))
        metrics.gauge("admin_connections_reading", lambda: c.reading_bodies)
        metrics.gauge("admin_connections_rejected", lambda: c.refused, total=True)
        metrics.gauge("admin_connections_rejected_per_peer", lambda: c.refused_per_host, total=True)
        metrics.gauge("admin_connections_closed_idle", lambda: c.timed_out, total=True)
        metrics.gauge("admin_connections_evicted", lambda: c.evicted, total=True)

    def build(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=POST_BYTES)
        app.on_response_prepare.append(_security_headers)
        app.on_startup.append(self._start_sampler)
        app.on_cleanup.append(self._stop_sampler)
        app.on_cleanup.append(self._stop_redrives)
        r = app.router
        r.add_get("/", self.index)
        r.add_get("/static/{name}", self.static)
        r.add_get("/stats.txt", self.stats_txt)
        r.add_get("/stats.json", self.stats_json)
        r.add_get("/metrics", self.prometheus)
        r.add_get("/healthz", self.healthz)
        r.add_get("/readyz", self.readyz)
        # The original's admin port (Ostrich's commands: ``/<command>``, JSON, or ``.txt``), for
        # the load balancers' checks and deploy scripts written against it.
        r.add_get("/stats", self.stats_json)
        r.add_get("/health", self.ostrich_health)
        for name in ("ping", "server_info", "shutdown", "quiesce"):
            for suffix in ("", ".json", ".txt"):
                r.add_get(f"/{name}{suffix}", self.ostrich_command)
        r.add_get("/quitquitquit", self.ostrich_command)
        r.add_get("/abortabortabort", self.ostrich_command)
        r.add_get("/api/queues", self.api_queues)
        r.add_get("/api/rates", self.api_rates)
        r.add_get("/api/scan", self.api_scan)
        r.add_get("/api/lookup", self.api_lookup)
        r.add_post("/api/retry", self.api_retry)
        r.add_post("/api/delete", self.api_delete)
        r.add_post("/api/rate", self.api_rate)
        r.add_post("/api/rules", self.api_rules)
        r.add_post("/api/cancel", self.api_cancel)
        r.add_get("/api/schedules", self.api_schedules)
        r.add_post("/api/schedules", self.api_schedule_set)
        r.add_post("/api/schedules/pause", self.api_schedule_pause)
        r.add_post("/api/schedules/resume", self.api_schedule_resume)
        r.add_post("/api/schedules/delete", self.api_schedule_delete)
        r.add_get("/api/redrives", self.api_redrives)
        r.add_post("/api/redrives", self.api_redrive_start)
        r.add_get("/api/redrives/{id}", self.api_redrive)
        r.add_post("/api/redrives/{id}/stop", self.api_redrive_stop)
        return app

    async def _start_sampler(self, app: web.Application) -> None:
        self._sampler = asyncio.create_task(self.history.run(), name="pinlater-rate-history")

    async def _stop_redrives(self, app: web.Application) -> None:
        await self.redrives.aclose()

    async def _stop_sampler(self, app: web.Application) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            try:
                await self._sampler
            except asyncio.CancelledError:
                pass

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._loopback_only:
            if (host := _foreign_host(request)) is not None:
                return web.json_response({"error": _FOREIGN_HOST % (host,)}, status=403)
        elif self._allowed_names is not None and (host := _unknown_host(request, self._allowed_names)) is not None:
            return web.json_response({"error": _UNKNOWN_HOST % (host,)}, status=403)
        if _cross_site(request):
            return web.json_response({"error": _CROSS_SITE}, status=403)
        start = time.perf_counter()
        protocol = request.protocol
        self.connections.request_started(protocol)
        try:
            response = await handler(request)
        except ApiError as exc:
            response = web.json_response({"error": exc.message}, status=exc.status)
            if exc.status == 408:  # not kept alive: closed once the body's rest drained (ADMIN_LINGER_SECONDS)
                response.force_close()
        except BodyFilterBusy as exc:  # load shed (its budget ran out waiting for a filter turn): 503
            response = web.json_response(
                {"error": exc.message, "code": int(exc.code)}, status=503, headers={"Retry-After": "5"}
            )
        except PinLaterError as exc:
            response = web.json_response({"error": exc.message, "code": int(exc.code)}, status=_status_for(exc))
        except BodyPatternError as exc:  # a store's filter refused the pattern: a bad request
            response = web.json_response({"error": str(exc)}, status=400)
        except web.HTTPException:
            raise
        except ConnectionResetError:  # the peer went (a body cut short): nobody to answer or to tell
            response = web.json_response({"error": "connection lost"}, status=400)
        except Exception as exc:
            log.exception("admin %s %s failed", request.method, request.path)
            # (its text stays in the log: it may name paths or statements, and reads need no password)
            response = web.json_response({"error": f"internal error: {type(exc).__name__} (logged)"}, status=500)
        finally:
            self.connections.request_ended(protocol)
        log.debug(
            "admin %s %s -> %d in %.1f ms",
            request.method,
            request.path_qs,
            response.status,
            (time.perf_counter() - start) * 1000.0,
            extra={"remote": request.remote},
        )
        return response

    # -- metrics and health --------------------------------------------------------------------

    async def stats_txt(self, request: web.Request) -> web.Response:
        return web.Response(text=self.server.metrics.render_text(), content_type="text/plain")

    async def stats_json(self, request: web.Request) -> web.Response:
        return web.Response(text=self.server.metrics.render_json(), content_type="application/json")

    async def prometheus(self, request: web.Request) -> web.Response:
        """The families that read the server's live state are collected on the loop; the queue
        depths, which read only the count pass's snapshot (most of the text: a series per queue,
        state and priority), are made and everything rendered on a worker thread. On the loop
        a server of 20,000 queues held every client for each scrape of 33 MB, 4 to 10 s. Scrapes
        within one second, or while one is made, share its text, and one that took long is kept
        five times as long (``shared_answer.py``): at 10,000 queues a scrape took 1.5 s, and a
        client scraping in a loop cut the Thrift port's answers by nine tenths."""
        snapshot = await self.queue_snapshot_for_metrics()

        async def render() -> bytes:
            collected = list(self.registry.collect())
            backend = self.server.backend
            later = (
                () if snapshot is None or backend is None else queue_depth_families(snapshot, backend.num_priorities)
            )
            return await asyncio.get_running_loop().run_in_executor(None, render_families, collected, later)

        body = await self._scrape.get_async((snapshot, int(time.monotonic())), render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _extra_families(self) -> Iterator[Metric]:
        backend = self.server.backend
        if backend is not None:
            healthy = GaugeMetricFamily("pinlater_shard_healthy", "1 if the shard is healthy", labels=["shard"])
            drain = GaugeMetricFamily(
                "pinlater_shard_dequeue_only", "1 if the shard takes no new jobs", labels=["shard"]
            )
            for shard in backend.shards:
                healthy.add_metric([shard.name], float(shard.healthy))
                drain.add_metric([shard.name], float(shard.dequeue_only))
            yield healthy
            yield drain
            yield from memory_families(backend.shards, backend.memory_high_water)
        yield from self._group_families()
        limits = self.server.rate_limits
        if limits is not None:
            rate = GaugeMetricFamily(
                "pinlater_queue_rate_limit_jobs_per_second",
                "Dequeue rate limit in force on this server (configured rate / servers); 0 = paused",
                labels=["queue"],
            )
            for queue in sorted(limits.configured):
                rate.add_metric([queue], limits.effective_rate(queue) or 0.0)
            yield rate

    def _group_families(self) -> Iterator[Metric]:
        """Ordered groups per queue as the monitor's last pass counted them, and the rules in
        force (``queue_rules.py``)."""
        monitor = self.server.monitor
        if monitor is not None and monitor.group_counts:
            groups = GaugeMetricFamily(
                "pinlater_queue_groups",
                "Ordered groups with an unfinished job (kind=all), and those with a job waiting behind"
                " the group's running ones (kind=blocked), as of the monitor's last pass",
                labels=["queue", "kind"],
            )
            for queue, counts in sorted(monitor.group_counts.items()):
                groups.add_metric([queue, "all"], float(counts.groups))
                groups.add_metric([queue, "blocked"], float(counts.blocked))
            yield groups
        backend = self.server.backend
        rules = backend.queue_rules if backend is not None else {}
        if rules:
            cap = GaugeMetricFamily(
                "pinlater_queue_max_in_progress",
                "maxInProgress in force (the queue's cap over every server; absent: none)",
                labels=["queue"],
            )
            concurrency = GaugeMetricFamily(
                "pinlater_queue_group_concurrency", "groupConcurrency in force", labels=["queue"]
            )
            group_rate = GaugeMetricFamily(
                "pinlater_queue_group_jobs_per_second", "groupJobsPerSecond in force", labels=["queue"]
            )
            for queue, rule in sorted(rules.items()):
                concurrency.add_metric([queue], float(rule.group_concurrency))
                if rule.max_in_progress is not None:
                    cap.add_metric([queue], float(rule.max_in_progress))
                if rule.group_jobs_per_second is not None:
                    group_rate.add_metric([queue], rule.group_jobs_per_second)
            yield cap
            yield concurrency
            yield group_rate

    async def ostrich_health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK\n", content_type="text/plain")

    async def ostrich_command(self, request: web.Request) -> web.Response:
        """Ostrich's commands as the original answered them: ``ping`` (pong), ``server_info``, and
        ``shutdown``, ``quiesce`` and Mesos' ``quitquitquit`` and ``abortabortabort``, each a
        graceful stop of the whole server here (requests in flight finish, as at SIGTERM). A stop
        is taken only from this machine (a peer on loopback): Ostrich took it from anyone who
        reached the port, which listened on every address; and never from another site's page,
        not even a navigation (``Sec-Fetch-Site``), which a page could make to a port on
        loopback. JSON unless the path ends in ``.txt``. The stop commands are off unless
        ``ADMIN_STOP_COMMANDS`` is set: they need no password (deploy scripts call them as they
        are), so anyone on this machine, and a proxy on it in front of the port, could stop the
        server; and a request forwarded by a proxy, or a HEAD, is refused."""
        command, _, suffix = request.path.lstrip("/").partition(".")
        text_format = suffix == "txt"
        if command == "ping":
            answer: Any = "pong"
        elif command == "server_info":
            answer = {
                "name": "pinlater",
                "version": __version__,
                "start_time": time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(self.server.started_at)),
                "uptime": int((time.time() - self.server.started_at) * 1000),
            }
        else:
            if not self.server.settings.admin_stop_commands:
                raise ApiError(
                    403,
                    f"{command} is off: set ADMIN_STOP_COMMANDS=true to let scripts on this machine stop the server "
                    "this way, or send it SIGTERM",
                )
            headers = request.headers
            forwarded = any(name in headers for name in ("Forwarded", "X-Forwarded-For", "X-Real-IP"))
            if (
                not _is_loopback(request.remote or "")
                or forwarded
                or headers.get("Sec-Fetch-Site") not in (None, "none")
            ):
                raise ApiError(403, f"{command} is taken only from this machine (a peer on loopback), not a page")
            if request.method != "GET":
                raise ApiError(405, f"{command}: GET it (a HEAD stops nothing)")
            if self.server.request_stop is None:
                raise ApiError(501, f"{command}: this server is not run by `pinlater serve`, which alone can stop it")
            log.warning("stopping: %s asked on the admin port by %s", command, request.remote)
            asyncio.get_running_loop().call_later(0.1, self.server.request_stop)  # (after this answer)
            answer = "ok"
        if text_format:
            lines = [f"{k}: {v}" for k, v in answer.items()] if isinstance(answer, dict) else [answer]
            return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
        return web.json_response(answer if isinstance(answer, dict) else {"response": answer})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n", content_type="text/plain")

    async def readyz(self, request: web.Request) -> web.Response:
        backend = self.backend
        timeout = min(READY_TIMEOUT_SECONDS, self.server.settings.backend_socket_timeout_seconds)

        async def ping(shard: Any) -> str | None:
            try:
                await asyncio.wait_for(backend.ping(shard), timeout)
            except TimeoutError:
                return f"{shard.name} (no answer within {timeout:g}s)"
            except Exception as exc:
                return f"{shard.name} ({exc})"
            return None

        shards = backend.shards.all()
        failing = [f for f in await asyncio.gather(*(ping(s) for s in shards)) if f is not None]
        if failing:
            return web.Response(status=503, text=f"not ready: shards unreachable: {', '.join(failing)}\n")
        return web.Response(text=f"ready: {len(shards)} shards reachable\n", content_type="text/plain")

    # -- the dashboard ---------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        return web.Response(body=_dashboard_file("index.html"), content_type="text/html", charset="utf-8")

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(body=_dashboard_file(name), content_type=STATIC[name], charset="utf-8")


def _status_for(exc: PinLaterError) -> int:
    return _STATUS_FOR_CODE.get(exc.code, 400)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"


_FOREIGN_HOST = (
    "this admin port listens on loopback only and answers requests for localhost or a loopback "
    "address, not for %r: a web page whose name was made to resolve to 127.0.0.1 (DNS rebinding) "
    "could otherwise read job bodies through a browser here; to serve other names, listen on "
    "another address (--admin-host)"
)


_UNKNOWN_HOST = (
    "this admin port answers requests for IP addresses, localhost and this machine's names, not "
    "for %r: a web page whose name was made to resolve here (DNS rebinding) could otherwise read "
    "job bodies through a browser; add the name to ADMIN_ALLOWED_HOSTS to serve it"
)
_CROSS_SITE = (
    "a request from another site's page (Sec-Fetch-Site) is refused: open the dashboard itself, "
    "or call the API from outside a browser"
)


#: Seconds the server's start waits for this machine's fully qualified name (``_allowed_names``).
FQDN_WAIT = 2.0


async def _allowed_names(configured: tuple[str, ...], fqdn_wait: float = FQDN_WAIT) -> frozenset[str] | None:
    """The host names an admin port beyond loopback answers for: localhost, this machine's name
    and fully qualified name, and ``ADMIN_ALLOWED_HOSTS``; None if that holds ``*`` (any). The
    fully qualified name takes a DNS lookup, which a resolver that does not answer holds for its
    timeouts: it is asked for on a thread of its own (daemon: a stop never waits for it), and
    the start waits ``fqdn_wait`` seconds for it, the event loop serving meanwhile, then goes on
    without it (logged)."""
    if "*" in configured:
        return None
    names = ["localhost", socket.gethostname()]
    loop = asyncio.get_running_loop()
    found: asyncio.Future[str] = loop.create_future()

    def found_now(name: str) -> None:
        if not found.done():
            found.set_result(name)

    def look() -> None:
        name = socket.getfqdn()
        with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
            loop.call_soon_threadsafe(found_now, name)

    threading.Thread(target=look, name="pinlater-fqdn", daemon=True).start()
    try:
        names.append(await asyncio.wait_for(found, fqdn_wait))
    except TimeoutError:
        log.warning(
            "this machine's fully qualified name did not resolve within %gs: the admin port answers "
            "its short name %r, not that one; name it in ADMIN_ALLOWED_HOSTS if browsers use it",
            fqdn_wait,
            names[1],
        )
    own = (_host_of(name) for name in names)
    return frozenset(name for name in (*own, *configured) if name)


def _host_of(header: str) -> str:
    """The host of a Host header, without its port or an IPv6 address' brackets, lowercased and
    without a trailing dot (as ``ADMIN_ALLOWED_HOSTS`` names are kept)."""
    host = header.rsplit(":", 1)[0] if not header.endswith("]") and header.count(":") == 1 else header
    if host.startswith("[") and "]" in host:
        host = host[1 : host.index("]")]
    return host.lower().rstrip(".")


def _unknown_host(request: web.Request, allowed: frozenset[str]) -> str | None:
    """The request's Host header, if it names neither an IP address nor an allowed name (a
    request without one is taken, as in ``_foreign_host``)."""
    header = request.headers.get("Host")
    if not header:
        return None
    host = _host_of(header)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None if host in allowed else header
    return None


def _cross_site(request: web.Request) -> bool:
    """A browser's request made by another site's page, not a navigation to this one: an image
    or script tag, or a fetch, sent from any page open in the operator's browser (each asks the
    server for work: a scan, a lookup of a big body, ``/metrics``). Browsers say so in
    ``Sec-Fetch-Site``; other clients send no such header."""
    site = request.headers.get("Sec-Fetch-Site")
    if site not in ("cross-site", "same-site"):
        return False
    # (a navigation of the window, a link followed; not of a frame, which a page can loop)
    headers = request.headers
    return headers.get("Sec-Fetch-Mode") != "navigate" or headers.get("Sec-Fetch-Dest") != "document"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _foreign_host(request: web.Request) -> str | None:
    """The request's Host header, if it names something other than this machine's loopback (a
    request without one is taken: only a browser's requests carry what a rebinding page chose)."""
    header = request.headers.get("Host")
    if not header:
        return None
    return None if _is_loopback(_host_of(header)) else header


async def start_admin(server: PinLaterServer) -> web.AppRunner:
    """Build the admin app for ``server`` and listen on its admin host and port."""
    admin = AdminApp(server)
    if not admin._loopback_only:
        admin._allowed_names = await _allowed_names(server.settings.admin_allowed_hosts)
    # (shutdown_timeout: a stop waits this long for admin requests in progress, not aiohttp's 60 s;
    # auto_decompress off: aiohttp inflated a compressed body as it came, and went on inflating
    # the rest while it drained it after the 413 that refused it, so a 1 MB gzip of 1 GiB of JSON
    # held the event loop, Thrift clients and all, for 2.8 s; the API refuses one unread instead:
    # AdminApi._authorized)
    # (lingering_time: after an answer given before its request's body was read whole, a 408 or
    # a 413, aiohttp reads and drops the rest this long, so the peer sees the answer, not a
    # reset, before the connection closes; its 10 s held a trickling peer's connection 10 s more)
    server_log = logging.getLogger("aiohttp.server")  # (malformed requests: one line per 5 s)
    if not any(isinstance(f, ThrottleFilter) for f in server_log.filters):
        server_log.addFilter(ThrottleFilter((HttpProcessingError,)))
    runner = web.AppRunner(
        admin.build(),
        access_log=None,
        shutdown_timeout=5.0,
        auto_decompress=False,
        lingering_time=ADMIN_LINGER_SECONDS,
    )
    await runner.setup()
    site = GuardedSite(runner, server.settings.admin_host, server.settings.admin_port, admin.connections)
    await site.start()
    return runner
