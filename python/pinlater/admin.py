"""Administering PinLater from scripts and notebooks.

Two halves:

* ``Admin`` talks to a running server's admin HTTP port (``/api/...``, the same calls the
  dashboard makes): queues and their counts, scans, lookups, retrying and deleting jobs, setting,
  pausing and resuming rate limits, and reading stats::

      >>> from pinlater.admin import Admin
      >>> admin = Admin("127.0.0.1", admin_port=9999, password="the admin password")
      >>> admin.queues()
      ['emails', 'thumbnails']
      >>> admin.counts("emails")["failed"]            # one count per priority, 1 first
      [3, 0, 0]
      >>> [job["descriptor"] for job in admin.scan("emails", "failed", limit=2)]
      ['emails:s1:p1:42', 'emails:s1:p1:17']
      >>> admin.lookup("emails:s1:p1:42")["body_text"]
      'send welcome mail to ...'
      >>> admin.retry("emails")                       # every priority, up to 1000 jobs
      3
      >>> admin.delete("emails", "succeeded", body_regex="^test-")
      12
      >>> admin.set_rate("emails", 50.0); admin.pause("emails"); admin.resume("emails")
      >>> admin.stats()["counters"]["emails_enqueue"]
      1200

  Job control (issue 18): cancel jobs, schedules kept in the store, scans that page, and paced
  redrives (FAILED jobs back to PENDING at a set rate, in the background, in the server process
  that serves the admin port: a redrive does not survive a restart of that server)::

      >>> admin.cancel("emails", ["emails:s1:p1:42"])
      1
      >>> admin.set_schedule("emails", "digest", cron="0 8 * * *", body="send the digest")["next_run_ms"]
      1767254400000
      >>> admin.pause_schedule("emails", "digest"); admin.resume_schedule("emails", "digest")
      >>> jobs, more = admin.scan_page("emails", "failed", limit=100)      # more: None at the end
      >>> r = admin.start_redrive("emails", rate=50, limit=10_000)
      >>> admin.redrive(r["id"])["moved"]; admin.stop_redrive(r["id"])

  Changing anything needs the admin password (the one whose hash is ADMIN_PASSWORD_HASH); a wrong
  one raises ``PasswordRefused`` and nothing is done. Rate limits are changed by rewriting the
  server's QUEUE_CONFIG_FILE_PATH, so a server without one refuses them (``AdminError``, 409).

* Functions that edit configuration files in place, atomically (a temp file renamed over the
  original, so a watcher never reads half a file): ``set_queue_rate``, ``pause_queue``,
  ``resume_queue`` for the queue config, and ``set_shard_dequeue_only`` for the backend config
  (Redis or MySQL format). Every server watching the file picks the change up within a second::

      >>> from pinlater.admin import set_shard_dequeue_only
      >>> set_shard_dequeue_only("/etc/pinlater/redis.json", "2")          # drain shard 2
      ['2']
      >>> set_shard_dequeue_only("/etc/pinlater/redis.json", "2", False)   # take new jobs again
      ['2']
"""

from __future__ import annotations

import base64
import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from pinlater.admin_files import (
    pause_queue,
    read_queue_rates,
    resume_queue,
    set_queue_rate,
    set_shard_dequeue_only,
    write_atomically,
)
from pinlater.queue_rules import PAUSED_FROM as PAUSED_FROM

__all__ = [
    "Admin",
    "AdminError",
    "PasswordRefused",
    "pause_queue",
    "read_queue_rates",
    "resume_queue",
    "set_queue_rate",
    "set_shard_dequeue_only",
    "write_atomically",
]


class AdminError(Exception):
    """The admin API refused or failed a call; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class PasswordRefused(AdminError):
    """The admin password was wrong or missing (HTTP 403); nothing was done."""


# -- the admin HTTP API -------------------------------------------------------------------------


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _opener(host: str) -> urllib.request.OpenerDirector:
    """How to reach ``host`` (``host[:port]``): a loopback address directly, whatever
    ``http_proxy`` says (urllib sends 127.0.0.1 through it unless ``no_proxy`` names it, and
    a password with it, in clear); any other as the environment says."""
    name = urllib.parse.urlsplit(f"http://{host}").hostname or ""
    try:
        loopback = ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name.lower() == "localhost"
    return _DIRECT if loopback else urllib.request.build_opener()


class Admin:
    """A client of a server's admin HTTP port. Reads need nothing; changes need the password."""

    def __init__(
        self, host: str = "127.0.0.1", admin_port: int = 9999, *, password: str | None = None, timeout: float = 30.0
    ) -> None:
        self.base = f"http://{host}:{admin_port}"
        self.password = password
        self.timeout = timeout

    @classmethod
    def from_url(cls, url: str, *, password: str | None = None, timeout: float = 30.0) -> Admin:
        """A client of the admin port at ``url`` (``http://host:port``, a path after it ignored)."""
        try:  # (a bracket left open, or a port not a number, raised ValueError from urllib)
            parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
            valid = parts.scheme in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018  (read to check it)
        except ValueError:
            valid = False
        if not valid:
            raise AdminError(0, f"not an admin URL: {url!r} (like http://127.0.0.1:9999)")
        admin = cls(password=password, timeout=timeout)
        admin.base = f"{parts.scheme}://{parts.netloc}"
        return admin

    # -- plumbing ----------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with _opener(req.host).open(req, timeout=self.timeout) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            try:
                message = str(json.loads(payload)["error"])
            except (ValueError, KeyError, TypeError):
                message = payload.decode("utf-8", "replace").strip() or str(exc.reason)
            kind = PasswordRefused if exc.code == 403 else AdminError
            raise kind(exc.code, message) from None
        except urllib.error.URLError as exc:
            raise AdminError(0, f"cannot reach {self.base}: {exc.reason}") from None

    def _get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        _, payload = self._request("GET", path + (f"?{query}" if query else ""))
        return json.loads(payload)

    def _post(self, path: str, body: dict[str, Any], password: str | None) -> Any:
        _, payload = self._request("POST", path, {**body, "password": password or self.password or ""})
        return json.loads(payload)

    # -- reads -------------------------------------------------------------------------------

    def overview(self, queue: str | None = None) -> dict[str, Any]:
        """Everything the dashboard's queue table shows: queues with counts and rate limits,
        shards, gauges, whether rate limits can be changed."""
        result: dict[str, Any] = self._get("/api/queues", queue=queue)
        return result

    def queues(self) -> list[str]:
        """Queue names, sorted."""
        return [q["name"] for q in self.overview()["queues"]]

    def counts(self, queue: str) -> dict[str, list[int]]:
        """``{"pending", "pending_future", "in_progress", "succeeded", "failed"}`` -> one count per
        priority (index 0 is priority 1)."""
        counts: dict[str, list[int]] = self._queue(queue)["counts"]
        return counts

    def groups(self, queue: str) -> dict[str, int]:
        """The queue's ordered groups, counted now: ``{"all": groups with an unfinished job,
        "blocked": those with a job waiting behind the group's running ones}``."""
        return dict(self._queue(queue)["groups"])

    def rules(self, queue: str) -> dict[str, Any]:
        """The queue config's rules in force: ``group_concurrency``, ``max_in_progress`` (the
        whole queue's cap; None: none) and ``group_jobs_per_second`` (None: no limit)."""
        return dict(self._queue(queue)["rules"])

    def _queue(self, queue: str) -> dict[str, Any]:
        for q in self.overview(queue)["queues"]:
            if q["name"] == queue:
                found: dict[str, Any] = q
                return found
        raise AdminError(404, f"no queue {queue!r}")

    def scan(
        self,
        queue: str,
        state: str = "failed",
        *,
        priority: int | None = None,
        limit: int = 100,
        body_regex: str | None = None,
        future: bool = False,
    ) -> list[dict[str, Any]]:
        """Jobs of one state (``pending``, ``in_progress``, ``succeeded``, ``failed``), newest first,
        with attempts, custom status, ``dedup_key`` and ``group_key`` (None without one; no
        bodies: see ``lookup``): the first page of ``scan_page``."""
        jobs, _ = self.scan_page(queue, state, priority=priority, limit=limit, body_regex=body_regex, future=future)
        return jobs

    def scan_page(
        self,
        queue: str,
        state: str = "failed",
        *,
        priority: int | None = None,
        limit: int = 100,
        body_regex: str | None = None,
        future: bool = False,
        continuation: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a scan, as ``scan``, and the continuation that resumes after it (None
        when nothing is left): pass it back, with the same query, for the next page. A job that
        stays in the state during the whole scan is on exactly one page."""
        result = self._get(
            "/api/scan",
            queue=queue,
            state=state,
            priority=priority,
            limit=limit,
            regex=body_regex,
            future="1" if future else None,
            continuation=continuation,
        )
        jobs: list[dict[str, Any]] = result["jobs"]
        more: str | None = result["continuation"]
        return jobs, more

    def depth(self, queue: str) -> dict[str, int | None]:
        """``{"oldest_ready_age_ms": how long the oldest ready PENDING job has waited (None: no
        ready job), "expired": jobs that expired unrun so far}``, counted now."""
        q = self._queue(queue)
        return {"oldest_ready_age_ms": q["oldest_ready_age_ms"], "expired": q["expired"]}

    def schedules(self, queue: str) -> list[dict[str, Any]]:
        """The queue's schedules by name: ``cron`` or ``interval_ms``, ``paused``, ``next_run_ms``,
        and the job (``body_text``, ``body_base64``, ``priority``, ``attempts``, ``custom_status``,
        ``group_key``)."""
        found: list[dict[str, Any]] = self._get("/api/schedules", queue=queue)["schedules"]
        return found

    def redrives(self, queue: str | None = None) -> list[dict[str, Any]]:
        """The redrives this server runs or ran (running first, then newest first): ``id``,
        ``queue``, ``state`` (running, done, stopped, failed), ``reason``, ``moved``,
        ``failed_at_start``, ``failed_now``, ``rate``, ``limit``, ... They do not survive a restart
        of the server."""
        found: list[dict[str, Any]] = self._get("/api/redrives", queue=queue)["redrives"]
        return found

    def redrive(self, redrive_id: str) -> dict[str, Any]:
        """One redrive's progress (``redrives`` says what it holds); AdminError 404 when this
        server has none by that id (a restart forgets them)."""
        found: dict[str, Any] = self._get(f"/api/redrives/{urllib.parse.quote(redrive_id, safe='')}")["redrive"]
        return found

    def lookup(self, descriptor: str) -> dict[str, Any] | None:
        """One job with its body (``body_text`` with replacement characters, ``body_hex``) and
        ``dedup_key`` and ``group_key`` (None without one), or None."""
        try:
            job: dict[str, Any] = self._get("/api/lookup", descriptor=descriptor)["job"]
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise
        return job

    def rates(self) -> dict[str, Any]:
        """Recent enqueue/dequeue/ack rates per queue (jobs per second), as the dashboard charts."""
        result: dict[str, Any] = self._get("/api/rates")
        return result

    def stats(self) -> dict[str, Any]:
        """``/stats.json``: counters, gauges and per-method timings."""
        result: dict[str, Any] = self._get("/stats.json")
        return result

    def stats_text(self) -> str:
        return self._request("GET", "/stats.txt")[1].decode("utf-8")

    def metrics_text(self) -> str:
        """``/metrics`` in Prometheus text format."""
        return self._request("GET", "/metrics")[1].decode("utf-8")

    def ready(self) -> bool:
        """True if every shard answers a ping (``/readyz``)."""
        try:
            return self._request("GET", "/readyz")[0] == 200
        except AdminError as exc:
            if exc.status == 503:
                return False
            raise

    # -- changes (password) ------------------------------------------------------------------

    def retry(
        self,
        queue: str,
        *,
        priority: int | None = None,
        attempts: int = 1,
        limit: int = 1000,
        password: str | None = None,
    ) -> int:
        """Move up to ``limit`` FAILED jobs (of one priority, or all) back to PENDING with
        ``attempts`` attempts; returns how many moved."""
        body = {"queue": queue, "priority": priority, "attempts": attempts, "limit": limit}
        return int(self._post("/api/retry", body, password)["retried"])

    def delete(
        self,
        queue: str,
        state: str,
        *,
        priority: int | None = None,
        body_regex: str | None = None,
        limit: int = 1000,
        password: str | None = None,
    ) -> int:
        """Delete up to ``limit`` jobs of one state (and priority, and body regex); returns how many."""
        body = {"queue": queue, "state": state, "priority": priority, "regex": body_regex, "limit": limit}
        return int(self._post("/api/delete", body, password)["deleted"])

    def set_rate(self, queue: str, rate: float | None, *, password: str | None = None) -> dict[str, Any]:
        """Set the queue's dequeue rate limit in jobs/s for the fleet (None: unlimited)."""
        action = "unlimit" if rate is None else "set"
        result: dict[str, Any] = self._post("/api/rate", {"queue": queue, "action": action, "rate": rate}, password)
        return result

    def set_rules(
        self,
        queue: str,
        *,
        password: str | None = None,
        **rules: int | float | None,
    ) -> dict[str, Any]:
        """Set some of the queue's rules in the queue config file, for the fleet:
        ``group_concurrency``, ``max_in_progress``, ``group_jobs_per_second`` (None removes one);
        returns ``{"queue", "rules", "config_path"}`` with the rules now in force."""
        result: dict[str, Any] = self._post("/api/rules", {"queue": queue, **rules}, password)
        return result

    def pause(self, queue: str, *, password: str | None = None) -> dict[str, Any]:
        """Refuse dequeues from the queue (rate 0) until ``resume``."""
        result: dict[str, Any] = self._post("/api/rate", {"queue": queue, "action": "pause"}, password)
        return result

    def resume(self, queue: str, *, password: str | None = None) -> dict[str, Any]:
        """Restore the rate the queue had before ``pause`` (or no limit)."""
        result: dict[str, Any] = self._post("/api/rate", {"queue": queue, "action": "resume"}, password)
        return result

    # -- job control (password) --------------------------------------------------------------

    def cancel(self, queue: str, descriptors: list[str], *, password: str | None = None) -> int:
        """Cancel jobs of ``queue`` by descriptor (at most 1000): a PENDING job ends FAILED with
        "cancelled" in its custom status, a running one gets no further attempt; finished or
        unknown ones change nothing. Returns how many changed."""
        body = {"queue": queue, "descriptors": list(descriptors)}
        return int(self._post("/api/cancel", body, password)["cancelled"])

    def set_schedule(
        self,
        queue: str,
        name: str,
        *,
        body: str | bytes,
        cron: str | None = None,
        interval_ms: int | None = None,
        priority: int = 1,
        attempts: int = 2,
        custom_status: str = "",
        group_key: str | None = None,
        paused: bool = False,
        password: str | None = None,
    ) -> dict[str, Any]:
        """Create or replace a schedule: one job with ``body`` enqueued at each tick of ``cron``
        (5 fields, UTC) or every ``interval_ms``; returns it as ``schedules`` lists it."""
        fields: dict[str, Any] = {
            "queue": queue,
            "name": name,
            "cron": cron,
            "interval_ms": interval_ms,
            "priority": priority,
            "attempts": attempts,
            "custom_status": custom_status,
            "group_key": group_key,
            "paused": paused,
        }
        if isinstance(body, bytes):
            fields["body_base64"] = base64.b64encode(body).decode("ascii")
        else:
            fields["body"] = body
        schedule: dict[str, Any] = self._post("/api/schedules", fields, password)["schedule"]
        return schedule

    def pause_schedule(self, queue: str, name: str, *, password: str | None = None) -> dict[str, Any]:
        """Stop firing the schedule (kept, with everything else it holds) until ``resume_schedule``."""
        schedule: dict[str, Any] = self._post("/api/schedules/pause", {"queue": queue, "name": name}, password)[
            "schedule"
        ]
        return schedule

    def resume_schedule(self, queue: str, name: str, *, password: str | None = None) -> dict[str, Any]:
        """Fire the schedule again, from its next tick after now."""
        schedule: dict[str, Any] = self._post("/api/schedules/resume", {"queue": queue, "name": name}, password)[
            "schedule"
        ]
        return schedule

    def delete_schedule(self, queue: str, name: str, *, password: str | None = None) -> None:
        """Remove the schedule (AdminError 404 when the queue has none by that name)."""
        self._post("/api/schedules/delete", {"queue": queue, "name": name}, password)

    def start_redrive(
        self,
        queue: str,
        rate: float,
        *,
        limit: int | None = None,
        priority: int | None = None,
        attempts: int = 1,
        password: str | None = None,
    ) -> dict[str, Any]:
        """Start moving FAILED jobs of ``queue`` (of ``priority``, or every one) back to PENDING
        with ``attempts`` attempts, at ``rate`` jobs per second (0.1 to 100000), at most ``limit``
        (None: as many as are FAILED when it starts), in the background. Returns the redrive (its ``id``, for
        ``redrive`` and ``stop_redrive``). It runs in the server process that serves the admin
        port and does not survive a restart of that server."""
        body = {"queue": queue, "rate": rate, "limit": limit, "priority": priority, "attempts": attempts}
        redrive: dict[str, Any] = self._post("/api/redrives", body, password)["redrive"]
        return redrive

    def stop_redrive(self, redrive_id: str, *, password: str | None = None) -> dict[str, Any]:
        """Stop a redrive after its batch in flight; returns it as it ended (a finished one as it is)."""
        path = f"/api/redrives/{urllib.parse.quote(redrive_id, safe='')}/stop"
        redrive: dict[str, Any] = self._post(path, {}, password)["redrive"]
        return redrive
