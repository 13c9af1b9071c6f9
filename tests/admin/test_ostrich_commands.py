"""The original's admin port was Ostrich's: ``/ping``, ``/health``, ``/stats``, ``/server_info`` and
the stop commands (``/shutdown``, ``/quiesce``, Mesos' ``/quitquitquit`` and ``/abortabortabort``),
JSON or, with ``.txt``, text. Load balancers' checks and deploy scripts written against them keep
working; a stop is taken only from this machine, and never from another site's page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from pinlater import __version__
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for


def get(server: ServerProcess, path: str, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.admin_port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def test_the_original_admin_commands_answer_as_ostrich_did(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server()
    assert get(server, "/ping") == (200, '{"response": "pong"}')
    assert get(server, "/ping.json") == (200, '{"response": "pong"}')
    assert get(server, "/ping.txt") == (200, "pong\n")
    assert get(server, "/health") == (200, "OK\n")
    status, stats = get(server, "/stats")
    assert status == 200 and json.loads(stats).keys() == json.loads(get(server, "/stats.json")[1]).keys()
    status, info = get(server, "/server_info")
    answer = json.loads(info)
    assert status == 200 and answer["name"] == "pinlater" and answer["version"] == __version__
    assert isinstance(answer["uptime"], int) and answer["uptime"] >= 0
    status, text = get(server, "/server_info.txt")
    assert status == 200 and f"version: {__version__}\n" in text and "uptime: " in text
    assert get(server, "/gc")[0] == 404, "commands of the JVM's are not offered"


def test_the_stop_commands_are_off_unless_asked_for(start_server: Callable[..., ServerProcess]) -> None:
    """They need no password (deploy scripts call them as they are): anyone on this machine, and a
    proxy on it in front of the port, could stop the server; so they answer only with
    ADMIN_STOP_COMMANDS set."""
    server = start_server()
    for command in ("/shutdown", "/shutdown.txt", "/quiesce.json", "/quitquitquit", "/abortabortabort"):
        status, text = get(server, command)
        assert status == 403 and "set ADMIN_STOP_COMMANDS=true" in text, (command, text)
    assert get(server, "/ping.txt") == (200, "pong\n") and server.proc.poll() is None


@pytest.mark.parametrize("command", ["/shutdown.txt", "/quitquitquit"])
def test_a_stop_command_stops_the_server_gracefully_but_not_from_a_page(
    start_server: Callable[..., ServerProcess], command: str
) -> None:
    server = start_server(properties={"ADMIN_STOP_COMMANDS": "true"})
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    status, text = get(server, command, **navigation)
    assert status == 403 and "only from this machine" in text, "a page's navigation to the port stops nothing"
    status, text = get(server, command, **{"X-Forwarded-For": "203.0.113.5"})
    assert status == 403 and "only from this machine" in text, "nor a request a proxy on this machine forwards"
    head = urllib.request.Request(f"http://127.0.0.1:{server.admin_port}{command}", method="HEAD")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(head, timeout=10)
    with refused.value:
        assert refused.value.code == 405, "nor a HEAD"
    assert get(server, "/ping.txt") == (200, "pong\n")
    status, text = get(server, command)
    assert status == 200 and "ok" in text
    wait_for(lambda: server.proc.poll() is not None, 30, what="the server to stop")
    assert server.proc.returncode == 0
    assert any(f"stopping: {command.strip('/').split('.')[0]} asked on the admin port" in line for line in server.lines)


def test_a_stop_command_from_another_machine_is_refused(start_server: Callable[..., ServerProcess]) -> None:
    """Ostrich took a shutdown from anyone who reached its port, which listened on every address."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # (a UDP connect sends nothing)
        try:
            probe.connect(("192.0.2.1", 9))
            outside = probe.getsockname()[0]
        except OSError:
            outside = "127.0.0.1"
    if outside.startswith("127."):
        pytest.skip("this machine has no route to an address but loopback")
    server = start_server("--admin-host", "0.0.0.0", properties={"ADMIN_STOP_COMMANDS": "true"})
    with socket.create_connection((outside, server.admin_port), timeout=10) as sock:
        sock.sendall(f"GET /shutdown.txt HTTP/1.0\r\nHost: {outside}\r\n\r\n".encode())
        answer = sock.recv(4096)
    assert answer.split(b" ")[1] == b"403" and b"only from this machine" in answer, answer
    assert get(server, "/ping.txt") == (200, "pong\n")
