"""A delaying TCP proxy on loopback, in-process: a slow network between a client and a server.

`DelayProxy(upstream_port).start()` listens on `127.0.0.1:proxy.port` and forwards each
connection to `127.0.0.1:upstream_port`. Every chunk of bytes, either way, is sent on
`delay_s` seconds after it arrived (read when it arrives, so `delay_s` may change any time):
added latency, as a far or congested link adds. With `bytes_per_s`, the bytes toward the
client also trickle at that rate (a server that stalls between replies: every socket read
gets a few bytes, none waits long). A server that goes
away closes its clients' connections; a connection to a server that is not there is closed
at once (the client sees a reset, as it would without the proxy).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

_CHUNK = 1 << 16
_PACE_S = 0.05  # with `bytes_per_s`: a piece of bytes sent this often


class DelayProxy:
    def __init__(
        self, upstream_port: int, delay_s: float = 0.0, bytes_per_s: float | None = None
    ) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.bytes_per_s = bytes_per_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False

    def start(self) -> DelayProxy:
        threading.Thread(target=self._accept, name="delay-proxy-accept", daemon=True).start()
        return self

    def close(self) -> None:
        """Stops listening and drops every connection."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = set(self._sockets), set()
        self._listener.close()
        for sock in sockets:
            _shut(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 1.0)
            except OSError:
                _shut(client)  # nothing listening upstream: refuse, as the server would
                continue
            for sock in (client, upstream):  # no Nagle wait on the small replies
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    _shut(client)
                    _shut(upstream)
                    return
                self._sockets |= {client, upstream}
            self._pipe(client, upstream)
            self._pipe(upstream, client, paced=True)

    def _pipe(self, src: socket.socket, dst: socket.socket, paced: bool = False) -> None:
        """Two threads: one reads `src` and stamps each chunk with its due time, one sends
        the chunks to `dst` when due (so chunks overlap in flight, as on a real link)."""
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay_s, data))
                if not data:
                    return

        def send() -> None:
            held: tuple[float, bytes] | None = None
            while True:
                due, data = held if held is not None else chunks.get()
                held = None
                time.sleep(max(0.0, due - time.monotonic()))
                # The chunks due by now go in one send: fewer wake-ups of this thread.
                while data and not chunks.empty():
                    held = chunks.get()
                    if held[0] > time.monotonic() or not held[1]:
                        break
                    data, held = data + held[1], None
                try:
                    if data:
                        self._forward(dst, data, paced)
                except OSError:
                    break
                if not data or (held is not None and not held[1]):
                    break
            self._drop(src, dst)

        threading.Thread(target=read, name="delay-proxy-read", daemon=True).start()
        threading.Thread(target=send, name="delay-proxy-send", daemon=True).start()

    def _forward(self, dst: socket.socket, data: bytes, paced: bool) -> None:
        rate = self.bytes_per_s
        if not paced or not rate:
            dst.sendall(data)
            return
        piece = max(1, int(rate * _PACE_S))  # a piece every `_PACE_S` seconds
        for start in range(0, len(data), piece):
            dst.sendall(data[start : start + piece])
            time.sleep(_PACE_S)

    def _drop(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._sockets -= set(sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
