"""The admin port's connections are bounded (``server/admin_conns.py``): a count past the cap is
closed as it is accepted, and a connection idle, stuck in its headers or trickling a body is
closed by the sweep, while the Thrift port goes on serving."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from types import ModuleType
from typing import Any, cast

import pytest
from aiohttp import web

from pinlater.config import Settings
from pinlater.errors import ConfigError
from pinlater.server.admin_conns import MAX_ADMIN_CONNECTIONS, AdminConnections, GuardedSite
from tests.server.test_contract import Api
from tests.support.pinlater_server import ServerProcess
from tests.support.thrift_client import connect
from tests.support.wait import wait_for

Start = Callable[..., ServerProcess]


def closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the other end closed (or reset) the connection within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def healthz(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
        status: int = response.status
        return status


def test_admin_connections_past_the_cap_take_the_place_of_an_idle_one_or_of_an_action_waiting_for_its_body(
    tmp_path: Any, start_server: Start, open_client: Any, ttypes: ModuleType
) -> None:
    """At the cap a new connection takes the place of the one idle longest, else of the action
    that has waited longest for its body: with every connection an action whose body trickles in
    (its password unread until it is whole), a health check still gets in (before, nothing made
    room, and a load balancer's /readyz was refused). The Thrift port is served throughout."""
    from tests.admin.conftest import http, start_admin_server

    server = start_admin_server(tmp_path, start_server, open_client, ttypes).server
    port = server.admin_port
    address = ("127.0.0.1", port)
    with ExitStack() as stack:
        head = b"POST /api/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        head += b"Content-Length: 99\r\n\r\n{"

        def from_host(i: int) -> socket.socket:
            # (from two loopback hosts, each under its share of nine tenths of the cap)
            source = ("127.0.0.1" if i % 2 else "127.0.0.2", 0)
            return stack.enter_context(socket.create_connection(address, source_address=source))

        def in_a_request(i: int) -> socket.socket:
            sock = from_host(i)
            sock.sendall(head)  # an action whose body never ends: waiting for it
            return sock

        busy = [in_a_request(i) for i in range(MAX_ADMIN_CONNECTIONS - 1)]
        wait_for(
            lambda: http(server, "/stats.json").json()["gauges"]["admin_connections_reading"] == len(busy),
            timeout=30,
            what="every trickling action to wait for its body",
        )
        busy.append(in_a_request(len(busy)))  # the port's last place
        assert _healthy(port), "a health check takes the place of one waiting for its body"
        gauges = http(server, "/stats.json").json()["gauges"]
        assert gauges["admin_connections_rejected"] == 0 and gauges["admin_connections_evicted"] >= 1, gauges
        client, transport = connect("127.0.0.1", server.port, timeout=10)
        stack.callback(transport.close)
        assert isinstance(client.getQueueNames(Api(client, ttypes).ctx), set), "Thrift still served"
        for sock in busy:
            sock.close()
        wait_for(lambda: http(server, "/stats.json").json()["gauges"]["admin_connections_open"] <= 1)

        idle = [from_host(i) for i in range(MAX_ADMIN_CONNECTIONS)]
        assert _healthy(port), "a new one is served: the one idle longest made room"
        assert closed_by_peer(idle[0]), "the one idle longest was closed"


def _healthy(port: int) -> bool:
    try:
        return healthz(port) == 200
    except OSError:
        return False


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        return True


async def _counted_site(connections: AdminConnections, *routes: tuple[str, str, Any]) -> tuple[web.AppRunner, int]:
    """An app of ``routes`` on a ``GuardedSite`` of ``connections`` on a free loopback port, its
    requests counted as the admin app's middleware counts them; its runner and port."""

    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        connections.request_started(request.protocol)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            connections.request_ended(request.protocol)

    app = web.Application(middlewares=[count])
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await GuardedSite(runner, "127.0.0.1", 0, connections).start()
    return runner, runner.addresses[0][1]


def test_idle_stuck_and_trickling_connections_are_swept_and_busy_ones_kept() -> None:
    """In-process, with short limits: a connection that sends nothing, half a request's headers,
    a body a byte at a time, or takes none of its answer is closed at its limit; one whose
    request answers is kept while it keeps asking."""

    async def run() -> None:
        async def big(request: web.Request) -> web.Response:
            return web.Response(body=b"x" * (32 << 20))

        async def echo(request: web.Request) -> web.Response:
            try:
                return web.Response(text=(await request.text()) or "ok")
            except ConnectionResetError:  # (the trickle, closed under it)
                return web.Response(status=400)

        connections = AdminConnections(cap=16, idle_seconds=0.5, request_seconds=1.5)
        runner, port = await _counted_site(connections, ("*", "/", echo), ("GET", "/big", big))
        loop = asyncio.get_running_loop()
        try:
            idle = await asyncio.open_connection("127.0.0.1", port)
            stuck = await asyncio.open_connection("127.0.0.1", port)
            stuck[1].write(b"GET / HTTP/1.1\r\nHost: x\r\n")
            trickle = await asyncio.open_connection("127.0.0.1", port)
            trickle[1].write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            deaf = await asyncio.open_connection("127.0.0.1", port)  # asks for 32 MiB, reads none
            deaf[1].write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            busy = await asyncio.open_connection("127.0.0.1", port)
            start = loop.time()
            answered = 0
            while loop.time() - start < 2.5:  # past every limit
                busy[1].write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert (await busy[0].readuntil(b"ok")).startswith(b"HTTP/1.1 200")
                answered += 1
                if not trickle[0].at_eof():
                    trickle[1].write(b"x")  # (once closed, nothing more: the writes would fail)
                await asyncio.sleep(0.2)
            for reader, _ in (idle, stuck, trickle):
                assert await _closed(reader)
            # the deaf one too: its answer's bytes waiting for it do not keep it open
            assert answered >= 10 and not busy[0].at_eof(), "the busy one is kept"
            assert connections.timed_out == 4 and len(connections.open) == 1
            for _, writer in (idle, stuck, trickle, deaf, busy):
                writer.close()
        finally:
            await runner.cleanup()

    asyncio.run(run())


def test_at_the_cap_the_idle_connection_heard_from_longest_ago_makes_room() -> None:
    """Not the one opened first: a connection whose next request is arriving (its headers begun)
    is kept, and the idle one whose peer said nothing since is closed for the newcomer."""

    async def run() -> None:
        async def ok(request: web.Request) -> web.Response:
            return web.Response(text="ok")

        connections = AdminConnections(cap=2, peer_cap=2)
        app = web.Application()
        app.router.add_get("/", ok)
        runner = web.AppRunner(app)
        await runner.setup()
        site = GuardedSite(runner, "127.0.0.1", 0, connections)
        await site.start()
        port = runner.addresses[0][1]
        try:
            arriving = await asyncio.open_connection("127.0.0.1", port)
            quiet = await asyncio.open_connection("127.0.0.1", port)
            arriving[1].write(b"GET / HTTP/1.1\r\n")  # its request begins, after the quiet one opened
            await arriving[1].drain()

            def heard_arriving() -> bool:  # the first opened was heard from last
                first, second = sorted(connections.open.values(), key=lambda c: c.since)
                return first.heard > second.heard

            while not heard_arriving():
                await asyncio.sleep(0.01)
            newcomer = await asyncio.open_connection("127.0.0.1", port)
            assert await _closed(quiet[0]), "the one heard from longest ago made room"
            arriving[1].write(b"Host: x\r\n\r\n")
            assert (await arriving[0].readuntil(b"ok")).startswith(b"HTTP/1.1 200")
            newcomer[1].write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await newcomer[0].readuntil(b"ok")).startswith(b"HTTP/1.1 200")
            for _, writer in (arriving, quiet, newcomer):
                writer.close()
        finally:
            await runner.cleanup()

    asyncio.run(run())


def test_a_loopback_admin_port_answers_only_requests_for_loopback_names(start_server: Start) -> None:
    """DNS rebinding: a page whose name was made to resolve to 127.0.0.1 sends its requests with
    its own name in Host; a loopback-only admin port answers them 403, and its own names as ever."""
    server = start_server()

    def status(host: str | None) -> int:
        with socket.create_connection(("127.0.0.1", server.admin_port), timeout=10) as sock:
            header = b"" if host is None else b"Host: %s\r\n" % host.encode()
            sock.sendall(b"GET /stats.json HTTP/1.0\r\n" + header + b"\r\n")
            return int(sock.recv(64).split(b" ")[1])

    port = server.admin_port
    for host in (f"127.0.0.1:{port}", "localhost", f"LOCALHOST:{port}", "localhost.", f"[::1]:{port}", None):
        assert status(host) == 200, host
    for host in ("attacker.example", f"attacker.example:{port}", f"10.1.2.3:{port}"):
        assert status(host) == 403, host


def test_an_admin_port_beyond_loopback_answers_ip_addresses_and_known_names_only(start_server: Start) -> None:
    """Listening on every address, DNS rebinding works as on loopback: the page's own name in
    Host. Such a port answers IP addresses, localhost, this machine's names and the names of
    ADMIN_ALLOWED_HOSTS; and, from a browser, no request another site's page made but a
    navigation (an image tag or a fetch of /metrics, a scan, a lookup cost the server work)."""
    server = start_server("--admin-host", "0.0.0.0", properties={"ADMIN_ALLOWED_HOSTS": "PinLater.Internal., ops"})

    def status(host: str | None, *headers: str) -> int:
        with socket.create_connection(("127.0.0.1", server.admin_port), timeout=10) as sock:
            lines = ([] if host is None else [f"Host: {host}"]) + list(headers)
            request = "GET /stats.json HTTP/1.0\r\n" + "".join(f"{line}\r\n" for line in lines) + "\r\n"
            sock.sendall(request.encode())
            return int(sock.recv(64).split(b" ")[1])

    port = server.admin_port
    known = (f"127.0.0.1:{port}", f"10.1.2.3:{port}", "[::1]", "localhost", "pinlater.internal", f"OPS:{port}")
    for host in (*known, socket.gethostname(), None):
        assert status(host) == 200, host
    for host in ("attacker.example", f"attacker.example:{port}", "internal"):
        assert status(host) == 403, host
    assert status("localhost", "Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors") == 403
    assert status("localhost", "Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: cors") == 403
    link = ("Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate")
    assert status("localhost", *link, "Sec-Fetch-Dest: document") == 200  # a link to it followed
    assert status("localhost", *link, "Sec-Fetch-Dest: iframe") == 403  # a frame, which a page can loop
    assert status("localhost", "Sec-Fetch-Site: same-origin", "Sec-Fetch-Mode: cors") == 200  # the dashboard's own


def test_a_star_in_admin_allowed_hosts_answers_any_name() -> None:
    from pinlater.config import parse_properties, resolve_settings
    from pinlater.server.admin import _allowed_names

    settings = resolve_settings(parse_properties("ADMIN_ALLOWED_HOSTS = a.example, *\n", source="p"))
    assert settings.admin_allowed_hosts == ("a.example", "*")
    assert asyncio.run(_allowed_names(settings.admin_allowed_hosts)) is None
    assert "a.example" in (asyncio.run(_allowed_names(("a.example",))) or ())
    # A name of other than ASCII is kept as a browser sends it in Host (IDNA), where it was
    # compared as written and never matched; one IDNA cannot encode is a config error.
    idna = resolve_settings(parse_properties("ADMIN_ALLOWED_HOSTS = Bücher.Example., ops\n", source="p"))
    assert idna.admin_allowed_hosts == ("xn--bcher-kva.example", "ops")
    with pytest.raises(ConfigError, match="IDNA"):
        resolve_settings(parse_properties("ADMIN_ALLOWED_HOSTS = " + "ü" * 70 + ".example\n", source="p"))


def test_a_resolver_that_does_not_answer_delays_the_start_by_the_fqdn_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's fully qualified name is a DNS lookup, which a resolver that does not answer
    holds for its timeouts (a broken /etc/resolv.conf: many seconds). The start waits 0.2 s
    here, then answers the other names."""
    from pinlater.server.admin import _allowed_names

    answer = threading.Event()

    def stuck() -> str:
        answer.wait(30)
        return "late.example"

    monkeypatch.setattr(socket, "getfqdn", stuck)

    async def look_up() -> tuple[frozenset[str] | None, int]:
        turns = 0

        async def turning() -> None:  # the loop serves meanwhile
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0.01)

        turner = asyncio.create_task(turning())
        try:
            return await _allowed_names(("ops",), fqdn_wait=0.2), turns
        finally:
            turner.cancel()

    started = time.monotonic()
    try:
        names, turns = asyncio.run(look_up())
        took = time.monotonic() - started
    finally:
        answer.set()
    assert names is not None and {"localhost", "ops", socket.gethostname().lower()} <= names
    assert "late.example" not in names
    assert took < 10, "it did not wait for the resolver"
    assert turns >= 5, "the event loop turned while it waited"
    monkeypatch.setattr(socket, "getfqdn", lambda: "Quick.Example.")
    assert "quick.example" in (asyncio.run(_allowed_names((), fqdn_wait=5)) or ()), "a name that resolves is answered"


def test_one_host_holds_at_most_nine_tenths_of_the_admin_port() -> None:
    """A host at its share (9 of 10) has its next connection take the place of its own idle one,
    or closed as it is accepted when each of its own is in a request (bodies trickled in), even
    while another host's connection is idle; another host (127.0.0.2, a loopback address of its
    own) is served meanwhile, and a closed connection gives its host's place back."""

    async def run() -> None:
        async def echo(request: web.Request) -> web.Response:
            try:
                return web.Response(text=(await request.text()) or "ok")
            except ConnectionResetError:
                return web.Response(status=400)

        connections = AdminConnections(cap=10)
        assert connections.peer_cap == 9
        runner, port = await _counted_site(connections, ("*", "/", echo))

        async def connect(host: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.open_connection("127.0.0.1", port, local_addr=(host, 0))

        async def until(condition: Callable[[], bool]) -> None:
            async with asyncio.timeout(10):
                while not condition():
                    await asyncio.sleep(0.01)

        async def ask(pair: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> bytes:
            pair[1].write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            return await asyncio.wait_for(pair[0].readuntil(b"ok"), 10)

        try:
            other_idle = await connect("127.0.0.2")
            await until(lambda: connections.per_host["127.0.0.2"] == 1)
            own = [await connect("127.0.0.1") for _ in range(9)]
            await until(lambda: connections.per_host["127.0.0.1"] == 9)
            for _, writer in own[1:]:  # in a request whose body never ends
                writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
            await until(lambda: sum(1 for c in connections.open.values() if c.busy) == 8)

            newcomer = await connect("127.0.0.1")
            assert (await ask(newcomer)).startswith(b"HTTP/1.1 200"), "served in its own idle one's place"
            assert await _closed(own[0][0]), "its own idle one made room (not the other host's)"
            assert connections.evicted == 1 and connections.refused == 0

            newcomer[1].write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
            await until(lambda: sum(1 for c in connections.open.values() if c.busy) == 9)
            refused = await connect("127.0.0.1")
            assert await _closed(refused[0]), "at its share with none of its own idle: closed as accepted"
            assert (connections.refused, connections.refused_per_host) == (1, 1)
            assert len(connections.open) == 10 and connections.per_host["127.0.0.1"] == 9

            assert (await ask(other_idle)).startswith(b"HTTP/1.1 200"), "the other host is served"
            own[1][1].close()
            await until(lambda: connections.per_host["127.0.0.1"] == 8)
            again = await connect("127.0.0.1")
            assert (await ask(again)).startswith(b"HTTP/1.1 200"), "a closed one gave its place back"
            for _, writer in (other_idle, *own, newcomer, refused, again):
                writer.close()
            await until(lambda: not connections.open)
            assert not connections.per_host, "a host with none open keeps no entry"
        finally:
            await runner.cleanup()

    asyncio.run(run())


def test_an_admin_body_that_does_not_come_in_time_is_answered_408(start_server: Start) -> None:
    """A POST whose body stops short is answered 408 after ADMIN_BODY_TIMEOUT_SECONDS (not held
    for the port's 120 s) and its connection closed (not kept alive, nor held to drain the
    body's rest); the admin connection gauges are in /stats.txt."""
    server = start_server(properties={"ADMIN_BODY_TIMEOUT_SECONDS": "0.5"})
    with socket.create_connection(("127.0.0.1", server.admin_port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 99\r\n\r\n{"
        )
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"ADMIN_BODY_TIMEOUT_SECONDS" in answer
        assert closed_by_peer(sock, timeout=5), "closed after the 408"
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/stats.txt", timeout=10) as response:
        text = response.read().decode()
    names = dict(line.strip().split(": ", 1) for line in text.splitlines() if ": " in line)
    assert float(names["admin_connections_open"]) >= 1  # (this request's)
    assert float(names["admin_connections_rejected_per_peer"]) == 0


class _Transport:
    """What AdminConnections asks of a transport (``asyncio.Transport``'s own methods)."""

    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        self.closing = True


def test_room_is_made_first_from_a_connection_already_closing() -> None:
    """One closed (by the sweep, say) whose loss is not told yet makes room without another
    being closed or counted evicted, and its loss, told later, counts nothing twice."""
    connections = AdminConnections(cap=2, peer_cap=2)
    first, second, third = _Transport(), _Transport(), _Transport()
    assert connections.admit("a", cast(asyncio.Transport, first), "h")
    assert connections.admit("b", cast(asyncio.Transport, second), "h")
    first.abort()
    assert connections.admit("c", cast(asyncio.Transport, third), "h")
    assert not second.closing and connections.evicted == 0 and set(connections.open) == {"b", "c"}
    connections.forget("a")  # its connection_lost, late
    assert connections.per_host["h"] == 2
    assert connections.admit("d", cast(asyncio.Transport, _Transport()), "h"), "the idle one heard longest ago"
    assert second.closing and connections.evicted == 1 and connections.per_host["h"] == 2


def test_the_admin_body_timeout_is_below_a_requests_limit() -> None:
    assert Settings.from_properties("ADMIN_BODY_TIMEOUT_SECONDS=5\n").admin_body_timeout_seconds == 5
    for bad in ("0", "120", "500"):
        with pytest.raises(ConfigError, match="ADMIN_BODY_TIMEOUT_SECONDS"):
            Settings.from_properties(f"ADMIN_BODY_TIMEOUT_SECONDS={bad}\n")


def test_at_the_cap_the_action_whose_body_comes_slowest_makes_room_not_a_request_at_work() -> None:
    """With none idle, the newcomer takes the place of the action whose body has come slowest
    (``AdminConnections.reading``, as ``AdminApi._authorized`` marks it): not a request being
    worked on, nor an upload that has waited longer but sent far more (one waiting its turn)."""

    async def run() -> None:
        connections = AdminConnections(cap=3, peer_cap=3)
        release = asyncio.Event()

        async def action(request: web.Request) -> web.Response:
            connections.reading(request.protocol, True)
            try:
                await request.read()
            except ConnectionResetError:
                return web.Response(status=400)
            finally:
                connections.reading(request.protocol, False)
            return web.Response(text="ok")

        async def working(request: web.Request) -> web.Response:
            await release.wait()
            return web.Response(text="ok")

        runner, port = await _counted_site(connections, ("POST", "/act", action), ("GET", "/", working))

        async def until(condition: Callable[[], bool]) -> None:
            async with asyncio.timeout(10):
                while not condition():
                    await asyncio.sleep(0.01)

        async def opened(request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            pair = await asyncio.open_connection("127.0.0.1", port)
            pair[1].write(request)
            return pair

        try:
            at_work = await opened(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await until(lambda: sum(c.busy for c in connections.open.values()) == 1)
            uploading = await opened(b"POST /act HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
            await until(lambda: connections.reading_bodies == 1)
            uploading[1].write(b"u" * 60_000)  # (most of its body, not yet all)
            await until(lambda: sum(c.received for c in connections.open.values()) > 60_000)
            trickling = await opened(b"POST /act HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx")
            await until(lambda: connections.reading_bodies == 2)
            newcomer = await opened(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert await _closed(trickling[0]), "the action whose body came slowest made room"
            assert connections.evicted == 1 and connections.refused == 0
            release.set()
            for reader, _ in (at_work, newcomer):
                assert (await asyncio.wait_for(reader.readuntil(b"ok"), 10)).startswith(b"HTTP/1.1 200")
            uploading[1].write(b"u" * 40_000)
            assert (await asyncio.wait_for(uploading[0].readuntil(b"ok"), 10)).startswith(b"HTTP/1.1 200")
            for _, writer in (at_work, uploading, trickling, newcomer):
                writer.close()
        finally:
            await runner.cleanup()

    asyncio.run(run())
