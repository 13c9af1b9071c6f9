"""Hostile and broken input against a real server: only the offending connection suffers."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tests.server.test_contract import Api
from tests.support.pinlater_server import ServerProcess
from tests.support.wait import wait_for

Start = Callable[..., ServerProcess]
Open = Callable[[ServerProcess], Any]

VERSION_1 = 0x80010000
CALL, REPLY, EXCEPTION = 1, 2, 3


def message(name: str, seqid: int, body: bytes = b"\x00") -> bytes:
    """A strict binary-protocol CALL with the given struct body (default: an empty struct)."""
    encoded = name.encode()
    return struct.pack("!II", VERSION_1 | CALL, len(encoded)) + encoded + struct.pack("!i", seqid) + body


def frame(payload: bytes) -> bytes:
    return struct.pack("!i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    header = _read_exactly(sock, 4)
    (length,) = struct.unpack("!i", header)
    return _read_exactly(sock, length)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the server")
        data += chunk
    return data


def is_closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def still_served(api: Api) -> None:
    assert isinstance(api.c.getQueueNames(api.ctx), set)


def test_garbage_oversized_and_truncated_frames_close_only_their_connection(
    start_server: Start, open_client: Open, ttypes: ModuleType
) -> None:
    srv = start_server("--max-frame-bytes", "4096")
    bystander = Api(open_client(srv), ttypes)
    still_served(bystander)

    cases = {
        "garbage": frame(b"\xde\xad\xbe\xef" * 8),
        "oversized": struct.pack("!i", 4 * 4096 + 1) + b"x" * 100,  # (past 4 times the limit: closed unread)
        "negative length": struct.pack("!i", -5),
        "empty frame": struct.pack("!i", 0),
        "truncated message": frame(message("getQueueNames", 7, b"\x0c\x00")),
    }
    for name, data in cases.items():
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            sock.sendall(data)
            if name == "truncated message":
                reply = read_frame(sock)
                (version_type,) = struct.unpack("!i", reply[:4])
                assert version_type & 0xFF == EXCEPTION, "a readable header gets a protocol error reply"
            assert is_closed(sock), name
        still_served(bystander)

    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(struct.pack("!i", 1000) + b"only part of it")
    still_served(bystander)


def test_a_frame_past_the_limit_is_read_dropped_and_answered_and_the_connection_lives(start_server: Start) -> None:
    """A frame past MAX_FRAME_BYTES closed its connection unanswered: the client saw a reset,
    which Finagle retries, the same frame each time. One of up to four times the limit is read
    and dropped as it comes, and its call answered PROTOCOL_ERROR naming the limit; the calls
    pipelined behind it are served, in order. A oneway one is not answered."""
    srv = start_server("--max-frame-bytes", "4096")
    context = b"\x0c\x00\x01\x0b\x00\x01\x00\x00\x00\x01x\x00\x00"
    big = message("getQueueNames", 5, context[:-1] + b"\x0b\x00\x09" + struct.pack("!i", 9000) + b"p" * 9000 + b"\x00")
    oneway = struct.pack("!Ii", VERSION_1 | 4, 13) + b"getQueueNames" + struct.pack("!i", 6) + b"\x00" * 5000
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        data = frame(big) + frame(oneway) + frame(message("getQueueNames", 7, context))
        for at in range(0, len(data), 1000):  # (in pieces: the dropping spans reads)
            sock.sendall(data[at : at + 1000])
        reply = read_frame(sock)
        (version_type,) = struct.unpack("!i", reply[:4])
        assert version_type & 0xFF == EXCEPTION and struct.unpack("!i", reply[21:25]) == (5,), reply[:40]
        said = f"getQueueNames call of {len(big)} bytes, more than a frame may hold (4096, MAX_FRAME_BYTES)"
        assert said.encode() in reply
        reply = read_frame(sock)  # the oneway call got nothing; the next one its answer
        (version_type,) = struct.unpack("!i", reply[:4])
        assert version_type & 0xFF == REPLY and struct.unpack("!i", reply[21:25]) == (7,)


def test_unknown_method_gets_an_application_exception_and_the_connection_lives(start_server: Start) -> None:
    srv = start_server()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(frame(message("noSuchMethod", 41)))
        reply = read_frame(sock)
        (version_type,) = struct.unpack("!i", reply[:4])
        assert version_type & 0xFF == EXCEPTION
        assert b"noSuchMethod" in reply
        assert struct.unpack("!i", reply[8 + len("noSuchMethod") : 12 + len("noSuchMethod")]) == (41,)
        sock.sendall(frame(message("getQueueNames", 42, b"\x0c\x00\x01\x0b\x00\x01\x00\x00\x00\x01x\x00\x00")))
        reply = read_frame(sock)
        (version_type,) = struct.unpack("!i", reply[:4])
        assert version_type & 0xFF == REPLY


def test_a_method_name_past_the_longest_closes_its_connection_unechoed(start_server: Start) -> None:
    """A name of 1 MiB is not answered (an unknown one used to be echoed twice in the refusal)
    nor logged whole; a long name that fits still gets its refusal."""
    srv = start_server()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(frame(message("n" * 128, 3)))
        assert b"n" * 128 in read_frame(sock), "at the limit: an unknown method's refusal"
        sock.sendall(frame(message("x" * (1 << 20), 4)))
        assert is_closed(sock)
    line = wait_for(lambda: next((line for line in srv.lines if "method name of 1048576 bytes" in line), None))
    assert len(line) < 1000 and "more than 128 characters take" in line, "(refused by its length, not decoded)"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:  # past 128, within 512 bytes
        sock.sendall(frame(message("y" * 300, 6)))
        assert is_closed(sock)  # (its line within 5 s of the last is not written: throttled)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(frame(message("getQueueNames", 5, b"\x0c\x00\x01\x0b\x00\x01\x00\x00\x00\x01x\x00\x00")))
        (version_type,) = struct.unpack("!i", read_frame(sock)[:4])
        assert version_type & 0xFF == REPLY


def test_a_thousand_concurrent_connections_are_all_served(start_server: Start, ttypes: ModuleType) -> None:
    srv = start_server()
    count = 1000
    request = frame(message("getQueueNames", 1, b"\x0c\x00\x01\x0b\x00\x01\x00\x00\x00\x01x\x00\x00"))
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(count)]
    try:
        barrier = threading.Barrier(8)
        replies: list[int] = []
        lock = threading.Lock()

        def worker(part: list[socket.socket]) -> None:
            barrier.wait()
            for sock in part:
                sock.sendall(request)
            for sock in part:
                (version_type,) = struct.unpack("!i", read_frame(sock)[:4])
                with lock:
                    replies.append(version_type & 0xFF)

        threads = [threading.Thread(target=worker, args=(socks[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert replies.count(REPLY) == count
    finally:
        for sock in socks:
            sock.close()
