"""SGLang's HiCache on a CPU machine, for the host-tier conformance tests.

SGLang's own `HybridCacheController` runs as it does on a server (host pool, write and load
queues, acks); two device-only pieces are replaced, inside the test process only: pinning the
host pool with `cudaHostRegister` (skipped: the pool is plain CPU memory) and the L2 transfer
engine's copy kernels (done here with tensor indexing, layer by layer, so the host pools
really hold the KV and the Mamba states, and a load-back really restores them). Completions
are done at once, so an ack is ready as soon as the cache polls for it.
"""

from __future__ import annotations

import contextlib
import time
from array import array
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple
from unittest import mock

from sglang.srt.mem_cache import l2_transfer
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
from sglang.srt.mem_cache.pool_host import common as pool_host_common
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
from sglang.srt.mem_cache.unified_cache.tree_core_registry import _TREE_CORE_REGISTRY
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.test.kits.unified_radix_cache import fixtures

from tests.integrations.sglang_inspector import UniradixInspector


class _Done:
    """A device event that has already happened (the CPU copy ran synchronously)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def record(self, *args: Any) -> None:
        pass

    def wait(self, *args: Any) -> None:
        pass

    def elapsed_time(self, other: Any) -> float:
        return 0.0


def _completion() -> Any:
    return l2_transfer.TransferCompletion(_Done(), _Done(), False)


def _layers(transfer: Any) -> Iterator[tuple[Any, Any, Any, Any]]:
    """(host K, host V, device K, device V) per layer of one transfer's pools."""
    host, device = transfer.host_pool, transfer.device_pool
    for layer in range(host.layer_num):
        device_layer = device.start_layer + layer
        yield (
            host.k_data_refs[layer],
            host.v_data_refs[layer],
            device.get_key_buffer(device_layer),
            device.get_value_buffer(device_layer),
        )


def _states(transfer: Any) -> Iterator[tuple[Any, Any]]:
    """(host buffer of one layer, that layer's device states) of a Mamba state transfer, for
    the temporal state and each conv state; the host pool is page-first: (slot, layer, 1, ...)."""
    host = transfer.host_pool
    for layer in range(host.num_mamba_layers):
        yield host.temporal_buffer[:, layer, 0], host.temporal_device_layers[layer]
        for conv, device_layers in zip(host.conv_buffer, host.conv_device_layers, strict=True):
            yield conv[:, layer, 0], device_layers[layer]


def _indices(transfer: Any) -> tuple[Any, Any]:
    """The transfer's host and device slots; a Mamba pool's device ids are translated to
    its rows as SGLang's engine does."""
    device = transfer.device_indices
    if isinstance(transfer.host_pool, MambaPoolHost):
        device = l2_transfer.L2TransferEngine._resolve_device_indices(transfer)
    return transfer.host_indices.cpu(), device.cpu()


def _device_to_host(self: Any, transfers: list[Any]) -> Any:
    for t in transfers:
        host, device = _indices(t)
        if isinstance(t.host_pool, MambaPoolHost):
            for host_states, device_states in _states(t):
                host_states[host] = device_states[device].to(host_states.dtype)
            continue
        for host_k, host_v, dev_k, dev_v in _layers(t):
            host_k[host] = dev_k[device].to(host_k.dtype)
            host_v[host] = dev_v[device].to(host_v.dtype)
    return _completion()


def _host_to_device(
    self: Any,
    transfers: list[Any],
    *,
    transfer_layer_id_max: int,
    start_event: Any = None,
    on_layer_done: Any = None,
) -> Any:
    for t in transfers:
        host, device = _indices(t)
        if isinstance(t.host_pool, MambaPoolHost):
            for host_states, device_states in _states(t):
                device_states[device] = host_states[host].to(device_states.dtype)
            continue
        for host_k, host_v, dev_k, dev_v in _layers(t):
            dev_k[device] = host_k[host].to(dev_k.dtype)
            dev_v[device] = host_v[host].to(dev_v.dtype)
    if on_layer_done is not None:
        for layer in range(transfer_layer_id_max):
            on_layer_done(layer)
    return _completion()


@contextlib.contextmanager
def cpu_hicache() -> Iterator[None]:
    """SGLang's HiCache with its device-only pieces replaced (see the module docstring); the
    kit's fixtures built on the CPU, and the "uniradix" core with the inspection interface."""
    engine = l2_transfer.L2TransferEngine
    factory = {"uniradix": lambda params, components: UniradixInspector(params, components)}
    with (
        mock.patch.object(pool_host_common, "_cuda_host_register", lambda *a, **k: None),
        mock.patch.object(engine, "submit_device_to_host", _device_to_host),
        mock.patch.object(engine, "submit_host_to_device", _host_to_device),
        mock.patch.object(fixtures, "get_device", return_value="cpu"),
        mock.patch.dict(_TREE_CORE_REGISTRY, factory),
    ):
        yield


def build_hicache_cache(
    cfg: Any, core: str, write_policy: str, storage: dict[str, Any] | None = None, **kwargs: Any
) -> tuple:
    """The kit's cache of `cfg` on `core`, with SGLang's HiCache initialised as its own
    scheduler does (`init_hicache`); call inside `cpu_hicache()`. `storage`: SGLang's
    `hicache_storage_*` server arguments of an L3 backend. Returns the cache, its allocator
    and its request-to-token pool."""
    cache, allocator, req_to_token = fixtures.build_fixture(cfg, tree_core_backend=core, **kwargs)
    server_args = ServerArgs(
        model_path="dummy",
        page_size=cfg.page_size,
        hicache_io_backend="kernel",
        hicache_write_policy=write_policy,
        **(storage or {}),
    )
    set_global_server_args_for_scheduler(server_args)
    cache.init_hicache(server_args, cache.cache_init_params)
    fixtures.drop_hicache_atexit_pin(cache)
    return cache, allocator, req_to_token


def settle_storage(cache: Any, timeout: float = 30.0) -> None:
    """The scheduler's poll, then waits for the L3 writes it started to land and be acked,
    so both cores meet the next request with the same host locks and the same store."""
    cache.check_hicache_events()
    deadline = time.monotonic() + timeout
    while cache.ongoing_backup:
        assert time.monotonic() < deadline, "L3 backups did not complete"
        time.sleep(0.002)
        cache.drain_storage_control_queues()


def prefetch_from_storage(cache: Any, rid: str, match: Any, tokens: list[int]) -> int:
    """The scheduler's L3 prefetch of what `match` missed, run to completion (the
    `wait_complete` policy); returns the tokens it brought to the host (-1: not tried, the
    match ends below a node with no host copy)."""
    node = match.last_host_node
    if not (cache.is_backuped(node) or cache.is_root(node)):
        return -1
    matched = match.device_prefix_len + match.host_hit_length
    handle = CacheRequestHandle(rid, 0)
    cache.prefetch_from_storage(
        handle,
        node,
        array("q", tokens[matched:]),  # SGLang's keys hold token ids as array('q')
        cache.get_last_hash_value(node),
        cache.get_prefix_hash_values(node) if cache.hicache_storage_pass_prefix_keys else None,
        matched_prefix_tokens=array("q", tokens[:matched]),
    )
    deadline = time.monotonic() + 30.0
    while not cache.check_prefetch_progress(handle):
        assert time.monotonic() < deadline, f"prefetch {rid} did not complete"
        time.sleep(0.002)
        cache.check_hicache_events()
    return int(cache.pop_prefetch_loaded_tokens(handle))


def load_back(cache: Any, node: Any, req: Any = None) -> bool:
    """SGLang's load-back of a host hit, acked at once (the CPU copy is synchronous); `req`:
    the request it is for (a Mamba state is loaded into the request's own slot too)."""
    if not cache.load_back(node, req=req):
        return False
    cache.ready_to_load_host_cache()
    for ack in list(cache.cache_controller.ack_load_queue):
        ack.finish_event.synchronize()
    cache.loading_check()
    return True


class HiCacheRun(NamedTuple):
    """What one core did with a stream: the per-call trace, the final tree, its KV events
    and the core's class name (so a test sees which core really ran)."""

    trace: list[tuple]
    tree: list[tuple]
    events: list[Any]
    core: str


def run_hicache(
    cfg: Any,
    core: str,
    write_policy: str,
    play: Callable[[Any, Any], list[tuple]],
    state: Callable[[Any], list[tuple]],
    **kwargs: Any,
) -> HiCacheRun:
    """The lock-step driver of the HiCache tests: `cfg`'s cache on `core` with HiCache under
    `write_policy`, load-backs from one page on; `play(cache, allocator)` runs the stream,
    every backup still in flight is then drained and `state(cache)` reads the final tree."""
    with cpu_hicache():
        cache, allocator, _ = build_hicache_cache(cfg, core, write_policy, **kwargs)
        cache.load_back_threshold = cfg.page_size
        try:
            trace = play(cache, allocator)
            cache.writing_check(write_back=True)
            events = cache.take_events()
            return HiCacheRun(trace, state(cache), events, type(cache.tree_core).__name__)
        finally:
            cache.release_host_resources()


def end_request(cache: Any, lock: Any, i: int) -> None:
    """Request `i` done: its lock released, then the host tier's KV events (every other
    request) and the core's own checks."""
    cache.unlock(lock)
    if i % 2:
        cache.check_hicache_events()
    cache.tree_core.sanity_check([], [])


def insert_and_evict_with_host_full(
    cache: Any, step: Callable[[str, Any], None], insert: Callable[[], Any], evict: Any
) -> None:
    """Host memory taken elsewhere: backups fail, so the leaves they were for are dropped
    (write-back: `drop_subtree_no_host`, with their states) or deleted unbacked
    (write-through). Steps "insert d, host full" (`insert()`) and "evict all, host full"
    (the eviction `evict`: what it evicted, full tokens and states, and the drops); the host
    pool is given back after."""
    host_pool = cache.cache_controller.mem_pool_host
    taken = host_pool.alloc(host_pool.available_size())
    step("insert d, host full", insert())
    cache.check_hicache_events()
    core = cache.tree_core
    with mock.patch.object(core, "drop_subtree_no_host", wraps=core.drop_subtree_no_host) as drop:
        r = cache.evict(evict)
    step("evict all, host full", (r.num_tokens_evicted, r.mamba_num_evicted, drop.call_count))
    host_pool.free(taken)
    cache.sanity_check()


def scripted_in_lock_step(
    cfg: Any,
    write_policy: str,
    script: Callable[[Any, Any], list[tuple]],
    state: Callable[[Any], list[tuple]],
) -> list[tuple]:
    """A scripted run (steps of `(name, result, tree)`) on SGLang's Python core and on the
    uniradix core, equal step by step; returns the Python core's steps."""
    python, uniradix = (
        run_hicache(cfg, core, write_policy, script, state).trace for core in ("python", "uniradix")
    )
    for expected, got in zip(python, uniradix, strict=True):
        assert got == expected, expected[0]
    return python


def assert_same_events_on_both_cores(
    run: Callable[..., HiCacheRun], cfg: Any, n: int, seed: int, policy: str = "write_through"
) -> None:
    """The KV events of the same stream (write-through unless `policy` says) on SGLang's
    Python core and on the uniradix core (`run(cfg, core, policy, n, seed, **kwargs)`
    playing it): device and host stores and removals (`medium` GPU and CPU), equal and in
    the same order."""
    python, uniradix = (
        run(cfg, core, policy, n, seed, enable_kv_cache_events=True).events
        for core in ("python", "uniradix")
    )
    media = {str(getattr(e, "medium", None)) for e in python}
    assert {"StorageMedium.GPU", "StorageMedium.CPU"} <= media, media
    assert uniradix == python


def node_paths(cache: Any) -> Iterator[tuple[Any, tuple[int, ...]]]:
    """Every node but the root, with the tokens of its root path (free of node ids)."""
    core, root = cache.tree_core, cache.root_node_handle()
    for node in core.get_all_node_ids():
        if node == root:
            continue
        path, cur = [], node
        while cur != root:
            path[:0] = core.get_node_token_ids(cur)
            cur = core.get_parent_node_id(cur)
        yield node, tuple(path)


def component_tree_state(cache: Any, components: tuple[Any, ...]) -> list[tuple]:
    """Every node's root path with, per component, which tiers hold it and its locks."""
    core = cache.tree_core
    rows = []
    for node, path in node_paths(cache):
        row: list[Any] = [path]
        for ct in components:
            row += [
                core.get_component_device_value(node, ct) is not None,
                core.get_component_host_value(node, ct) is not None,
                core.get_component_device_lock_ref(node, ct),
                core.get_component_host_lock_ref(node, ct),
            ]
        rows.append(tuple(row))
    return sorted(rows)
