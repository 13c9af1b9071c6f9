"""One hostile or careless peer must not take the server down (issue 14, item 6).

Each attack runs against a real ``pinlater serve`` (embedded store: the transport behaves the same
on every backend) with raw sockets, while a client generated from the IDL checks that everyone
else is still served.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.conftest import ADMIN_PASSWORD, original_password_hash
from tests.server.test_contract import Api
from tests.server.test_frames import frame, is_closed, message, read_frame, still_served
from tests.server.test_transport import EchoHandler, ServerThread
from tests.support.pinlater_server import ServerProcess
from tests.support.thrift_client import connect
from tests.support.wait import wait_for
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TApplicationException, TMessageType
from thrift.transport import TTransport
from thriftpy2.protocol.binary import TBinaryProtocol as TPyBinaryProtocol
from thriftpy2.transport.memory import TMemoryBuffer

from pinlater.errors import ErrorCode
from pinlater.idl import idl
from pinlater.server.connection import Connection
from pinlater.server.dispatch import MAX_METHOD_NAME
from pinlater.server.handler import MAX_ACKS, MAX_CHECKPOINT, MAX_ENQUEUE, MAX_LOOKUP
from pinlater.server.transport import peer_connection_cap

Start = Callable[..., ServerProcess]

VERSION_1 = 0x80010000
ONEWAY = 4
#: A getQueueNames argument struct holding RequestContext(source="t"), then STOP.
CONTEXT_ARGS = b"\x0c\x00\x01" + b"\x0b\x00\x01" + struct.pack("!i", 1) + b"t" + b"\x00" + b"\x00"


@pytest.fixture
def api_for(thrift_gen: tuple[ModuleType, ModuleType]) -> Iterator[Callable[[ServerProcess], Api]]:
    transports: list[Any] = []

    def open_(srv: ServerProcess) -> Api:
        client, transport = connect("127.0.0.1", srv.port)
        transports.append(transport)
        return Api(client, thrift_gen[1])

    yield open_
    for transport in transports:
        transport.close()


def stats(server: ServerProcess) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/stats.txt", timeout=5) as response:
        text = response.read().decode()
    return dict(line.strip().split(": ", 1) for line in text.splitlines() if ": " in line)


def gauge(server: ServerProcess, name: str) -> int:
    return int(float(stats(server)[name]))


def log_lines(server: ServerProcess, needle: str) -> list[str]:
    return [line for line in list(server.lines) if needle in line]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def raw(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def get_queue_names_call(seqid: int, mtype: int = 1) -> bytes:
    name = b"getQueueNames"
    return struct.pack("!Ii", VERSION_1 | mtype, len(name)) + name + struct.pack("!i", seqid) + CONTEXT_ARGS


def lookup_nothing_call(seqid: int) -> bytes:
    """A lookupJobs call of no descriptor (answered at once, touching no store): a method whose
    calls may fill a frame, unlike getQueueNames' (``PinLaterHandler.ARGUMENT_BYTES``)."""
    name = b"lookupJobs"
    request = b"\x0c\x00\x02" + b"\x0f\x00\x01\x0b" + struct.pack("!i", 0) + b"\x00"
    return (
        struct.pack("!Ii", VERSION_1 | 1, len(name))
        + name
        + struct.pack("!i", seqid)
        + CONTEXT_ARGS[:-1]
        + request
        + b"\x00"
    )


# -- the open-files limit -----------------------------------------------------------------------


class LimitedServer(ServerProcess):
    """``pinlater serve`` started under ``prlimit --nofile=N:N`` (it cannot raise its own limit)."""

    def __init__(self, data_dir: Path, nofile: int, properties: Path) -> None:
        super().__init__(data_dir, properties=properties)
        self.nofile = nofile

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--", *super().command()]


@pytest.fixture
def limited_server(tmp_path: Path) -> Iterator[Callable[..., LimitedServer]]:
    started: list[LimitedServer] = []

    def start(nofile: int, **properties: Any) -> LimitedServer:
        props = tmp_path / f"limited-{len(started)}.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        server = LimitedServer(tmp_path / f"data-{len(started)}", nofile, props)
        started.append(server)
        return server.start()  # type: ignore[return-value]

    yield start
    for server in started:
        server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and uses prlimit")
@pytest.mark.parametrize("reserve", ["0", "default"])
def test_at_the_open_files_limit_the_server_idles_logs_little_and_recovers(
    limited_server: Callable[..., LimitedServer], thrift_gen: tuple[ModuleType, ModuleType], reserve: str
) -> None:
    """With no reserve the process runs out of descriptors and accept() fails with EMFILE: it
    backs off. With the default reserve the connection cap refuses first and accept never fails."""
    nofile = 192
    props = {} if reserve == "default" else {"OPEN_FILES_RESERVE": reserve}
    server = limited_server(nofile, **props)
    cap = nofile if reserve == "0" else nofile // 2
    assert log_lines(server, f"at most {cap} connections (MAX_CONNECTIONS 10000, open files limit {nofile}")
    assert log_lines(server, f"{peer_connection_cap(cap, None)} from one host (MAX_CONNECTIONS_PER_PEER)")

    clients = [raw(server) for _ in range(3 * nofile)]  # the kernel's backlog takes them all
    try:
        if reserve == "0":
            # The cap is the limit itself here, so whichever the burst meets first: accept() fails
            # with EMFILE (usually: the process has other descriptors), or the cap refuses (its
            # count includes connections still being attached, which can run ahead of them).
            wait_for(
                lambda: log_lines(server, "Too many open files") or log_lines(server, "refusing connection"),
                30,
                what="accept() to hit EMFILE, or the cap to refuse",
            )
        else:
            wait_for(lambda: log_lines(server, "refusing connection"), 15, what="the cap to refuse")
        cpu_before, lines_before = cpu_seconds(server.pid), len(server.lines)
        chars_before = sum(len(line) for line in list(server.lines))
        time.sleep(3.0)  # a measuring window: what the server does while the flood waits
        cpu = cpu_seconds(server.pid) - cpu_before
        logged = list(server.lines)[lines_before:]
        assert cpu < 0.6, f"the server used {cpu:.2f}s of CPU in 3s at the open-files limit"
        assert len(logged) <= 3, f"{len(logged)} lines logged in 3s:\n" + "\n".join(logged[:10])
        assert sum(len(line) for line in list(server.lines)) - chars_before < 2000
        if reserve == "default":
            assert not log_lines(server, "accept failed"), "the cap should refuse before the limit is hit"
    finally:
        for sock in clients:
            sock.close()

    def served_on_a_new_connection() -> bool:
        # A new connection at each try: one opened while the server still counts the flood's
        # closed sockets is refused (closed) by the cap, and its transport stays broken.
        client, transport = connect("127.0.0.1", server.port)
        try:
            return client.getQueueNames(Api(client, thrift_gen[1]).ctx) is not None
        finally:
            transport.close()

    assert wait_for(served_on_a_new_connection, 30, interval=0.1, what="a new client to be served")


# -- memory held for unfinished frames ----------------------------------------------------------


def test_a_frame_that_does_not_arrive_in_time_closes_its_connection(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    server = start_server(properties={"FRAME_TIMEOUT_SECONDS": "0.5"})
    api = api_for(server)
    slow = raw(server)
    slow.sendall(struct.pack("!i", 100_000) + b"x" * 5_000)  # 5 KB of a 100 KB frame, then nothing
    still_served(api)
    assert is_closed(slow), "the slow frame's connection should be closed"
    assert wait_for(lambda: log_lines(server, "frame incomplete"), what="the timeout to be logged")
    assert gauge(server, "pending_frame_bytes") == 0
    assert gauge(server, "frame_timeouts") == 1
    still_served(api)
    slow.close()


def test_unfinished_frames_share_one_budget_and_the_one_past_it_is_closed(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    mib = 1024 * 1024
    server = start_server(properties={"MAX_FRAME_BYTES": 4 * mib, "MAX_PENDING_FRAME_BYTES": 6 * mib})
    api = api_for(server)
    # A: a real call padded to 4 MiB (bytes after the arguments' STOP are ignored), 3 MiB sent.
    call = lookup_nothing_call(7)
    a_payload = call + b"\x00" * (4 * mib - len(call))
    a = raw(server)
    a.sendall(struct.pack("!i", len(a_payload)) + a_payload[: 3 * mib])
    wait_for(lambda: gauge(server, "pending_frame_bytes") >= 3 * mib, what="A's bytes to be held")
    still_served(api)

    b = raw(server)  # B: 3.5 MiB of another 4 MiB frame passes the 6 MiB budget
    try:
        b.sendall(struct.pack("!i", 4 * mib) + b"y" * (7 * mib // 2))
    except OSError:  # closed under the send: as expected
        pass
    assert is_closed(b), "the connection whose frame passes the budget should be closed"
    assert gauge(server, "frames_over_budget") == 1
    wait_for(lambda: log_lines(server, "MAX_PENDING_FRAME_BYTES 6291456"), what="the over-budget line in the log")
    still_served(api)

    a.sendall(a_payload[3 * mib :])  # A was never touched: its frame completes and is answered
    reply = read_frame(a)
    assert struct.unpack_from("!Ii", reply, 0)[0] & 0xFF == 2  # REPLY
    assert gauge(server, "pending_frame_bytes") == 0
    a.close()
    b.close()


def test_the_host_holding_most_frame_bytes_goes_first(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """One host (127.0.0.2) holds 5 of the 6 MiB budget in two unfinished frames; another's
    (127.0.0.1) frame of 2 MiB takes the total past it: the first host's bigger frame goes, where
    the other's connection was closed, and the other's call is answered."""
    mib = 1024 * 1024
    server = start_server(properties={"MAX_FRAME_BYTES": 4 * mib, "MAX_PENDING_FRAME_BYTES": 6 * mib})
    api = api_for(server)
    hogs = []
    for sent in (3 * mib, 2 * mib):
        hog = socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=("127.0.0.2", 0))
        hog.sendall(struct.pack("!i", 4 * mib) + b"h" * sent)
        hogs.append(hog)
    wait_for(lambda: gauge(server, "pending_frame_bytes") >= 5 * mib, what="the hog's bytes to be held")
    call = lookup_nothing_call(9)
    payload = call + b"\x00" * (2 * mib - len(call))
    other = raw(server)
    other.sendall(struct.pack("!i", len(payload)) + payload)
    reply = read_frame(other)
    assert struct.unpack_from("!Ii", reply, 0)[0] & 0xFF == 2 and reply_seqid(reply) == 9, "answered"
    assert is_closed(hogs[0]), "the hog's bigger frame went"
    assert gauge(server, "frames_over_budget") == 1
    (line,) = wait_for(lambda: log_lines(server, "its host holding more"), what="the eviction to be logged")
    assert "127.0.0.2" in line, line
    assert gauge(server, "pending_frame_bytes") >= 2 * mib, "the hog's other frame was left alone"
    for sock in (*hogs, other):
        sock.close()
    still_served(api)


def test_idle_connections_are_closed_and_busy_ones_are_not(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    server = start_server(properties={"SERVER_CONN_MAX_IDLE_TIME_MINUTES": "0.01"})  # 0.6 s
    busy = api_for(server)
    idle = raw(server)
    idle.sendall(frame(get_queue_names_call(1)))
    read_frame(idle)
    idle.settimeout(0.05)
    closed = False
    calls = 0
    deadline = time.monotonic() + 20
    while not closed and time.monotonic() < deadline:
        still_served(busy)  # a call every 50 ms keeps this one open throughout
        calls += 1
        try:
            closed = idle.recv(1) == b""
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed = True
    assert closed, "the idle connection should have been closed"
    assert calls >= 5
    assert gauge(server, "connections_closed_idle") == 1
    still_served(busy)
    idle.close()


def encoded_call(service: ModuleType, name: str, seqid: int, **args: Any) -> bytes:
    """A CALL of ``name`` with the given arguments, built by the generated code."""
    buf = TTransport.TMemoryBuffer()
    proto = TBinaryProtocol.TBinaryProtocol(buf)
    proto.writeMessageBegin(name, TMessageType.CALL, seqid)
    getattr(service, f"{name}_args")(**args).write(proto)
    proto.writeMessageEnd()
    value: bytes = buf.getvalue()
    return value


def long_poll_call(thrift_gen: tuple[ModuleType, ModuleType], wait_ms: int) -> bytes:
    """A dequeueJobs CALL (seqid 1) of one job of queue "lp" that waits up to ``wait_ms``."""
    service, t = thrift_gen
    request = t.PinLaterDequeueRequest(queueName="lp", limit=1, waitMillis=wait_ms)
    return encoded_call(service, "dequeueJobs", 1, context=t.RequestContext(source="t"), request=request)


def padded_call(seqid: int, size: int) -> bytes:
    """A framed lookupJobs call padded to ``size`` bytes (bytes after the arguments are ignored)."""
    call = lookup_nothing_call(seqid)
    return frame(call + b"\x00" * (size - len(call)))


def peak_rss(pid: int) -> int:
    """The process's peak resident set so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def send_in_background(sock: socket.socket, frames: Iterator[bytes]) -> tuple[threading.Thread, list[BaseException]]:
    """Send ``frames`` on ``sock`` from a thread (sendall blocks while the server does not read)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for data in frames:
                sock.sendall(data)
        except OSError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_whole_frames_queued_behind_a_long_poll_count_against_the_budget(
    start_server: Start, api_for: Callable[[ServerProcess], Api], thrift_gen: tuple[ModuleType, ModuleType]
) -> None:
    """40 frames of 4 MiB pipelined behind a long poll: before, the server read them all (64
    frames was the only bound) and held 160 MiB with pending_frame_bytes at 0."""
    mib = 1024 * 1024
    server = start_server(properties={"MAX_FRAME_BYTES": 4 * mib})
    api = api_for(server)
    api.create("lp")
    poll = long_poll_call(thrift_gen, 5000)
    peak_before = peak_rss(server.pid)
    sock = raw(server)
    sock.sendall(frame(poll))
    wait_for(lambda: gauge(server, "requests_in_flight") >= 1, what="the long poll to be waiting")
    sender, errors = send_in_background(sock, (padded_call(seqid, 4 * mib) for seqid in range(2, 42)))
    # Before, the server read all 40 (64 frames was the only bound) and the gauge stayed at 0.
    highest = wait_for(
        lambda: (n := gauge(server, "pending_frame_bytes")) >= 4 * mib and n, what="the queued frames to be counted"
    )
    while sender.is_alive():  # until the long poll ends and the frames are served
        highest = max(highest, gauge(server, "pending_frame_bytes"))
        still_served(api)  # another client is served throughout
    sender.join(60)
    assert not errors, errors
    # One connection holds at most about two frames (the one that reaches max_frame_bytes, and
    # the one before it) and part of a third; 40 were sent.
    assert highest <= 9 * mib, highest
    assert [reply_seqid(read_frame(sock)) for _ in range(41)] == list(range(1, 42))
    wait_for(lambda: gauge(server, "pending_frame_bytes") == 0, what="the budget to be released")
    grown = peak_rss(server.pid) - peak_before
    assert grown < 80 * mib, f"the server's peak RSS grew by {grown // mib} MiB"
    still_served(api)
    sock.close()


def test_a_peer_that_never_reads_its_replies_is_closed_and_its_bytes_released(
    start_server: Start, api_for: Callable[[ServerProcess], Api], thrift_gen: tuple[ModuleType, ModuleType]
) -> None:
    """Calls with big replies, never read, then big frames: the worker waits for the peer to
    drain, so before this was bounded only by 64 frames and held forever."""
    mib = 1024 * 1024
    service, t = thrift_gen
    server = start_server(properties={"MAX_FRAME_BYTES": 4 * mib, "FRAME_TIMEOUT_SECONDS": "1"})
    api = api_for(server)
    api.create("big")
    (descriptor,) = api.enqueue("big", api.job(b"b" * (512 * 1024)))
    lookup = encoded_call(
        service,
        "lookupJobs",
        1,
        context=t.RequestContext(source="t"),
        request=t.PinLaterLookupJobRequest(jobDescriptors=[descriptor], includeBody=True),
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", server.port))
    frames = [frame(lookup)] * 32 + [padded_call(seqid, 4 * mib) for seqid in range(2, 42)]
    peak_before = peak_rss(server.pid)
    sender, _ = send_in_background(sock, iter(frames))  # sendall fails once the server resets us
    highest = 0

    def closed_for_stalling() -> bool:
        nonlocal highest
        highest = max(highest, gauge(server, "pending_frame_bytes"))
        still_served(api)
        return gauge(server, "connections_closed_write_stall") == 1

    wait_for(closed_for_stalling, 30, what="the stalled peer to be closed")
    assert highest <= 9 * mib, highest
    grown = peak_rss(server.pid) - peak_before
    assert grown < 80 * mib, f"the server's peak RSS grew by {grown // mib} MiB"
    (line,) = wait_for(lambda: log_lines(server, "has not read its replies"), what="the stall to be logged")
    assert "127.0.0.1" in line and "FRAME_TIMEOUT_SECONDS 1" in line, line
    wait_for(lambda: gauge(server, "pending_frame_bytes") == 0, what="the budget to be released")
    sender.join(60)
    assert not sender.is_alive()
    drain_until_closed(sock)  # times out if the server left it open
    still_served(api)
    sock.close()


def three_big_bodies(
    start: Start, api_for: Callable[[ServerProcess], Api], queue: str
) -> tuple[ServerProcess, Api, list[str]]:
    """A server of 24 MiB budgets, and the descriptors of three 4 MiB jobs of ``queue`` on it."""
    mib = 1024 * 1024
    server = start(properties={"MAX_FRAME_BYTES": 16 * mib, "MAX_PENDING_FRAME_BYTES": 24 * mib})
    api = api_for(server)
    api.create(queue)
    return server, api, [api.enqueue(queue, api.job(bytes([65 + i]) * (4 * mib)))[0] for i in range(3)]


def test_replies_unread_by_many_peers_share_one_budget_and_the_one_past_it_is_closed(
    start_server: Start, api_for: Callable[[ServerProcess], Api], thrift_gen: tuple[ModuleType, ModuleType]
) -> None:
    """Peers that each ask for a 12 MiB lookup and read nothing: the replies they leave unread
    count against MAX_PENDING_FRAME_BYTES (of their own, apart from frames), and the connection
    whose reply passes it is aborted, its bytes freed; the others wait as before. Each peer used
    to hold its reply until the write stall timeout (300 of them held 3 GB)."""
    mib = 1024 * 1024
    service, t = thrift_gen
    server, api, descriptors = three_big_bodies(start_server, api_for, "unread")
    lookup = frame(
        encoded_call(
            service,
            "lookupJobs",
            1,
            context=t.RequestContext(source="t"),
            request=t.PinLaterLookupJobRequest(jobDescriptors=descriptors, includeBody=True),
        )
    )
    peers = []
    for _ in range(5):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(lookup)
        peers.append(sock)
    wait_for(lambda: gauge(server, "replies_over_budget") >= 1, 30, what="a peer past the budget to be aborted")
    assert gauge(server, "unread_reply_bytes") <= 24 * mib
    (line, *_) = wait_for(lambda: log_lines(server, "its unread replies"), what="the abort to be logged")
    assert "127.0.0.1" in line and "MAX_PENDING_FRAME_BYTES 25165824" in line, line
    still_served(api)
    aborted = [sock for sock in peers if ends_closed(sock)]  # (reads the others' replies whole)
    assert 1 <= len(aborted) == gauge(server, "replies_over_budget") < len(peers)
    for sock in peers:
        sock.close()
    wait_for(lambda: gauge(server, "unread_reply_bytes") == 0, what="the unread bytes to be released")
    still_served(api)


def test_the_host_holding_most_unread_replies_goes_first(
    start_server: Start, api_for: Callable[[ServerProcess], Api], thrift_gen: tuple[ModuleType, ModuleType]
) -> None:
    """One host (127.0.0.2) asks for big replies on three connections and reads none, holding most
    of the budget of unread replies; another (127.0.0.1) asks for one that backs up too. The
    budget is passed with the second's: the first host's connection with most unread goes, where
    the second's was aborted, and the second reads its whole reply."""
    mib = 1024 * 1024
    service, t = thrift_gen
    server, api, descriptors = three_big_bodies(start_server, api_for, "hog")

    def lookup(seqid: int, count: int) -> bytes:
        request = t.PinLaterLookupJobRequest(jobDescriptors=descriptors[:count], includeBody=True)
        return frame(encoded_call(service, "lookupJobs", seqid, context=t.RequestContext(source="t"), request=request))

    def unread_peer(source: str, call: bytes) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(30)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(call)
        return sock

    hogs = [unread_peer("127.0.0.2", lookup(1, 2)) for _ in range(3)]
    wait_for(lambda: gauge(server, "unread_reply_bytes") >= 12 * mib, 30, what="the hog's replies to back up")
    assert gauge(server, "replies_over_budget") == 0
    victim = unread_peer("127.0.0.1", lookup(7, 3))
    wait_for(lambda: gauge(server, "replies_over_budget") >= 1, 30, what="a connection past the budget to go")
    (line, *_) = wait_for(lambda: log_lines(server, "its unread replies"), what="the abort to be logged")
    assert "127.0.0.2" in line, line
    victim.settimeout(30)
    reply = read_frame(victim)
    assert reply_seqid(reply) == 7 and len(reply) > 12 * mib, "the other host's reply came whole"
    assert sum(ends_closed(sock) for sock in hogs) >= 1
    assert gauge(server, "replies_over_budget") == 1
    for sock in (*hogs, victim):
        sock.close()
    still_served(api)


def ends_closed(sock: socket.socket, quiet: float = 1.0) -> bool:
    """Read until the server closes or resets the connection (True) or sends nothing for
    ``quiet`` seconds (False)."""
    sock.settimeout(quiet)
    try:
        while sock.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def drain_until_closed(sock: socket.socket) -> None:
    """Read whatever replies were delivered until the server's close (EOF or reset)."""
    if not ends_closed(sock, 10):
        raise TimeoutError("the server left the connection open")


def reply_seqid(reply: bytes) -> int:
    (name_length,) = struct.unpack_from("!i", reply, 4)
    seqid: int = struct.unpack_from("!i", reply, 8 + name_length)[0]
    return seqid


def test_an_error_in_the_timeout_sweep_is_logged_and_the_sweep_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """In process, to inject the fault: before, one exception ended the sweep task silently and no
    frame or idle timeout was enforced again for the life of the process."""
    calls: list[float] = []
    frame_timed_out = Connection.frame_timed_out

    def fails_once(self: Connection, now: float) -> None:
        calls.append(now)
        if len(calls) == 1:
            raise RuntimeError("injected sweep fault")
        frame_timed_out(self, now)

    monkeypatch.setattr(Connection, "frame_timed_out", fails_once)
    server = ServerThread(EchoHandler(), frame_timeout_seconds=0.2)
    try:
        for _ in range(2):
            slow = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            slow.sendall(struct.pack("!i", 1000) + b"x" * 10)
            assert is_closed(slow), "the late frame's connection should be closed"
            slow.close()
        assert len(calls) >= 3
        assert "timeout sweep failed on connection from ('127.0.0.1'" in caplog.text
        assert "RuntimeError: injected sweep fault" in caplog.text  # with its traceback
    finally:
        server.close()


# -- requests that do not fit the contract ------------------------------------------------------


def test_a_call_without_its_request_is_a_protocol_error_logged_in_one_line(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    server = start_server()
    api = api_for(server)
    methods = [
        "enqueueJobs",
        "dequeueJobs",
        "ackDequeuedJobs",
        "checkpointJobs",
        "lookupJobs",
        "getJobCount",
        "scanJobs",
        "retryFailedJobs",
        "deleteJobs",
    ]
    for method in methods:
        with pytest.raises(TApplicationException) as info:
            getattr(api.c, method)(api.ctx, None)
        assert info.value.type == TApplicationException.PROTOCOL_ERROR
        assert info.value.message == f"missing argument {method}.request"
    with pytest.raises(TApplicationException) as info:
        api.c.getQueueNames(None)
    assert (info.value.type, info.value.message) == (
        TApplicationException.PROTOCOL_ERROR,
        "missing argument getQueueNames.context",
    )
    still_served(api)  # the same connection
    assert not log_lines(server, "Traceback") and not log_lines(server, "AttributeError")
    refused = log_lines(server, "missing argument")
    assert len(refused) == 1, refused  # the rest were within the rate limit's interval
    assert "enqueueJobs (seqid" in refused[0]


def test_a_oneway_message_is_served_and_never_answered(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    server = start_server()
    api = api_for(server)
    sock = raw(server)
    name = b"createQueue"
    args = CONTEXT_ARGS[:-1] + b"\x0b\x00\x02" + struct.pack("!i", 6) + b"oneway" + b"\x00"
    oneway_create = struct.pack("!Ii", VERSION_1 | ONEWAY, len(name)) + name + struct.pack("!i", 1) + args
    unknown = message("noSuchMethod", 2).replace(
        struct.pack("!I", VERSION_1 | 1), struct.pack("!I", VERSION_1 | ONEWAY)
    )
    sock.sendall(frame(oneway_create) + frame(unknown) + frame(get_queue_names_call(3, ONEWAY)))
    sock.sendall(frame(get_queue_names_call(4)))
    reply = read_frame(sock)
    assert struct.unpack_from("!I", reply, 0)[0] & 0xFF == 2  # the first reply is the CALL's
    assert reply[8 + len(b"getQueueNames") : 12 + len(b"getQueueNames")] == struct.pack("!i", 4)
    assert "oneway" in api.c.getQueueNames(api.ctx), "the oneway createQueue was served"
    sock.close()


def test_scan_jobs_limit_is_capped(start_server: Start, api_for: Callable[[ServerProcess], Api]) -> None:
    server = start_server(properties={"MAX_SCAN_LIMIT": "5"})
    api = api_for(server)
    api.create("scanned")
    api.enqueue("scanned", *(api.job(b"j%d" % i) for i in range(8)))
    page = api.scan("scanned", 0, limit=2**31 - 1)
    assert len(page.scannedJobs) == 5 and page.continuation != "-1", "capped, and the rest is a page away"
    rest = api.scan("scanned", 0, limit=2**31 - 1, continuation=page.continuation)
    assert len(rest.scannedJobs) == 3 and rest.continuation == "-1"
    assert len(api.scan("scanned", 0, limit=3).scannedJobs) == 3


def test_a_bad_queue_name_is_not_echoed_whole(start_server: Start, api_for: Callable[[ServerProcess], Api]) -> None:
    """A queue name of control characters, a frame long, came back whole in the error, four times
    its size (each as ``\x01``), built on the event loop."""
    api = api_for(start_server())
    for call in (lambda name: api.create(name), lambda name: api.dequeue(name)):
        with pytest.raises(api.t.PinLaterException) as info:
            call("\x01" * (1 << 19))  # (a createQueue call takes 1 MiB at most: ARGUMENT_BYTES)
        assert info.value.errorCode == ErrorCode.QUEUE_NAME_INVALID
        assert len(info.value.message) < 500 and "(524288 characters)" in info.value.message


def test_new_queues_past_the_cap_are_refused_and_existing_ones_served(
    start_server: Start, api_for: Callable[[ServerProcess], Api], ttypes: ModuleType
) -> None:
    server = start_server(properties={"MAX_QUEUES": "3", "ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD)})
    api = api_for(server)
    for name in ("q1", "q2", "q3"):
        api.create(name)
    api.create("q1")  # one that exists: created again, as a client may repeat it
    with pytest.raises(ttypes.PinLaterException) as refused:
        api.create("q4")
    assert refused.value.errorCode == 500
    assert "q4 not created: the shards hold 3 queues, at most 3 (MAX_QUEUES)" in refused.value.message
    assert sorted(api.c.getQueueNames(api.ctx)) == ["q1", "q2", "q3"]
    [job] = api.enqueue("q3", api.job(b"still served"))
    assert list(api.dequeue("q3", limit=1).jobs) == [job]
    api.c.deleteQueue(api.ctx, "q2", ADMIN_PASSWORD)
    api.create("q4")
    assert sorted(api.c.getQueueNames(api.ctx)) == ["q1", "q3", "q4"]
    assert len(log_lines(server, "queue q1 created")) == 1, "creating one that exists logs nothing"


def test_acks_of_made_up_queues_make_no_counters(
    start_server: Start, api_for: Callable[[ServerProcess], Api], ttypes: ModuleType
) -> None:
    """Acks naming only shards the server does not have are ignored whatever the queue (no store
    is asked, so nothing says the queue does not exist): each made-up queue name made counters
    for good, in /stats.txt, /metrics and the rate history (some 30 KB a name, from a request of
    a hundred bytes), a dequeue carrying them too, though it failed."""
    server = start_server()
    api = api_for(server)
    for i in range(20):
        api.ack(f"junk{i}", ok=[f"junk{i}:snope:p1:1"], failed=[f"junk{i}:snope:p1:2"])
        acks = api.ack_request(f"junkd{i}", ok=[f"junkd{i}:snope:p1:1"])
        with pytest.raises(ttypes.PinLaterException) as refused:
            api.dequeue(f"junkd{i}", limit=1, jobAckRequest=acks)
        assert refused.value.errorCode == 413  # QUEUE_NOT_FOUND
    assert not [name for name in stats(server) if "junk" in name]
    # A queue that exists still counts its acks, those of a shard it lacks among them.
    api.create("real")
    [job] = api.enqueue("real", api.job(b"x"))
    assert list(api.dequeue("real", limit=1).jobs) == [job]
    api.ack("real", ok=[job, "real:snope:p1:9"])
    wait_for(lambda: stats(server).get("real_ack_succeeded") == "2", 10, what="the acks counted")


def test_a_callers_texts_are_cut_in_log_lines_and_wrong_passwords_throttled(
    start_server: Start, thrift_gen: tuple[ModuleType, ModuleType]
) -> None:
    """A source and a request id are the peer's, up to a frame long: a 1 MiB source made a 1 MiB
    line at every create, delete or retry (4 MiB of control characters). A wrong deleteQueue
    password wrote a line a guess."""
    server = start_server(properties={"ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD)})
    client, transport = connect("127.0.0.1", server.port)
    try:
        api = Api(client, thrift_gen[1], source="\x01" * (1 << 19))  # (a createQueue call takes 1 MiB at most)
        api.create("logged")
        for _ in range(20):
            with pytest.raises(thrift_gen[1].PinLaterException):
                api.c.deleteQueue(api.ctx, "logged", "guess")
    finally:
        transport.close()
    wait_for(lambda: log_lines(server, "wrong password"), 10, what="the wrong-password line")
    [created] = wait_for(lambda: log_lines(server, "queue logged created"), 10, what="the create line")
    assert len(created) < 1000 and "... (524288 characters)" in created, created[:300]
    assert len(log_lines(server, "wrong password")) == 1, "one line for the 20 guesses within 5 s"


def test_password_guesses_over_thrift_are_bounded_apart_from_the_admin_ports(
    start_server: Start, thrift_gen: tuple[ModuleType, ModuleType]
) -> None:
    """deleteQueue checked any number of passwords (43,600 a second on one connection) while the
    admin port refused an address past 10 wrong ones a minute: it now counts them too, in a
    tally of its own, and past the allowance refuses the address, the right password unchecked."""
    import json

    from pinlater.server.guesses import WRONG_PASSWORDS_ALLOWED

    server = start_server(properties={"ADMIN_PASSWORD_HASH": original_password_hash(ADMIN_PASSWORD)})
    client, transport = connect("127.0.0.1", server.port)
    try:
        api = Api(client, thrift_gen[1])
        api.create("kept")
        for _ in range(WRONG_PASSWORDS_ALLOWED):
            with pytest.raises(thrift_gen[1].PinLaterException) as wrong:
                api.c.deleteQueue(api.ctx, "kept", "guess")
            assert wrong.value.errorCode == ErrorCode.PASSWORD_INVALID and "invalid" in wrong.value.message
        with pytest.raises(thrift_gen[1].PinLaterException) as refused:
            api.c.deleteQueue(api.ctx, "kept", ADMIN_PASSWORD)
        assert refused.value.errorCode == ErrorCode.PASSWORD_INVALID
        assert "too many wrong admin passwords" in refused.value.message
        assert api.c.getQueueNames(api.ctx) == {"kept"}, "the right password was not even looked at"
    finally:
        transport.close()
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.admin_port}/api/retry",
        data=json.dumps({"queue": "kept", "password": ADMIN_PASSWORD}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as admin:  # (a tally of its own: operators not locked out)
        assert admin.status == 200


def test_a_peer_gone_mid_reply_costs_one_line_naming_it(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """Pipelined calls answered without touching the store (unknown methods), then a reset: the
    replies after it would each have made asyncio warn, without saying whose they were. The
    replies (each names the method, of the longest name taken, twice) are more than the peer's
    small receive window takes, so the server is still writing when the reset comes, however
    fast its loop."""
    server = start_server()
    api = api_for(server)
    name = "noSuchMethod" + "x" * (MAX_METHOD_NAME - len("noSuchMethod"))
    batch = b"".join(frame(message(name, seqid)) for seqid in range(1000))
    for _ in range(30):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(batch)
        sock.close()  # RST: the server is still writing
    still_served(api)
    gone = wait_for(lambda: log_lines(server, "went away before its replies were written"), what="the peer-gone line")
    assert "127.0.0.1" in gone[0], gone
    assert len(log_lines(server, "went away before its replies were written")) <= 2, gone
    assert not log_lines(server, "socket.send() raised exception")


def oneway_call(name: str, seqid: int, args: Any) -> bytes:
    """A strict ONEWAY message of ``name`` with ``args`` (an ``idl.PinLater.<name>_args``)."""
    buf = TMemoryBuffer()
    proto = TPyBinaryProtocol(buf)
    proto.write_message_begin(name, ONEWAY, seqid)
    proto.write_struct(args)
    proto.write_message_end()
    data: bytes = buf.getvalue()
    return data


def test_a_oneway_hot_call_is_served_and_never_answered(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """The hot methods (decoded by the extension) follow the oneway rule too: served, and never
    answered, not even when refused (a missing body, a priority out of range)."""
    server = start_server()
    api = api_for(server)
    api.create("oneway")
    ctx = idl.RequestContext(source="t")

    def enqueue(*jobs: Any) -> Any:
        request = idl.PinLaterEnqueueRequest(queueName="oneway", jobs=list(jobs))
        return idl.PinLater.enqueueJobs_args(context=ctx, request=request)

    sock = raw(server)
    calls = [
        oneway_call("enqueueJobs", 1, enqueue(idl.PinLaterJob(body=b"a"), idl.PinLaterJob(body=b"b"))),
        oneway_call("enqueueJobs", 2, enqueue(idl.PinLaterJob(priority=1))),  # no body: refused
        oneway_call("enqueueJobs", 3, enqueue(idl.PinLaterJob(body=b"c", priority=99))),  # rejected
    ]
    sock.sendall(b"".join(frame(c) for c in calls) + frame(get_queue_names_call(4)))
    reply = read_frame(sock)
    assert reply[8 + len(b"getQueueNames") : 12 + len(b"getQueueNames")] == struct.pack("!i", 4)
    wait_for(lambda: api.count("oneway", 0) == 2, what="the oneway enqueue's two jobs")
    [descriptor] = api.dequeue("oneway", limit=1).jobs
    done = [idl.PinLaterJobAckInfo(jobDescriptor=descriptor)]
    acks = idl.PinLater.ackDequeuedJobs_args(
        context=ctx, request=idl.PinLaterJobAckRequest(queueName="oneway", jobsSucceeded=done)
    )
    sock.sendall(frame(oneway_call("ackDequeuedJobs", 5, acks)))
    sock.sendall(frame(get_queue_names_call(6)))
    reply = read_frame(sock)
    assert reply[8 + len(b"getQueueNames") : 12 + len(b"getQueueNames")] == struct.pack("!i", 6)
    wait_for(lambda: api.count("oneway", 2) == 1, what="the oneway ack")
    assert api.count("oneway", 0) == 1
    sock.close()


def checkpoint_of_empty_requests(seqid: int, n: int) -> bytes:
    """A checkpointJobs call whose request lists ``n`` empty structs: one byte each on the wire."""
    request = b"\x0b\x00\x01" + struct.pack("!i", 1) + b"q" + b"\x0f\x00\x02" + struct.pack("!bi", 12, n) + b"\x00" * n
    return message("checkpointJobs", seqid, CONTEXT_ARGS[:-1] + b"\x0c\x00\x02" + request + b"\x00" + b"\x00")


def test_a_general_call_that_would_decode_into_too_many_objects_is_refused(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """An element can take one byte on the wire (an empty struct) and a hundred or more decoded: a
    general call past ``max_objects`` is refused before it is decoded, the connection kept; one
    within it is decoded (and refused here for its empty requests' missing fields)."""
    server = start_server()
    api = api_for(server)
    sock = raw(server)
    n = 150_000  # 150,006 values (the empty structs, the list, two structs, two strings and the arguments)
    # in about 150 KB: over 100,000 and one per 8 bytes
    sock.sendall(frame(checkpoint_of_empty_requests(1, n)))
    reply = read_frame(sock)
    assert reply_seqid(reply) == 1 and b"checkpointJobs call too big to decode: 150006 values" in reply
    sock.sendall(frame(checkpoint_of_empty_requests(2, 50_000)))  # within it: decoded, then refused
    reply = read_frame(sock)
    assert reply_seqid(reply) == 2 and b"missing required field" in reply
    sock.sendall(frame(get_queue_names_call(3)))
    assert reply_seqid(read_frame(sock)) == 3, "the connection is still served"
    still_served(api)
    sock.close()


def test_a_lookup_whose_bodies_would_pass_the_frame_limit_is_refused(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """A reply past MAX_FRAME_BYTES is refused, naming the limit: no client with that frame limit
    could read it, and the server held it whole while a peer that did not read it was written to
    (20 jobs of 15 MiB: 300 MB a lookup). Fewer jobs, or no bodies, are answered; statuses count
    too."""
    server = start_server("--max-frame-bytes", "8192")
    api = api_for(server)
    api.create("big")
    descriptors = [api.enqueue("big", api.job(b"%d" % i * 3000))[0] for i in range(3)]
    with pytest.raises(api.t.PinLaterException, match="more than a reply may \\(8192, MAX_FRAME_BYTES\\)"):
        api.lookup(*descriptors, body=True)
    assert set(api.lookup(*descriptors)) == set(descriptors)
    assert set(api.lookup(*descriptors[:2], body=True)) == set(descriptors[:2])
    statuses = [api.enqueue("big", api.job(b"x", customStatus="s" * 3000))[0] for _ in range(3)]
    with pytest.raises(api.t.PinLaterException, match="more than a reply may"):
        api.lookup(*statuses)
    still_served(api)


def test_a_scan_page_ends_where_its_reply_would_pass_the_frame_limit(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """10,000 jobs of long statuses and keys made scan replies of 50 MB and more, past what a
    client with our frame limit reads: a page now ends before the job that would pass the limit,
    and the scan goes on from there, every job returned once."""
    api = api_for(start_server("--max-frame-bytes", "8192"))
    api.create("long")
    made = {api.enqueue("long", api.job(b"x", customStatus="s" * 3000))[0] for _ in range(7)}
    pages: list[list[str]] = []
    continuation = "0"  # CONTINUATION_START; "-1" is its end
    while continuation != "-1":
        request = api.t.PinLaterScanJobsRequest(
            queueName="long", jobState=api.t.PinLaterJobState.PENDING, limit=100, continuation=continuation
        )
        reply = api.c.scanJobs(api.ctx, request)
        pages.append([job.jobDescriptor for job in reply.scannedJobs])
        continuation = reply.continuation
        assert len(pages) < 20, "the scan ends"
    assert all(1 <= len(page) <= 2 for page in pages if page), pages
    assert sorted(d for page in pages for d in page) == sorted(made)
    still_served(api)


def test_a_lookup_of_more_descriptors_than_it_takes_is_refused_unread(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """400,000 descriptors took 5 to 7 s of reads before the reply's size refused them."""
    api = api_for(start_server())
    api.create("many")
    (descriptor,) = api.enqueue("many", api.job(b"x"))
    many = [descriptor, *(f"many:s1:p1:{n}" for n in range(10**6, 10**6 + MAX_LOOKUP))]
    with pytest.raises(api.t.PinLaterException, match=f"lookupJobs takes at most {MAX_LOOKUP} descriptors, not "):
        api.lookup(*many)
    assert set(api.lookup(*many[:-1])) == {descriptor}, "at the limit: looked up"
    # Millions of short strings (the most a frame holds) are refused before they are decoded.
    tiny = [f"m:s1:p1:{n}" for n in range(2 * MAX_LOOKUP + 100)]
    with pytest.raises(
        TApplicationException, match=f"more than {2 * MAX_LOOKUP + 16}, the most a lookupJobs call takes"
    ):
        api.lookup(*tiny)
    still_served(api)


def test_a_checkpoint_of_more_requests_than_it_takes_is_refused(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """A 16 MiB frame holds about 800,000 short checkpoint requests, each a Python value and a
    hint of the queue's walk; at most MAX_CHECKPOINT are taken, the job left as it was."""
    api = api_for(start_server())
    api.create("many")
    (descriptor,) = api.enqueue("many", api.job(b"x"))
    (claimed,) = api.dequeue("many").jobs

    def checkpoint(n: int) -> None:
        one = api.t.PinLaterCheckpointJobRequest(jobDescriptor=claimed, moveToPending=True)
        api.c.checkpointJobs(api.ctx, api.t.PinLaterCheckpointJobsRequest(queueName="many", requests=[one] * n))

    with pytest.raises(api.t.PinLaterException, match=f"checkpointJobs takes at most {MAX_CHECKPOINT} requests"):
        checkpoint(MAX_CHECKPOINT + 1)
    assert api.lookup(descriptor)[descriptor].jobState == api.t.PinLaterJobState.IN_PROGRESS
    checkpoint(MAX_CHECKPOINT)
    assert api.lookup(descriptor)[descriptor].jobState == api.t.PinLaterJobState.PENDING
    still_served(api)


def test_an_enqueue_or_ack_of_more_jobs_than_it_takes_is_refused_whole(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """A 16 MiB frame holds two million empty jobs (724 MB and up to a second of the event loop,
    and a 40 MB reply no client could read after the jobs were stored) or 666,000 acks: at most
    MAX_ENQUEUE jobs and MAX_ACKS acks are taken, a call past them refused with nothing done; a
    long queue name's replies bound an enqueue's jobs below that."""
    api = api_for(start_server())
    api.create("many")
    job = api.job(b"")
    with pytest.raises(api.t.PinLaterException, match=f"enqueueJobs takes at most {MAX_ENQUEUE} jobs to many, not "):
        api.enqueue("many", *[job] * (MAX_ENQUEUE + 1))
    assert api.count("many", api.t.PinLaterJobState.PENDING) == 0, "nothing was enqueued"
    made = api.enqueue("many", *[job] * MAX_ENQUEUE)
    assert len(made) == MAX_ENQUEUE
    claimed = api.dequeue("many", limit=1).jobs
    with pytest.raises(api.t.PinLaterException, match=f"an ack takes at most {MAX_ACKS} jobs, not {MAX_ACKS + 1}"):
        api.ack("many", ok=[*claimed, *made[:MAX_ACKS]])
    carried = api.ack_request("many", ok=[*claimed, *made[:MAX_ACKS]])  # (carried by a dequeue: the same)
    with pytest.raises(api.t.PinLaterException, match=f"an ack takes at most {MAX_ACKS} jobs"):
        api.dequeue("many", limit=1, jobAckRequest=carried)
    assert api.count("many", api.t.PinLaterJobState.SUCCEEDED) == 0, "nothing was acked"
    assert api.count("many", api.t.PinLaterJobState.IN_PROGRESS) == 1, "nor dequeued"
    api.ack("many", ok=list(claimed))
    assert api.count("many", api.t.PinLaterJobState.SUCCEEDED) == 1
    long_name = "q" * 128
    api.create(long_name)
    most = 16 * 1024 * 1024 // (128 + 1 + 40)
    assert most < MAX_ENQUEUE
    with pytest.raises(api.t.PinLaterException, match=f"takes at most {most} jobs to {long_name}"):
        api.enqueue(long_name, *[job] * (most + 1))
    still_served(api)


def test_a_long_poll_whose_peer_hung_up_ends_and_claims_nothing(
    start_server: Start, api_for: Callable[[ServerProcess], Api], thrift_gen: tuple[ModuleType, ModuleType]
) -> None:
    """A waiting long poll holds no request slot, so nothing but its connection bounds it: one
    whose peer hangs up ends at once. Before, it waited out its 30 s and then dequeued the next
    job for nobody, which stayed IN_PROGRESS until its claim timed out."""
    server = start_server()
    api = api_for(server)
    api.create("lp")
    poll = long_poll_call(thrift_gen, 30_000)
    for reset in (False, True) * 3:
        sock = raw(server)
        sock.sendall(frame(poll))
        wait_for(lambda: gauge(server, "long_polls_waiting") == 1, what="the long poll to be waiting")
        if reset:  # no FIN but a reset: the connection is lost at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        wait_for(lambda: gauge(server, "long_polls_waiting") == 0, what="the long poll to end with its connection")
    # A peer that half-closes (its side only) gets the poll's answer, empty, at once.
    sock = raw(server)
    sock.sendall(frame(poll))
    wait_for(lambda: gauge(server, "long_polls_waiting") == 1, what="the long poll to be waiting")
    sock.shutdown(socket.SHUT_WR)
    assert reply_seqid(read_frame(sock)) == 1 and is_closed(sock)
    sock.close()
    (descriptor,) = api.enqueue("lp", api.job(b"for a worker that is there"))
    assert api.lookup(descriptor)[descriptor].jobState == 0  # PENDING
    # A poll ended with its connection failed nothing: not a dequeueJobs error in the counters.
    assert int(float(stats(server).get("dequeue_jobs_error", "0"))) == 0
    assert list(api.dequeue("lp").jobs) == [descriptor]


def test_padding_in_skipped_fields_is_refused_before_it_is_decoded(
    start_server: Start, api_for: Callable[[ServerProcess], Api]
) -> None:
    """The decoder skips fields it does not know holding the GIL: a getQueueNames padded to
    16 MiB with a list of 16.7 million bools held every other client 170 ms a call. A call of a
    method that takes no list nor body is refused past 1 MiB (``ARGUMENT_BYTES``), and a list of
    fixed-width values counts an object an element against the object bound (no request of the
    IDL has one), both unread and with the connection kept."""
    from tests.server.test_transport import read_app_exception

    from pinlater.server.handler import SMALL_CALL_BYTES

    server = start_server()
    api = api_for(server)
    api.create("padded")

    def bools(n: int) -> bytes:  # field 9: list<bool> of n
        return b"\x0f\x00\x09\x02" + struct.pack("!i", n) + b"\x01" * n

    with raw(server) as sock:
        name = b"getQueueNames"
        header = struct.pack("!Ii", VERSION_1 | 1, len(name)) + name + struct.pack("!i", 7)
        sock.sendall(frame(header + CONTEXT_ARGS[:-1] + bools(SMALL_CALL_BYTES) + b"\x00"))
        seqid, exc = read_app_exception(sock)
        assert (seqid, exc.type) == (7, TApplicationException.PROTOCOL_ERROR)
        assert f"more than the {SMALL_CALL_BYTES} such a call takes" in exc.message
        small = header + CONTEXT_ARGS[:-1] + bools(1000) + b"\x00"  # (padding that fits: served)
        sock.sendall(frame(small))
        assert read_frame(sock)[:4] == struct.pack("!I", VERSION_1 | 2)

        name = b"lookupJobs"  # a method that takes a list: bounded by the objects its frame may hold
        header = struct.pack("!Ii", VERSION_1 | 1, len(name)) + name + struct.pack("!i", 8)
        n = 8 * 1024 * 1024
        sock.sendall(frame(header + CONTEXT_ARGS[:-1] + bools(n) + b"\x00"))
        seqid, exc = read_app_exception(sock)
        assert (seqid, exc.type) == (8, TApplicationException.PROTOCOL_ERROR)
        assert "lookupJobs call too big to decode" in exc.message, exc.message
    still_served(api)
