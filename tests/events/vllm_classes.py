"""vLLM's own event classes, loaded from `vllm/distributed/kv_events.py` of the vllm 0.33.0
wheel (`scripts/setup_vllm_events.sh` extracts that one file into `.cache/vllm/`; vllm is not
installed). The file imports four vLLM modules at load time; minimal stand-ins for them are
put in `sys.modules` only while it loads, and removed after, so no other test sees a `vllm`
package. The stand-ins provide only what the file reads: its publisher's config dataclass,
a logger, the helpers its `tcp://*:0` bind uses, and the hash type (`bytes | int`, as
vLLM's `kv_cache_utils` defines it).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KV_EVENTS_FILE = REPO / ".cache" / "vllm" / "vllm" / "distributed" / "kv_events.py"
MISSING = (
    f"{KV_EVENTS_FILE.relative_to(REPO)} is absent: run scripts/setup_vllm_events.sh "
    "(it downloads the vllm 0.33.0 wheel and extracts that file)"
)


@dataclass
class _KVEventsConfig:
    """What vLLM's publisher builds its `get_publisher_config()` from."""

    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""


def _tcp_uri(ip: str, port: int) -> str:
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


def _split_zmq_path(path: str) -> tuple[str, str, str]:
    scheme, _, rest = path.partition("://")
    host, _, port = rest.rpartition(":")
    return scheme, host, port


def _stand_ins() -> dict[str, types.ModuleType]:
    modules = {
        name: types.ModuleType(name)
        for name in (
            "vllm",
            "vllm.config",
            "vllm.config.kv_events",
            "vllm.logger",
            "vllm.utils",
            "vllm.utils.network_utils",
            "vllm.v1",
            "vllm.v1.core",
            "vllm.v1.core.kv_cache_utils",
            "vllm.distributed",
        )
    }
    modules["vllm.config.kv_events"].KVEventsConfig = _KVEventsConfig  # type: ignore[attr-defined]
    modules["vllm.logger"].init_logger = logging.getLogger  # type: ignore[attr-defined]
    net = modules["vllm.utils.network_utils"]
    net.get_ip = lambda: "127.0.0.1"  # type: ignore[attr-defined]
    net.get_tcp_uri = _tcp_uri  # type: ignore[attr-defined]
    net.is_valid_ipv6_address = lambda ip: ":" in ip  # type: ignore[attr-defined]
    net.split_zmq_path = _split_zmq_path  # type: ignore[attr-defined]
    modules["vllm.v1.core.kv_cache_utils"].ExternalBlockHash = bytes | int  # type: ignore[attr-defined]
    return modules


def load_vllm_kv_events() -> types.ModuleType:
    """The module object of vLLM's `kv_events.py` (raises FileNotFoundError if absent)."""
    if not KV_EVENTS_FILE.is_file():
        raise FileNotFoundError(MISSING)
    name = "vllm.distributed.kv_events"
    stand_ins = _stand_ins()
    saved = {k: sys.modules[k] for k in stand_ins if k in sys.modules}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location(name, KV_EVENTS_FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # msgspec resolves the structs' annotations through it
        spec.loader.exec_module(module)
    finally:
        for k in [*stand_ins, name]:
            sys.modules.pop(k, None)
        sys.modules.update(saved)
    return module
