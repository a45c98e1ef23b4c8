"""Host-tier transfer throughput (GB/s), D2H and H2D, against a plain torch copy of the bytes.

Model rows: 32 layers x 8 KV heads x head_dim 128 x fp16, i.e. 2 KiB per token per layer for
K (and as much for V), 128 KiB per token over all layers. One batch moves 2,048 tokens
(256 MiB) of one node chain through the public engine (`submit` then `wait`), for

- "2 MB pages": page_size 1024, so each page of one layer's K (or V) is a 2 MiB row;
- "16-token pages": page_size 16, 32 KiB rows per layer (a page of every layer's K is 1 MiB
  contiguous in `page_first`),

each layout (`layer_first`, `page_first`) and three index patterns: device and host pages both
scattered at random (the worst case), scattered device pages into / out of a run of
consecutive host pages (what a freshly allocated host range looks like), and runs of 512
tokens consecutive on both sides at random places (prefixes allocated in one go). "plain" is
`dst.copy_(src)` of one contiguous tensor of the same bytes, between the same two devices
(CPU to CPU here; GPU to pinned host and back with `--device cuda`); "torch idx" moves the
same slots the obvious torch way, per layer `dst_k[layer][dst_slots] = src_k[layer][src_slots]`
(advanced indexing on token slots; `k_pages[page, layer, offset]` for `page_first`); "torch
path" is ours without the native module (`UNIRADIX_NO_NATIVE=1`: runs of rows as slice
copies, the rest a gather into a staging buffer and a scatter; "ours" is the native loop
when `uniradix._native` is built); "memmove" (CPU only) is the floor of any copier that
moves pages one by one with the C library's copy: `ctypes.memmove` of each page of each
layer's K and V from its source address to its destination address, addresses computed
before timing, no indexing, no torch call (a Python loop, so about 0.3 us per page of
overhead is in it); "cached stores" is ours with the native loop's normal (cached) stores
only: above 8 MiB the loop writes with non-temporal stores, which skip reading each
destination line into the caches first, as the plain copy's `memcpy` does. All six are timed
alternately so they see the same machine load.
Medians of `--reps` runs. On the CPU torch runs `--threads` intra-op threads (default 1: on a shared
2-core machine a second thread only adds contention to both sides).

Run: `python -m benchmarks.transfer [--device cuda] [--reps 7] [--threads 1] [--out FILE.md]`.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from uniradix import native
from uniradix.memory.host_kv import LAYOUTS, HostKVPool, Layout
from uniradix.memory.kv_pool import KVPool
from uniradix.tiers.async_engine import CudaTransferEngine, ThreadTransferEngine
from uniradix.tiers.copiers import KVCopier
from uniradix.tiers.transfer import CopyOp, Direction, TransferEngine

LAYERS, HEADS, HEAD_DIM, DTYPE = 32, 8, 128, torch.float16
BATCH_TOKENS = 2048
CASES = (("2 MB", 1024), ("16-token", 16))
PATTERNS = ("scattered", "host run", "512-token runs")
RUN_TOKENS = 512


@dataclass(frozen=True)
class Row:
    page: str
    layout: str
    direction: str
    pattern: str
    ours_gbps: float
    plain_gbps: float
    indexed_gbps: float
    # Per repetition, plain time / ours time (each pair timed back to back): their median
    # and range, steadier than a ratio of medians when the machine's load drifts.
    paired_ratios: tuple[float, ...]
    # The same, for the copier's torch path (no native module): the before/after
    # comparison under the same load.
    torch_path_ratios: tuple[float, ...]
    # plain time / per-page memmove time (CPU; empty on CUDA)
    memmove_ratios: tuple[float, ...]
    # plain time / ours with the native loop's cached stores only (no streaming stores; CPU
    # with the native module, else empty): the C loop of memmoves against the floor above
    cached_ratios: tuple[float, ...]

    @property
    def ratio(self) -> float:
        return statistics.median(self.paired_ratios)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(fn: Callable[[], None], device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def _pages_to_slots(pages: np.ndarray, page_size: int) -> np.ndarray:
    return (pages[:, None] * page_size + np.arange(page_size)).reshape(-1)


def _runs_of_pages(
    rng: np.random.Generator, pool_pages: int, batch_pages: int, run_pages: int
) -> np.ndarray:
    """`batch_pages` pages of 1..pool_pages in runs of `run_pages` consecutive pages, the
    runs at random aligned places and in random order."""
    run_pages = max(1, min(run_pages, batch_pages))
    slots = pool_pages // run_pages
    chosen = rng.permutation(slots)[: batch_pages // run_pages]
    return (1 + chosen[:, None] * run_pages + np.arange(run_pages)).reshape(-1)


def _indexed_copy(device_pool: KVPool, host_pool: HostKVPool, op: CopyOp) -> None:
    """`op` done the obvious torch way: advanced indexing on token slots, per layer."""
    d2h = op.direction is Direction.D2H
    dev_slots = torch.from_numpy(op.src if d2h else op.dst)
    host_slots = torch.from_numpy(op.dst if d2h else op.src)
    page, offset = host_slots // host_pool.page_size, host_slots % host_pool.page_size
    for layer in range(device_pool.num_layers):
        for dev, host_buffers, host_pages in (
            (device_pool.k_buffers[layer], host_pool.k_buffers, host_pool.k_pages),
            (device_pool.v_buffers[layer], host_pool.v_buffers, host_pool.v_pages),
        ):
            if host_pages is None:
                if d2h:
                    host_buffers[layer][host_slots] = dev[dev_slots].cpu()
                else:
                    dev[dev_slots] = host_buffers[layer][host_slots].to(dev.device)
            elif d2h:
                host_pages[page, layer, offset] = dev[dev_slots].cpu()
            else:
                dev[dev_slots] = host_pages[page, layer, offset].to(dev.device)


def _page_memmoves(
    device_pool: KVPool, host_pool: HostKVPool, op: CopyOp, page_size: int
) -> Callable[[], None]:
    """`op` as one `ctypes.memmove` per page of each layer's K and V (see module doc)."""
    d2h = op.direction is Direction.D2H
    dev_rows = (op.src if d2h else op.dst)[::page_size] // page_size
    host_rows = (op.dst if d2h else op.src)[::page_size] // page_size
    moves: list[tuple[int, int]] = []
    row_bytes = 0
    for layer in range(device_pool.num_layers):
        host_k, host_v = host_pool.page_rows(layer, page_size)
        for dev, host in (
            (device_pool.k_buffers[layer], host_k),
            (device_pool.v_buffers[layer], host_v),
        ):
            dev = dev[: dev.shape[0] // page_size * page_size].view(-1, host.shape[1])
            row_bytes = int(host.shape[1]) * host.element_size()
            dev_at = dev.data_ptr() + dev_rows * dev.stride(0) * dev.element_size()
            host_at = host.data_ptr() + host_rows * host.stride(0) * host.element_size()
            pairs = zip(host_at, dev_at, strict=True) if d2h else zip(dev_at, host_at, strict=True)
            moves += [(int(dst), int(src)) for dst, src in pairs]

    def run() -> None:
        memmove = ctypes.memmove
        for dst, src in moves:
            memmove(dst, src, row_bytes)

    return run


def run_case(
    page: str, page_size: int, layout: Layout, device: str, reps: int, seed: int = 0
) -> list[Row]:
    batch_pages = BATCH_TOKENS // page_size
    pool_pages = 2 * batch_pages  # room to scatter the batch
    num_slots = (pool_pages + 1) * page_size  # + the padding page
    device_pool = KVPool(num_slots, LAYERS, HEADS, HEAD_DIM, DTYPE, device)
    host_pool = HostKVPool.like(device_pool, num_slots, page_size, layout)
    engine: TransferEngine
    copiers = {"full": KVCopier(device_pool, host_pool)}
    if device == "cuda":
        engine = CudaTransferEngine(copiers, device)
    else:
        engine = ThreadTransferEngine(copiers)
    num_bytes = BATCH_TOKENS * LAYERS * 2 * HEADS * HEAD_DIM * DTYPE.itemsize
    pin = device == "cuda"
    plain_dev = torch.ones(num_bytes // 2, dtype=DTYPE, device=device)
    plain_host = torch.ones(num_bytes // 2, dtype=DTYPE, pin_memory=pin)
    rng = np.random.default_rng(seed)
    rows = []
    for pattern in PATTERNS:
        dev_pages = rng.permutation(np.arange(1, pool_pages + 1))[:batch_pages]
        if pattern == "scattered":
            host_pages = rng.permutation(np.arange(1, pool_pages + 1))[:batch_pages]
        elif pattern == "host run":
            host_pages = np.arange(1, batch_pages + 1)
        else:
            dev_pages = _runs_of_pages(rng, pool_pages, batch_pages, RUN_TOKENS // page_size)
            host_pages = _runs_of_pages(rng, pool_pages, batch_pages, RUN_TOKENS // page_size)
        dev_slots = _pages_to_slots(dev_pages, page_size)
        host_slots = _pages_to_slots(host_pages, page_size)
        for direction in (Direction.D2H, Direction.H2D):
            if direction is Direction.D2H:
                op = CopyOp("full", direction, dev_slots, host_slots)
                plain_src, plain_dst = plain_dev, plain_host
            else:
                op = CopyOp("full", direction, host_slots, dev_slots)
                plain_src, plain_dst = plain_host, plain_dev

            def ours(op: CopyOp = op) -> None:
                engine.wait(engine.submit([op]))
                engine.poll()

            def plain(src: torch.Tensor = plain_src, dst: torch.Tensor = plain_dst) -> None:
                dst.copy_(src, non_blocking=True)

            def indexed(op: CopyOp = op) -> None:
                _indexed_copy(device_pool, host_pool, op)

            def torch_path(op: CopyOp = op) -> None:
                copier = copiers["full"]
                saved, copier.use_native = copier.use_native, False
                try:
                    ours(op)
                finally:
                    copier.use_native = saved

            def cached_stores(op: CopyOp = op) -> None:
                saved = native.copy_row_runs
                native.copy_row_runs = functools.partial(saved, streaming=False)
                try:
                    ours(op)
                finally:
                    native.copy_row_runs = saved

            memmove = cached = None
            if device == "cpu":
                memmove = _page_memmoves(device_pool, host_pool, op, page_size)
                cached = cached_stores if native.HAVE_NATIVE else None
            ours(), plain(), indexed(), torch_path()  # warm-up: allocator, staging, page faults
            memmove_s: list[float] = []
            cached_s: list[float] = []
            ours_s: list[float] = []
            plain_s: list[float] = []
            indexed_s: list[float] = []
            torch_path_s: list[float] = []
            for _ in range(reps):
                ours_s.append(_timed(ours, device))
                plain_s.append(_timed(plain, device))
                indexed_s.append(_timed(indexed, device))
                torch_path_s.append(_timed(torch_path, device))
                if memmove is not None:
                    memmove_s.append(_timed(memmove, device))
                if cached is not None:
                    cached_s.append(_timed(cached, device))
            if engine.failed():
                raise RuntimeError(f"a transfer failed: {page} {layout} {direction}")
            rows.append(
                Row(
                    page,
                    layout,
                    direction.name,
                    pattern,
                    num_bytes / statistics.median(ours_s) / 1e9,
                    num_bytes / statistics.median(plain_s) / 1e9,
                    num_bytes / statistics.median(indexed_s) / 1e9,
                    tuple(p / o for p, o in zip(plain_s, ours_s, strict=True)),
                    tuple(p / g for p, g in zip(plain_s, torch_path_s, strict=True)),
                    tuple(p / m for p, m in zip(plain_s, memmove_s, strict=False)),
                    tuple(p / c for p, c in zip(plain_s, cached_s, strict=False)),
                )
            )
    engine.close()
    return rows


def table(rows: list[Row], device: str) -> str:
    lines = [
        f"Device: {device} (torch threads: {torch.get_num_threads()}); {LAYERS} layers x "
        f"{HEADS} KV heads x {HEAD_DIM} x fp16, {BATCH_TOKENS} tokens "
        f"({BATCH_TOKENS * LAYERS * 4 * HEADS * HEAD_DIM >> 20} MiB) per batch; native "
        f"module: {'on' if native.HAVE_NATIVE else 'off'}.",
        "",
        "| page | layout | direction | slots | ours GB/s | plain GB/s | torch idx GB/s "
        "| ours / plain (paired median) | range | torch path / plain | ours / torch idx "
        "| memmove / plain | ours / memmove | cached stores / memmove |",
        "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        floor = "- | - | -"
        if r.memmove_ratios:
            m = statistics.median(r.memmove_ratios)
            cached = statistics.median(r.cached_ratios) / m if r.cached_ratios else None
            floor = f"{m:.2f} | {r.ratio / m:.2f} | " + (f"{cached:.2f}" if cached else "-")
        lines.append(
            f"| {r.page} | {r.layout} | {r.direction} | {r.pattern} | {r.ours_gbps:.1f} | "
            f"{r.plain_gbps:.1f} | {r.indexed_gbps:.1f} | {r.ratio:.2f} | "
            f"{min(r.paired_ratios):.2f}-{max(r.paired_ratios):.2f} | "
            f"{statistics.median(r.torch_path_ratios):.2f} | "
            f"{r.ours_gbps / r.indexed_gbps:.2f} | {floor} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--out", help="also write the table (markdown) to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows: list[Row] = []
    for page, page_size in CASES:
        for layout in LAYOUTS:
            rows += run_case(page, page_size, layout, args.device, args.reps)
            gc.collect()
    text = table(rows, args.device)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
