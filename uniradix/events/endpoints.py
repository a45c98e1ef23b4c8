"""Endpoints a user can get right: whether a socket binds or connects, and one-line errors.

ZeroMQ lets either side of a PUB/SUB pair bind, but exactly one must: a publisher and a
subscriber that both connect to `tcp://127.0.0.1:5557` exchange nothing, silently. The
`bind` mode says which side this one is:

- `auto` (default): vLLM's and SGLang's rule. Bind when the endpoint has `*` or `::`
  (a wildcard address) or is `ipc://` / `inproc://`; connect otherwise. So a publisher on
  `tcp://*:5557` binds and routers connect to `tcp://<host>:5557` (the usual layout), and a
  publisher given a plain host connects to a router that binds (llm-d's central mode).
- `bind` / `connect`: that, whatever the endpoint.

`attach` binds or connects and turns ZeroMQ's errors (address in use, a malformed endpoint,
an unknown host) into a `ValueError` naming the endpoint, which the CLI prints as one line
with exit status 2.
"""

from __future__ import annotations

import re

import zmq

BIND_MODES = ("auto", "bind", "connect")
_TCP = re.compile(r"tcp://(\[[0-9a-fA-F:.]*\]|[^:/\[\]]+):(\*|\d{1,5})")
_TRANSPORTS = ("tcp://", "ipc://", "inproc://")


def check_bind_mode(mode: str) -> str:
    if mode not in BIND_MODES:
        raise ValueError(f"unknown bind mode {mode!r}; choose from {BIND_MODES}")
    return mode


def bind_flag(mode: str) -> bool | None:
    """The `KVEventsConfig.bind` value for a mode: None leaves the `auto` rule."""
    check_bind_mode(mode)
    return None if mode == "auto" else mode == "bind"


def auto_binds(endpoint: str) -> bool:
    """The `auto` rule (vLLM / SGLang): bind a wildcard address or a local transport."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def check_endpoint(endpoint: str, bind: bool) -> str:
    """`endpoint` if it is one ZeroMQ can use on the chosen side; else a ValueError naming
    it. A connecting side needs a concrete port (`*` only binds)."""
    if not endpoint.startswith(_TRANSPORTS):
        raise ValueError(
            f"endpoint {endpoint!r} must start with one of {_TRANSPORTS} (e.g. tcp://*:5557)"
        )
    if endpoint.startswith("tcp://"):
        match = _TCP.fullmatch(endpoint)
        if match is None:
            raise ValueError(f"endpoint {endpoint!r} is not tcp://HOST:PORT")
        port = match.group(2)
        if port == "*" and not bind:
            raise ValueError(f"endpoint {endpoint!r}: a port '*' can only be bound")
        if port != "*" and not 0 < int(port) < 65536:
            raise ValueError(f"endpoint {endpoint!r}: port {port} outside 1..65535")
        if match.group(1) == "*" and not bind:
            raise ValueError(f"endpoint {endpoint!r}: host '*' can only be bound")
    elif len(endpoint.split("://", 1)[1]) == 0:
        raise ValueError(f"endpoint {endpoint!r} names no address")
    return endpoint


def attach(sock: zmq.Socket[bytes], endpoint: str, bind: bool) -> str:
    """Binds or connects `sock`; returns the address it is on (a bound `*` port resolved).
    Raises ValueError (one line, naming the endpoint) for a bad or busy one."""
    check_endpoint(endpoint, bind)
    side = "bind" if bind else "connect"
    try:
        if bind:
            sock.bind(endpoint)
            return bytes(sock.getsockopt(zmq.LAST_ENDPOINT)).decode()
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        reason = zmq.strerror(exc.errno or 0)
        hint = " (another process holds it?)" if exc.errno == zmq.EADDRINUSE else ""
        raise ValueError(f"cannot {side} {endpoint!r}: {reason}{hint}") from None
    return endpoint
