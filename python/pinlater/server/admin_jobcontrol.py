"""The admin port's job-control API (issue 18), mixed into ``AdminApp`` like ``AdminApi``.

* POST ``cancel`` ``{"queue", "descriptors": [...], "password"}`` -> ``{"queue", "asked",
  "cancelled"}``: ``ShardedBackend.cancel_jobs`` (a PENDING job ends FAILED with "cancelled" in
  its custom status; a running one gets no further attempt; finished or unknown ones: nothing).
* GET ``schedules?queue=`` -> ``{"queue", "schedules": [...], "now_ms"}``, each schedule with its
  next run and whether it is paused. POST ``schedules`` creates or replaces one (``_plan_schedule``
  lists the fields); POST ``schedules/pause``, ``schedules/resume`` (an upsert with ``paused``
  flipped, the rest kept) and ``schedules/delete`` take ``{"queue", "name", "password"}``.
* GET ``redrives`` (``?queue=``) and ``redrives/{id}``; POST ``redrives`` starts one
  (``{"queue", "rate", "limit"?, "priority"?, "attempts"?, "password"}``, answered 201) and POST
  ``redrives/{id}/stop`` stops one (password). Every redrive answer carries
  ``"survives_restart": false`` and ``redrive.NOTE``: a redrive lives in this server process only.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import functools
import json
import logging
from typing import Any

from aiohttp import web

from pinlater import schedules
from pinlater._pinlater import DescriptorError, decode_descriptors
from pinlater.config import ADMIN_REQUEST_SECONDS
from pinlater.errors import shown
from pinlater.redrive import MAX_RUNNING, NOTE, RedrivePlan, RedriveRefused, Redrives
from pinlater.server.admin_api import AdminApi, ApiError, _audit, _int, _json

log = logging.getLogger("pinlater.server.admin")

#: Descriptors one cancel takes.
MAX_CANCEL = 1000
#: Longest schedule body taken (bytes): what one job body may be on the wire is the store's limit.
MAX_SCHEDULE_BODY = schedules.MAX_BODY_BYTES
#: The schedule body shown as text in listings (characters); ``body_base64`` is always whole.
SCHEDULE_TEXT_LIMIT = 4096
#: Most bytes a schedule upsert's body may hold: its job body at MAX_SCHEDULE_BODY in base64
#: (4 characters for 3 bytes) and the other fields. A text ``body`` that JSON escapes heavily
#: may not fit: ``body_base64`` always does.
SCHEDULE_POST_BYTES = (MAX_SCHEDULE_BODY + 2) // 3 * 4 + 64 * 1024
RESTART = {"survives_restart": False, "note": NOTE}
_NO_STORE = {"Cache-Control": "no-store"}
#: Schedules made into JSON at once in a listing (``api_schedules``).
LISTING_PART = 200
#: Listings with bodies made and sent this many at a time in the process, each holding its turn
#: until its peer has taken the answer (up to 11 MB for a queue's 8 MiB of schedules), for at
#: most ADMIN_REQUEST_SECONDS (then its connection is cut): 250 connections asking for one and
#: reading nothing had taken the server to 6.5 GB. A listing that waits for a turn longer than
#: ADMIN_BODY_TIMEOUT_SECONDS is answered 503.
BODY_LISTINGS = 4
#: One schedule's listing with its body (``name=``, 2.7 MB at most: the dashboard's edit) takes
#: one of these turns, its own, so it waits behind no big listing, and as many are held at most.
ONE_SCHEDULE_LISTINGS = 16


class JobControlApi(AdminApi):
    """Cancel, schedules and redrives; ``AdminApp`` owns ``redrives``."""

    redrives: Redrives

    # -- cancel ------------------------------------------------------------------------------------

    async def api_cancel(self, request: web.Request) -> web.Response:
        body = await self._authorized(request, "cancel")
        queue = await self._existing_queue(body.get("queue"))
        descriptors = body.get("descriptors")
        if (
            not isinstance(descriptors, list)
            or not 1 <= len(descriptors) <= MAX_CANCEL
            or not all(isinstance(d, str) for d in descriptors)
        ):
            raise ApiError(400, f"descriptors must be a list of 1 to {MAX_CANCEL} job descriptors")
        descriptors = [d.strip() for d in descriptors]
        try:
            parsed = decode_descriptors(descriptors)
        except DescriptorError as exc:
            raise ApiError(400, f"invalid job descriptor: {exc}") from None
        for descriptor, (job_queue, *_rest) in zip(descriptors, parsed, strict=True):
            if job_queue != queue:
                raise ApiError(
                    400, f"{shown(descriptor)} is a job of queue {shown(job_queue)}, not {queue!r}: nothing was done"
                )
        broker = self.server.broker
        cancel = functools.partial(self.backend.cancel_jobs, queue, descriptors)
        changed = await (cancel() if broker is None else broker.around_cancel(queue, parsed, cancel))
        self.server.metrics.incr(f"{queue}_cancel", changed)
        _audit(request, logging.WARNING, "cancel", queue, f"cancelled {changed} of {len(descriptors)} jobs")
        return _json({"queue": queue, "asked": len(descriptors), "cancelled": changed})

    # -- schedules ---------------------------------------------------------------------------------

    async def api_schedules(self, request: web.Request) -> web.StreamResponse:
        """The queue's schedules; ``name=N``: that one only (none if there is none); ``bodies=0``:
        without ``body_base64`` (their text's first ``SCHEDULE_TEXT_LIMIT`` characters stay), as
        the dashboard lists them at each refresh: a queue's bodies may hold 8 MiB, 11 MB of JSON
        every 5 s for each page open. It asks for one with its body to edit it. With bodies, a
        listing is made and sent in one of ``BODY_LISTINGS`` turns."""
        queue = await self._existing_queue(request.query.get("queue"))
        if request.query.get("bodies", "1") == "0":
            text = await self._schedule_listing(request, queue, False)
            return web.Response(text=text, content_type="application/json", headers=_NO_STORE)
        busy = "listings with bodies are being sent: try again, or ask with bodies=0"
        # (one schedule's, the dashboard's edit, 2.7 MB at most: turns of its own, many more)
        kind, turns = ("listings with bodies", BODY_LISTINGS)
        if request.query.get("name") is not None:
            kind, turns = ("one schedule's listings", ONE_SCHEDULE_LISTINGS)
        async with self._turn(kind, turns, busy):
            data = (await self._schedule_listing(request, queue, True)).encode()
            response = web.StreamResponse(headers=_NO_STORE)
            response.content_type, response.charset, response.content_length = "application/json", "utf-8", len(data)
            await response.prepare(request)
            try:  # (waits for the peer to take most of it, within a request's time: a turn is not
                # held for hours by a peer reading a few bytes a minute; HEAD's is not sent)
                if request.method != "HEAD":
                    await asyncio.wait_for(response.write(data), ADMIN_REQUEST_SECONDS)
            except TimeoutError:
                if request.transport is not None:
                    request.transport.abort()
                return response
            del data
            await response.write_eof()
            return response

    async def _schedule_listing(self, request: web.Request, queue: str, with_bodies: bool) -> str:
        found = await schedules.listing(self.backend, queue)
        if (name := request.query.get("name")) is not None:
            found = [s for s in found if s.name == name]
        now = self.backend.clock.now_ms()
        # In parts, the event loop's other work between them: a queue's schedules may hold 8 MiB,
        # 18 MB of JSON with their bodies as text and base64, which held the loop 300 ms at once.
        parts = []
        for at in range(0, len(found), LISTING_PART):
            if at:
                await asyncio.sleep(0)
            part = found[at : at + LISTING_PART]
            parts.append(",".join(json.dumps(_schedule(s, with_bodies), allow_nan=False) for s in part))
        return f'{{"queue": {json.dumps(queue)}, "schedules": [{",".join(parts)}], "now_ms": {now:d}}}'

    async def api_schedule_set(self, request: web.Request) -> web.Response:
        body = await self._authorized(request, "schedule-set", SCHEDULE_POST_BYTES)
        queue = await self._existing_queue(body.get("queue"))
        stored = await schedules.upsert(self.backend, _plan_schedule(queue, body))
        how = f"cron {stored.cron!r}" if stored.cron is not None else f"every {stored.interval_ms} ms"
        paused = ", paused" if stored.paused else ""
        _audit(request, logging.WARNING, "schedule-set", queue, f"schedule {stored.name!r} set: {how}{paused}")
        return _json({"queue": queue, "schedule": _schedule(stored)})

    async def api_schedule_pause(self, request: web.Request) -> web.Response:
        return await self._flip(request, paused=True)

    async def api_schedule_resume(self, request: web.Request) -> web.Response:
        return await self._flip(request, paused=False)

    async def _flip(self, request: web.Request, paused: bool) -> web.Response:
        action = "schedule-pause" if paused else "schedule-resume"
        body = await self._authorized(request, action)
        queue = await self._existing_queue(body.get("queue"))
        current = await self._existing_schedule(queue, body.get("name"))
        # An upsert with the rest kept; its next tick is counted from now (a resumed schedule
        # does not fire for the ticks it missed while paused).
        stored = await schedules.upsert(self.backend, dataclasses.replace(current, paused=paused))
        _audit(request, logging.WARNING, action, queue, f"schedule {stored.name!r} {'paused' if paused else 'resumed'}")
        return _json({"queue": queue, "schedule": _schedule(stored)})

    async def api_schedule_delete(self, request: web.Request) -> web.Response:
        body = await self._authorized(request, "schedule-delete")
        queue = await self._existing_queue(body.get("queue"))
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "give the schedule's name")
        if not await schedules.delete(self.backend, queue, name):
            raise ApiError(404, f"queue {queue!r} has no schedule {name!r}")
        _audit(request, logging.WARNING, "schedule-delete", queue, f"schedule {name!r} deleted")
        return _json({"queue": queue, "name": name, "deleted": True})

    async def _existing_schedule(self, queue: str, name: Any) -> schedules.Schedule:
        if not isinstance(name, str) or not name:
            raise ApiError(400, "give the schedule's name")
        for schedule in await schedules.listing(self.backend, queue):
            if schedule.name == name:
                return schedule
        raise ApiError(404, f"queue {queue!r} has no schedule {name!r}")

    # -- redrives ----------------------------------------------------------------------------------

    async def api_redrives(self, request: web.Request) -> web.Response:
        queue = request.query.get("queue") or None
        found = [r.as_json() for r in self.redrives.listing(queue)]
        return _json({"redrives": found, "max_running": MAX_RUNNING, **RESTART})

    async def api_redrive(self, request: web.Request) -> web.Response:
        try:
            redrive = self.redrives.get(request.match_info["id"])
        except RedriveRefused as exc:
            raise ApiError(exc.status, exc.message) from None
        return _json({"redrive": redrive.as_json(), **RESTART})

    async def api_redrive_start(self, request: web.Request) -> web.Response:
        body = await self._authorized(request, "redrive")
        queue = await self._existing_queue(body.get("queue"))
        rate = body.get("rate")
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise ApiError(400, f"rate must be a number of jobs per second, not {rate!r}")
        limit = body.get("limit")
        plan = RedrivePlan(
            queue,
            float(rate),
            None if limit is None else _int(limit, "limit", 1, 1_000_000_000),
            self._priority(body.get("priority")),
            _int(body.get("attempts", 1), "attempts", 1, 1_000_000),
        )
        try:
            redrive = await self.redrives.start(self.backend, plan)
        except RedriveRefused as exc:
            raise ApiError(exc.status, exc.message) from None
        what = f"redrive {redrive.id} started at {plan.rate:g} jobs/s, limit {plan.limit}, priority {plan.priority}"
        _audit(request, logging.WARNING, "redrive", queue, what)
        return web.json_response(
            {"redrive": redrive.as_json(), **RESTART}, status=201, headers={"Cache-Control": "no-store"}
        )

    async def api_redrive_stop(self, request: web.Request) -> web.Response:
        await self._authorized(request, "redrive-stop")
        try:
            redrive = await self.redrives.stop(request.match_info["id"])
        except RedriveRefused as exc:
            raise ApiError(exc.status, exc.message) from None
        what = f"redrive {redrive.id}: {redrive.state.value}, moved {redrive.moved}"
        _audit(request, logging.WARNING, "redrive-stop", redrive.plan.queue, what)
        return _json({"redrive": redrive.as_json(), **RESTART})


def _plan_schedule(queue: str, body: dict[str, Any]) -> schedules.Schedule:
    """The schedule a set asks for: ``name``; exactly one of ``cron`` (5 fields) and
    ``interval_ms``; the job's ``body`` (text, sent as UTF-8) or ``body_base64``; ``priority``
    (1), ``attempts`` (2), ``custom_status`` (""), ``group_key`` (none); ``paused`` (false).
    The rest is checked by ``Schedule.check`` (ENQUEUE_REJECTED -> 400)."""
    known = {"queue", "password", "name", "cron", "interval_ms", "body", "body_base64", "priority", "attempts"}
    known |= {"custom_status", "group_key", "paused"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise ApiError(400, f"unknown field(s): {', '.join(unknown)} (fields: {', '.join(sorted(known))})")
    name = body.get("name")
    if not isinstance(name, str):
        raise ApiError(400, "give the schedule's name")
    cron = body.get("cron") or None
    if cron is not None and not isinstance(cron, str):
        raise ApiError(400, "cron must be a string of 5 fields, like '*/5 * * * *'")
    interval = body.get("interval_ms")
    interval_ms = None if interval in (None, "") else _int(interval, "interval_ms", 1, 2**62)
    job_body = _schedule_body(body.get("body"), body.get("body_base64"))
    status = body.get("custom_status") or ""
    group = body.get("group_key") or None
    if not isinstance(status, str) or (group is not None and not isinstance(group, str)):
        raise ApiError(400, "custom_status and group_key must be strings")
    paused = body.get("paused", False)
    if not isinstance(paused, bool):
        raise ApiError(400, "paused must be true or false")
    job = schedules.ScheduledJob(
        job_body,
        _int(body.get("priority", 1), "priority", 1, 1_000_000),
        _int(body.get("attempts", 2), "attempts", 1, 1_000_000),
        status,
        group,
    )
    return schedules.Schedule(queue, name, job, cron, interval_ms, paused)


def _schedule_body(text: Any, b64: Any) -> bytes:
    if (text is None) == (b64 is None):
        raise ApiError(400, "give the job's body as exactly one of body (text) and body_base64")
    if text is not None:
        if not isinstance(text, str):
            raise ApiError(400, "body must be text (use body_base64 for bytes)")
        data = text.encode("utf-8")
    else:
        if not isinstance(b64, str):
            raise ApiError(400, "body_base64 must be a base64 string")
        try:
            data = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "body_base64 is not valid base64") from None
    if len(data) > MAX_SCHEDULE_BODY:
        raise ApiError(400, f"the job's body is {len(data)} bytes; at most {MAX_SCHEDULE_BODY}")
    return data


def _schedule(schedule: schedules.Schedule, with_body: bool = True) -> dict[str, Any]:
    job = schedule.job
    return {
        "queue": schedule.queue,
        "name": schedule.name,
        "cron": schedule.cron,
        "interval_ms": schedule.interval_ms,
        "paused": schedule.paused,
        "next_run_ms": schedule.next_run_ms,
        "priority": job.priority,
        "attempts": job.attempts_allowed,
        "custom_status": job.custom_status,
        "group_key": job.group_key,
        "body_size": len(job.body),
        "body_text": job.body[:SCHEDULE_TEXT_LIMIT].decode("utf-8", "replace"),
        "body_text_truncated": len(job.body) > SCHEDULE_TEXT_LIMIT,
        "body_base64": base64.b64encode(job.body).decode("ascii") if with_body else None,
    }
