"""Sends a message's frames on a ZeroMQ socket without letting go of the GIL.

pyzmq releases the GIL around every frame it sends. For a PUB socket that costs nothing on
its own (a send only queues the frame for ZeroMQ's I/O thread, ~1 µs), but a thread that
releases the GIL beside a busy Python thread must then wait for it back: up to the
interpreter's switch interval (5 ms), after which it forces the busy thread to stop wherever
it is. The events' sender thread sends three frames per batch; each release was one more
forced hand-off taken out of the scheduler's cache calls (`benchmarks/events_ops.py`).
`FrameSender` calls libzmq's `zmq_send` through `ctypes.PyDLL`, which keeps the GIL, on the
socket's own handle (`Socket.underlying`, pyzmq's interop address): the frames are the same
bytes on the same socket.

It uses the very libzmq pyzmq loaded (found in the process's memory map, and checked by
asking it the socket's type): another copy of the library would not know the socket. Where
that cannot be found (not Linux, or a pyzmq with libzmq linked into its own module)
`frame_sender` returns None and the caller sends through pyzmq.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import zmq

_MAPS = Path("/proc/self/maps")


def _loaded_libzmq() -> str | None:
    """Path of the libzmq shared object mapped into this process, if exactly one is."""
    try:
        lines = _MAPS.read_text().splitlines()
    except OSError:
        return None
    paths = {line.split()[-1] for line in lines if "/libzmq" in line}
    return paths.pop() if len(paths) == 1 else None


class FrameSender:
    """`send(frames)`: the frames of one message on `sock`, the GIL held throughout. For
    sockets whose sends never block (PUB drops at its high-water mark): a blocked send would
    hold the GIL. Use it only from the thread that owns the socket (ZeroMQ sockets are not
    thread-safe)."""

    def __init__(self, sock: zmq.Socket[bytes], library: str) -> None:
        lib = ctypes.PyDLL(library)
        send = lib.zmq_send
        send.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int)
        send.restype = ctypes.c_int
        self._zmq_send = send
        self._handle = sock.underlying
        self._sock = sock  # the handle is valid while the socket lives
        if _socket_type(lib, self._handle) != sock.type:
            raise OSError(f"{library} does not know this socket")

    def send(self, frames: Sequence[bytes]) -> None:
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            flags = zmq.SNDMORE if i < last else 0
            if self._zmq_send(self._handle, frame, len(frame), flags) < 0:
                raise zmq.ZMQError(zmq.zmq_errno())


def _socket_type(lib: ctypes.PyDLL, handle: int) -> int | None:
    """The socket's type as `lib` reads it: a library that does not own the socket answers
    ENOTSOCK (libzmq checks each socket's tag)."""
    getsockopt = lib.zmq_getsockopt
    getsockopt.argtypes = (
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
    )
    getsockopt.restype = ctypes.c_int
    value, size = ctypes.c_int(-1), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int))
    if getsockopt(handle, zmq.TYPE, ctypes.byref(value), ctypes.byref(size)) != 0:
        return None
    return value.value


def frame_sender(sock: zmq.Socket[bytes]) -> FrameSender | None:
    """A `FrameSender` for `sock`, or None where libzmq cannot be reached directly."""
    library = _loaded_libzmq()
    if library is None:
        return None
    try:
        return FrameSender(sock, library)
    except (OSError, AttributeError):
        return None
