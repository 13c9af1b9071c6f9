"""A TCP proxy in front of a server that can drop or swallow replies, to fail calls after the
request reached the server (the case where a client must not repeat an enqueue)."""

from __future__ import annotations

import socket
import threading


class FlakyProxy:
    """Forwards to ``upstream``. While ``drop_replies`` > 0, each reply read from the server is
    discarded and the client's connection closed instead (one drop per reply)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.drop_replies = 0
        self.dropped = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _take_drop(self) -> bool:
        with self._lock:
            if self.drop_replies > 0:
                self.drop_replies -= 1
                self.dropped += 1
                return True
            return False

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if replies and self._take_drop():
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
