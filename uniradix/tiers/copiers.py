"""Copiers: move one pool's entries between its device tensors and its host (L2) tensors.

`KVCopier` serves a full-attention or an SWA KV pool (SWA slots for the SWA pool),
`MambaCopier` a Mamba state pool. Both reduce a transfer to *row moves*: each tensor is seen
as 2-D views, one per layer, whose rows are the transfer unit (a whole page of one layer
when every index is a whole aligned page, else one slot), and a batch is a few torch calls
per view, never a Python loop over pages or tokens (over long runs of pages at most)::

    CPU, native:        one C loop over every view, one memmove per row or per run of
                        rows consecutive on both sides (`uniradix.native`: one pass over
                        the bytes, GIL released); without the native module:
    runs (any device):  dst[d:d+k].copy_(src[s:s+k]) per run of rows consecutive on both
                        sides, when runs average >= 1 MiB (`row_runs`: one pass, at most
                        one call per MiB moved); otherwise:
    same device (CPU):  dst.index_copy_(0, di, src.index_select(0, si))
                        (or one of them straight into / out of a contiguous run of rows)
    D2H (CUDA):         gather on the device -> non_blocking copy into pinned memory
                        -> (after the copy) scatter on the host, unless the host rows are
                        one contiguous run, which the copy writes directly
    H2D (CUDA):         gather on the host into pinned memory (or a contiguous run as is)
                        -> non_blocking copy -> scatter on the device

On CUDA a `page_first` host pool is moved per tensor, not per layer: the device gathers every
layer's rows into one buffer laid out as the host pages `[pages, layers, page]`, so each of
K and V crosses PCIe in one copy (`_move_grouped`).

Rows are moved as 16-byte elements (or the widest type that divides them): the copy is
byte-exact and the CPU index kernels move 8x fewer elements than per fp16 value. On the CPU
the gather of a scattered-to-scattered move goes through a staging buffer the copier keeps
(a fresh one per call would cost a page fault per 4 KiB, 3-4x the copy itself); a copier is
therefore driven by one thread at a time (its engine's).

`launch` enqueues the work on the current CUDA stream and returns a `Launch` whose
`complete()` runs the host-side steps once the stream has reached them (what
`CudaTransferEngine` does); `copy` is the blocking form the `Copier` protocol asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from uniradix import native
from uniradix.memory.host_kv import HostKVPool, HostMambaStates
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaStatePool
from uniradix.tiers.row_runs import Rows, common_runs, worth_runs
from uniradix.tiers.transfer import Direction
from uniradix.types import Slots

RowPair = tuple[torch.Tensor, torch.Tensor]  # (source rows, destination rows), 2-D views
_WIDE = ((torch.complex128, 16), (torch.int64, 8), (torch.int32, 4), (torch.int16, 2))


@dataclass
class Launch:
    """Work a copier has enqueued: `num_bytes` moved once the stream passes it and
    `complete()` has run the host-side steps. `keep` holds staging tensors alive until then."""

    num_bytes: int
    finish: list[Callable[[], object]] = field(default_factory=list)
    keep: list[torch.Tensor] = field(default_factory=list)

    def complete(self) -> None:
        for step in self.finish:
            step()
        self.finish.clear()
        self.keep.clear()


class _RowCopier:
    """Shared move logic; subclasses say which views a transfer moves and which slots are
    valid on each side."""

    device: torch.device
    # The staged path (gather, one copy, scatter, with host-side steps deferred to
    # `Launch.complete`): taken on CUDA; tests set it on the CPU to run that path there.
    staged: bool = False
    # The native row loop (CPU, not staged): on when `uniradix.native` is; tests switch it.
    use_native: bool = False
    _staging: torch.Tensor | None = None

    def copy(self, direction: Direction, src: Slots, dst: Slots) -> int:
        """Copies `src` entries to `dst` entries (blocking) and returns the bytes moved."""
        launch = self.launch(direction, src, dst)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        launch.complete()
        return launch.num_bytes

    def launch(self, direction: Direction, src: Slots, dst: Slots) -> Launch:
        """Enqueues the copy on the current stream (runs it, on the CPU); see module doc."""
        if not isinstance(direction, Direction):
            raise TypeError(f"direction must be a Direction, got {direction!r}")
        src, dst = _as_slots(src, "src"), _as_slots(dst, "dst")
        if len(src) != len(dst):
            raise ValueError(f"src has {len(src)} entries, dst has {len(dst)}")
        d2h = direction is Direction.D2H
        self._check_range(src, on_device=d2h, what="src")
        self._check_range(dst, on_device=not d2h, what="dst")
        if len(np.unique(dst)) != len(dst):
            values, counts = np.unique(dst, return_counts=True)
            raise ValueError(f"dst slot {int(values[counts > 1][0])} appears twice")
        unit = self._unit(src, dst)
        si, di = Rows(src[::unit] // unit), Rows(dst[::unit] // unit)
        launch = Launch(0)
        runs = common_runs(si, di)
        if self.use_native and not self.staged:
            pairs = [(d, h) if d2h else (h, d) for d, h in self._views(unit)]
            launch.num_bytes = native.copy_row_runs(pairs, runs)
            return launch
        groups = self._groups(unit) if self.staged else []
        for device_views, host_pages in groups:
            launch.num_bytes += _move_grouped(device_views, host_pages, si, di, d2h, launch)
        for device_rows, host_rows in [] if groups else self._views(unit):
            pair = (device_rows, host_rows) if d2h else (host_rows, device_rows)
            launch.num_bytes += _move(pair, si, di, self.staged, d2h, launch, self._stage, runs)
        return launch

    def _stage(self, like: torch.Tensor, num_rows: int) -> torch.Tensor:
        """A reused CPU buffer viewed as `[num_rows, like.shape[1]]` of `like.dtype`."""
        shape = (num_rows, int(like.shape[1]))
        num_bytes = num_rows * shape[1] * like.element_size()
        if self._staging is None or self._staging.numel() < num_bytes:
            self._staging = torch.empty(num_bytes, dtype=torch.uint8)
        return self._staging[:num_bytes].view(like.dtype).view(shape)

    def _views(self, unit: int) -> list[RowPair]:
        raise NotImplementedError

    def _groups(self, unit: int) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
        """Device views whose host rows sit side by side in one host tensor
        `[rows, len(views), row]` (page_first), so a CUDA transfer crosses PCIe once."""
        return []

    def _unit(self, src: Slots, dst: Slots) -> int:
        return 1

    def _check_range(self, slots: Slots, on_device: bool, what: str) -> None:
        raise NotImplementedError


class KVCopier(_RowCopier):
    """Moves K and V of every layer between `device_pool` and `host_pool`. Slots are token
    slots of each side; page 0 (slots below the host page size) is padding on both sides
    and refused. A `page_first` host pool with pages > 1 moves whole aligned pages only."""

    def __init__(self, device_pool: KVPool, host_pool: HostKVPool) -> None:
        if device_pool.num_layers != host_pool.num_layers:
            raise ValueError(
                f"device pool has {device_pool.num_layers} layers, host pool {host_pool.num_layers}"
            )
        if device_pool.num_layers:
            k0 = device_pool.k_buffers[0]
            host_shape = (host_pool.num_kv_heads, host_pool.head_dim)
            if tuple(k0.shape[1:]) != host_shape or k0.dtype != host_pool.dtype:
                raise ValueError(
                    f"device rows {tuple(k0.shape[1:])} {k0.dtype} differ from host rows "
                    f"{host_shape} {host_pool.dtype}"
                )
        self.device_pool = device_pool
        self.host_pool = host_pool
        buffers = device_pool.k_buffers
        self.device = buffers[0].device if buffers else torch.device("cpu")
        self.staged = self.device.type == "cuda"
        self.use_native = native.HAVE_NATIVE and self.device.type == "cpu"

    def _unit(self, src: Slots, dst: Slots) -> int:
        page_size = self.host_pool.page_size
        if page_size > 1 and _whole_pages(src, page_size) and _whole_pages(dst, page_size):
            return page_size
        if page_size > 1 and self.host_pool.layout == "page_first" and self.host_pool.num_layers:
            raise ValueError(
                f"a page_first host pool moves whole aligned pages of {page_size} slots; "
                f"got src starting {src[:page_size].tolist()}, dst starting "
                f"{dst[:page_size].tolist()}"
            )
        return 1

    def _views(self, unit: int) -> list[RowPair]:
        pairs: list[RowPair] = []
        usable = self.device_pool.num_slots // unit * unit  # whole rows of `unit` slots
        for layer in range(self.device_pool.num_layers):
            host_k, host_v = self.host_pool.page_rows(layer, unit)
            dev_k = self.device_pool.k_buffers[layer][:usable].view(usable // unit, -1)
            dev_v = self.device_pool.v_buffers[layer][:usable].view(usable // unit, -1)
            pairs += [(dev_k, host_k), (dev_v, host_v)]
        return pairs

    def _groups(self, unit: int) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
        host = self.host_pool
        if host.k_pages is None or host.v_pages is None:
            return []
        pairs = self._views(unit)
        return [
            ([k for k, _ in pairs[0::2]], host.k_pages.view(host.num_pages, host.num_layers, -1)),
            ([v for v, _ in pairs[1::2]], host.v_pages.view(host.num_pages, host.num_layers, -1)),
        ]

    def _check_range(self, slots: Slots, on_device: bool, what: str) -> None:
        limit = self.device_pool.num_slots if on_device else self.host_pool.num_slots
        _check_range(slots, self.host_pool.page_size, limit, on_device, what)


class MambaCopier(_RowCopier):
    """Moves the conv and temporal states of every layer between a `MambaStatePool` and a
    `HostMambaStates`; indices are state slots (1..num_slots on each side)."""

    def __init__(self, device_states: MambaStatePool, host_states: HostMambaStates) -> None:
        for name in ("conv_states", "temporal_states"):
            dev, host = getattr(device_states, name), getattr(host_states, name)
            if dev.shape[0] != host.shape[0] or dev.shape[2:] != host.shape[2:]:
                raise ValueError(
                    f"{name}: device {tuple(dev.shape)} and host {tuple(host.shape)} differ "
                    "in layers or state shape"
                )
            if dev.dtype != host.dtype:
                raise ValueError(f"{name}: device dtype {dev.dtype}, host dtype {host.dtype}")
        self.device_states = device_states
        self.host_states = host_states
        self.device = device_states.conv_states.device
        self.staged = self.device.type == "cuda"
        self.use_native = native.HAVE_NATIVE and self.device.type == "cpu"

    def _views(self, unit: int) -> list[RowPair]:
        pairs: list[RowPair] = []
        for name in ("conv_states", "temporal_states"):
            dev, host = getattr(self.device_states, name), getattr(self.host_states, name)
            for layer in range(dev.shape[0]):
                pairs.append((dev[layer].flatten(1), host[layer].flatten(1)))
        return pairs

    def _check_range(self, slots: Slots, on_device: bool, what: str) -> None:
        states = self.device_states if on_device else self.host_states
        _check_range(slots, 1, int(states.conv_states.shape[1]), on_device, what)


# ---------------------------------------------------------------------- row moves
def _move(
    pair: RowPair,
    si: Rows,
    di: Rows,
    staged: bool,
    d2h: bool,
    launch: Launch,
    stage: Callable[[torch.Tensor, int], torch.Tensor],
    runs: np.ndarray,
) -> int:
    """Rows `si` of `pair[0]` to rows `di` of `pair[1]`; returns the bytes. `runs` are the
    `common_runs` of `si` and `di`."""
    src, dst = _wide(pair[0]), _wide(pair[1])
    n = len(si)
    num_bytes = n * pair[0].shape[1] * pair[0].element_size()
    if n == 0 or num_bytes == 0:
        return 0
    device = src.device if d2h else dst.device
    if worth_runs(runs, num_bytes):
        # One pass, no index: each run is a slice-to-slice copy in the rows' own dtype (on
        # CUDA straight between device rows and the pinned host rows, which are contiguous).
        for s0, d0, k in runs.tolist():
            pair[1][d0 : d0 + k].copy_(pair[0][s0 : s0 + k], non_blocking=staged)
        return num_bytes
    if not staged:
        if di.start is not None:
            torch.index_select(src, 0, si.on(src.device), out=dst[di.start : di.start + n])
        elif si.start is not None:
            dst.index_copy_(0, di.on(dst.device), src[si.start : si.start + n])
        else:
            buffer = stage(src, n)
            torch.index_select(src, 0, si.on(src.device), out=buffer)
            dst.index_copy_(0, di.on(dst.device), buffer)
        return num_bytes
    if d2h:
        rows = src.index_select(0, si.on(device))
        run = None if di.start is None else dst[di.start : di.start + n]
        if run is not None and run.is_contiguous():
            run.copy_(rows, non_blocking=True)
            launch.keep.append(rows)
            return num_bytes
        host = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=dst.is_pinned())
        host.copy_(rows, non_blocking=True)
        host_index = di.on(dst.device)
        launch.keep += [rows, host]
        launch.finish.append(lambda: dst.index_copy_(0, host_index, host))
        return num_bytes
    run = None if si.start is None else src[si.start : si.start + n]
    if run is None or not run.is_contiguous():
        run = torch.empty((n, src.shape[1]), dtype=src.dtype, pin_memory=src.is_pinned())
        torch.index_select(src, 0, si.on(src.device), out=run)
    rows = run.to(device, non_blocking=True)
    dst.index_copy_(0, di.on(device), rows)
    launch.keep += [run, rows]
    return num_bytes


def _move_grouped(
    device_views: list[torch.Tensor],
    host_pages: torch.Tensor,
    si: Rows,
    di: Rows,
    d2h: bool,
    launch: Launch,
) -> int:
    """CUDA, page_first: rows `si` of every device view to host rows `di` of `host_pages`
    (`[rows, len(device_views), row]`), or back. The views are packed into one device
    buffer laid out as the host rows, so PCIe sees one copy per K or V."""
    views = [_wide(v) for v in device_views]
    host = _wide(host_pages)
    device = views[0].device
    n, row = len(si), int(views[0].shape[1])
    num_bytes = n * len(views) * row * views[0].element_size()
    if n == 0 or num_bytes == 0:
        return 0
    if d2h:
        index = si.on(device)
        per_view = torch.empty((len(views), n, row), dtype=views[0].dtype, device=device)
        for g, view in enumerate(views):
            torch.index_select(view, 0, index, out=per_view[g])
        staged = per_view.transpose(0, 1).contiguous()  # as the host rows: [n, views, row]
        launch.keep += [per_view, staged]
        if di.start is not None:
            host[di.start : di.start + n].copy_(staged, non_blocking=True)
            return num_bytes
        pinned = torch.empty(staged.shape, dtype=staged.dtype, pin_memory=host.is_pinned())
        pinned.copy_(staged, non_blocking=True)
        host_index = di.on(host.device)
        launch.keep.append(pinned)
        launch.finish.append(lambda: host.index_copy_(0, host_index, pinned))
        return num_bytes
    if si.start is not None:
        source = host[si.start : si.start + n]
    else:
        source = torch.empty((n, *host.shape[1:]), dtype=host.dtype, pin_memory=host.is_pinned())
        torch.index_select(host, 0, si.on(host.device), out=source)
    staged = source.to(device, non_blocking=True)
    per_view = staged.transpose(0, 1).contiguous()  # [views, n, row]
    index = di.on(device)
    for g, view in enumerate(views):
        view.index_copy_(0, index, per_view[g])
    launch.keep += [source, staged, per_view]
    return num_bytes


def _wide(rows: torch.Tensor) -> torch.Tensor:
    """`rows` reinterpreted as the widest type its row length, row stride and
    offset allow: same bytes, fewer elements for the index kernels."""
    size = rows.element_size()
    if rows.stride(-1) != 1:
        return rows
    byte_counts = [rows.shape[-1], rows.storage_offset(), *rows.stride()[:-1]]
    for wide, w in _WIDE:
        if w <= size:
            return rows
        if all(b * size % w == 0 for b in byte_counts):
            return rows.view(wide)
    return rows


def _whole_pages(slots: Slots, page_size: int) -> bool:
    if len(slots) % page_size:
        return False
    pages = slots.reshape(-1, page_size)
    return bool(np.all(pages[:, :1] % page_size == 0)) and bool(
        np.all(pages - pages[:, :1] == np.arange(page_size))
    )


def _as_slots(slots: Slots, what: str) -> Slots:
    if isinstance(slots, torch.Tensor):
        slots = slots.cpu().numpy()
    if not isinstance(slots, np.ndarray) or slots.dtype.kind not in "iu" or slots.ndim != 1:
        raise TypeError(f"{what} must be a 1-D integer array, got {type(slots).__name__}")
    return slots.astype(np.int64, copy=False)


def _check_range(slots: Slots, low: int, limit: int, on_device: bool, what: str) -> None:
    bad = slots[(slots < low) | (slots >= limit)]
    if len(bad):
        side = "device" if on_device else "host"
        raise ValueError(f"{what} {side} slot {int(bad[0])} out of range {low}..{limit - 1}")
