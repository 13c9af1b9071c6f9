"""Failover, ServerSet files, timeouts and the rule that unsafe calls are not repeated once sent."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TCyMemoryBuffer

from pinlater.client import JobState, PinLaterClient, PinLaterConnectionError, ServerSet, ServerUnavailable
from pinlater.client.codec import TCyBinaryProtocol, _method
from pinlater.client.errors import ServerError
from pinlater.errors import ErrorCode
from pinlater.idl import idl
from tests.client.proxy import FlakyProxy
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for


def dead_address() -> str:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def proxy(srv: ServerProcess) -> Iterator[FlakyProxy]:
    p = FlakyProxy(srv.port)
    yield p
    p.close()


def test_failover_from_a_dead_server_to_a_live_one(address: str, queue: str) -> None:
    dead = dead_address()
    with PinLaterClient([dead, address], retries=0) as client:
        for _ in range(4):  # round-robin starts on the dead one half of the time
            assert len(client.enqueue(queue, [b"x"])) == 1, "a connect failure means nothing was sent"
        assert client.count(queue, JobState.PENDING) == 4
        assert client.servers.order()[-1] == ("127.0.0.1", int(dead.rsplit(":", 1)[1])), "dead one tried last"


def test_only_dead_servers_raise_a_connection_error(queue: str) -> None:
    with PinLaterClient([dead_address(), dead_address()], connect_timeout=1) as client:
        with pytest.raises(PinLaterConnectionError) as info:
            client.enqueue(queue, [b"x"])
    err = info.value
    assert err.sent is False and err.code == ErrorCode.SHARD_CONNECTION_FAILED
    assert isinstance(err, ServerUnavailable) and "cannot connect" in err.message


def test_enqueue_is_not_repeated_after_the_request_reached_the_server(
    proxy: FlakyProxy, pl: PinLaterClient, queue: str
) -> None:
    with PinLaterClient(proxy.address, retries=3) as client:
        proxy.drop_replies = 1
        with pytest.raises(PinLaterConnectionError) as info:
            client.enqueue(queue, [b"once"])
        assert info.value.sent is True
        assert proxy.dropped == 1
        assert pl.count(queue, JobState.PENDING) == 1, "the server got it once and the client did not resend"

        proxy.drop_replies = 1
        assert client.count(queue, JobState.PENDING) == 1, "a safe call is retried after a dropped reply"
        assert proxy.dropped == 2


def test_a_dequeue_whose_reply_is_lost_is_not_repeated(proxy: FlakyProxy, pl: PinLaterClient, queue: str) -> None:
    pl.enqueue(queue, [b"a", b"b"])
    with PinLaterClient(proxy.address, retries=3) as client:
        proxy.drop_replies = 1
        with pytest.raises(PinLaterConnectionError):
            client.dequeue(queue, 1)
        assert pl.count(queue, JobState.IN_PROGRESS) == 1, "claimed once, not twice"


def test_a_read_timeout_is_a_connection_error(queue: str) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog) but never answers
    try:
        with PinLaterClient(f"127.0.0.1:{silent.getsockname()[1]}", timeout=0.3, retries=0) as client:
            with pytest.raises(PinLaterConnectionError) as info:
                client.enqueue(queue, [b"x"])
        assert info.value.sent is True and "no reply" in info.value.message
    finally:
        silent.close()


def test_a_reply_trickled_past_the_timeout_is_a_connection_error(queue: str) -> None:
    """The timeout bounds the whole reply, not each read: a server sending a byte every 50 ms of a
    1,000-byte reply is cut off at the timeout, not waited for 50 s."""
    trickler = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = trickler.accept()
        with conn:
            conn.recv(65536)
            conn.sendall((1000).to_bytes(4, "big"))
            while not stop.wait(0.05):
                conn.sendall(b"\x00")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with PinLaterClient(f"127.0.0.1:{trickler.getsockname()[1]}", timeout=0.5, retries=0) as client:
            started = time.monotonic()
            with pytest.raises(PinLaterConnectionError) as info:
                client.queue_names()
            assert time.monotonic() - started < 10
        assert "no reply" in info.value.message
    finally:
        stop.set()
        trickler.close()
        thread.join(10)


def test_a_server_that_takes_calls_and_never_answers_is_tried_last(address: str, queue: str) -> None:
    """A read timeout marks the server down, as a failed connect does: round-robin kept sending it
    every other call, each waiting out the whole timeout."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog) but never answers
    port = silent.getsockname()[1]
    try:
        with PinLaterClient([f"127.0.0.1:{port}", address], timeout=0.3, retries=0) as client:
            timed_out = 0
            for _ in range(2):  # (round-robin: one of the two goes to the silent one)
                try:
                    client.enqueue(queue, [b"x"])
                except PinLaterConnectionError:
                    timed_out += 1
            assert timed_out == 1
            assert client.servers.order()[-1] == ("127.0.0.1", port), "marked down: tried last"
            started = time.monotonic()
            for _ in range(4):
                assert len(client.enqueue(queue, [b"y"])) == 1
            assert time.monotonic() - started < 1.0, "no call waited on the silent one"
    finally:
        silent.close()


def test_a_frame_header_claiming_a_huge_reply_costs_only_what_arrives(queue: str) -> None:
    """Each recv allocates what it asks for: a server claiming a 200 MiB reply and sending a few
    bytes at a time made each read allocate 200 MiB; reads ask for at most READ_PIECE now."""
    import tracemalloc

    liar = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = liar.accept()
        with conn:
            conn.recv(65536)
            conn.sendall((200 << 20).to_bytes(4, "big"))
            for _ in range(5):
                if stop.wait(0.02):
                    break
                conn.sendall(b"\x00" * 10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    tracemalloc.start()
    try:
        with PinLaterClient(f"127.0.0.1:{liar.getsockname()[1]}", timeout=0.5, retries=0) as client:
            with pytest.raises(PinLaterConnectionError):
                client.queue_names()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        stop.set()
        liar.close()
        thread.join(10)
    assert peak < 32 << 20, f"peak {peak >> 20} MiB"


def test_connections_are_reused_in_a_process_with_many_files_open(address: str, queue: str) -> None:
    """Past descriptor 1023, where select cannot look: the idle connection is still reused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip(f"the open-files limit ({hard}) is below the descriptors this needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    spare: list[int] = []
    try:
        spare.extend(os.open(os.devnull, os.O_RDONLY) for _ in range(1100))
        with PinLaterClient(address) as client:
            client.queue_names()
            [pool] = client._pools.values()
            [conn] = pool.idle
            assert conn.sock.fileno() > 1023
            for _ in range(5):
                client.queue_names()
            assert pool.idle == [conn] and pool.open == 1
    finally:
        for fd in spare:
            os.close(fd)


def test_a_reply_the_client_cannot_read_is_a_server_error(queue: str) -> None:
    """A server answering a job state this client does not know: a ``PinLaterError`` naming the
    call, as every failure of a call is, not a bare ValueError."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            frame = conn.recv(65536)
            _, _, seqid = TCyBinaryProtocol(TCyMemoryBuffer(frame[4:])).read_message_begin()
            info = idl.PinLaterJobInfo(
                jobDescriptor="q:s1:p1:1", jobState=99, attemptsAllowed=1, attemptsRemaining=1,
                customStatus="", createdAtTimestampMillis=0,
            )  # fmt: skip
            buf = TCyMemoryBuffer()
            proto = TCyBinaryProtocol(buf)
            proto.write_message_begin("lookupJobs", TMessageType.REPLY, seqid)
            _method("lookupJobs").result_cls(success={"q:s1:p1:1": info}).write(proto)
            proto.write_message_end()
            reply = buf.getvalue()
            conn.sendall(len(reply).to_bytes(4, "big") + reply)
            conn.recv(1)  # until the client hangs up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with PinLaterClient(f"127.0.0.1:{server.getsockname()[1]}", retries=0) as client:
            with pytest.raises(ServerError) as info:
                client.lookup(["q:s1:p1:1"])
        assert "lookupJobs" in info.value.message and "99" in info.value.message
    finally:
        server.close()
        thread.join(10)


def test_server_set_file_changes_are_picked_up(
    start_server: Callable[..., ServerProcess], srv: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = start_server(data_dir=tmp_path / "other")
    path = tmp_path / "serverset"
    path.write_text(f"# the shared server\n127.0.0.1:{srv.port}\n")
    with PinLaterClient(server_set=path) as client:
        client.create_queue("only_on_the_first")
        assert "only_on_the_first" in client.queue_names()
        path.write_text(f"127.0.0.1:{other.port}\n\n")
        wait_for(lambda: "only_on_the_first" not in client.queue_names(), timeout=10, what="the new ServerSet")
        client.create_queue("on_the_second")
        assert client.servers.addresses() == (("127.0.0.1", other.port),)
        path.write_text("not an address\n")  # a bad edit keeps the last good list
        wait_for(lambda: client.queue_names() and "keeping 1 server(s)" in caplog.text, timeout=10, what="bad edit")
        assert "on_the_second" in client.queue_names()
        assert client._pools.keys() <= {("127.0.0.1", other.port)}, "pools of removed servers are dropped"


def test_server_set_parsing() -> None:
    assert ServerSet(["h:1", ("x", 2)]).addresses() == (("h", 1), ("x", 2))
    assert ServerSet(["[::1]:9010"]).addresses() == (("::1", 9010),)
    for bad in ("nohost", "h:0", "h:port", ":1"):
        with pytest.raises(ValueError, match="host:port"):
            ServerSet([bad])
    with pytest.raises(ValueError, match="does-not-exist"):
        ServerSet(path="/does-not-exist")
