"""Copiers: move one pool's entries between its device tensors and its host (L2) tensors.

`KVCopier` serves a full-attention or an SWA KV pool (SWA slots for the SWA pool),
`MambaCopier` a Mamba state pool. Both reduce a transfer to *row moves*: each tensor is seen
as 2-D views, one per layer, whose rows are the transfer unit (a whole page of one layer
when every index is a whole aligned page, else one slot), and a batch is a few torch calls
per view, never a Python loop over pages or tokens::

    same device (CPU):  dst.index_copy_(0, di, src.index_select(0, si))
                        (or one of them straight into / out of a contiguous run of rows)
    D2H (CUDA):         gather on the device -> non_blocking copy into pinned memory
                        -> (after the copy) scatter on the host, unless the host rows are
                        one contiguous run, which the copy writes directly
    H2D (CUDA):         gather on the host into pinned memory (or a contiguous run as is)
                        -> non_blocking copy -> scatter on the device

Rows are moved as int64 (or the widest integer that divides them): the copy is byte-exact
and the CPU index kernels run at memcpy speed instead of per fp16 element.

`launch` enqueues the work on the current CUDA stream and returns a `Launch` whose
`complete()` runs the host-side steps once the stream has reached them (what
`CudaTransferEngine` does); `copy` is the blocking form the `Copier` protocol asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from uniradix.memory.host_kv import HostKVPool, HostMambaStates
from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaStatePool
from uniradix.tiers.transfer import Direction
from uniradix.types import Slots

RowPair = tuple[torch.Tensor, torch.Tensor]  # (source rows, destination rows), 2-D views


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
        si, di = src[::unit] // unit, dst[::unit] // unit
        launch = Launch(0)
        for device_rows, host_rows in self._views(unit):
            pair = (device_rows, host_rows) if d2h else (host_rows, device_rows)
            launch.num_bytes += _move(pair, si, di, self.device, d2h, launch)
        return launch

    def _views(self, unit: int) -> list[RowPair]:
        raise NotImplementedError

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
    pair: RowPair, si: Slots, di: Slots, device: torch.device, d2h: bool, launch: Launch
) -> int:
    """Rows `si` of `pair[0]` to rows `di` of `pair[1]`; returns the bytes."""
    src, dst = _wide(pair[0]), _wide(pair[1])
    n = len(si)
    num_bytes = n * pair[0].shape[1] * pair[0].element_size()
    if n == 0 or num_bytes == 0:
        return 0
    if src.device == dst.device:
        if _is_run(di):
            torch.index_select(src, 0, _index(si, src.device), out=dst[di[0] : di[0] + n])
        elif _is_run(si):
            dst.index_copy_(0, _index(di, dst.device), src[si[0] : si[0] + n])
        else:
            dst.index_copy_(0, _index(di, dst.device), src.index_select(0, _index(si, src.device)))
        return num_bytes
    if d2h:
        staged = src.index_select(0, _index(si, device))
        run = dst[di[0] : di[0] + n] if _is_run(di) else None
        if run is not None and run.is_contiguous():
            run.copy_(staged, non_blocking=True)
            launch.keep.append(staged)
            return num_bytes
        host = torch.empty(staged.shape, dtype=staged.dtype, pin_memory=True)
        host.copy_(staged, non_blocking=True)
        host_index = _index(di, dst.device)
        launch.keep += [staged, host]
        launch.finish.append(lambda: dst.index_copy_(0, host_index, host))
        return num_bytes
    run = src[si[0] : si[0] + n] if _is_run(si) else None
    if run is None or not run.is_contiguous():
        run = torch.empty((n, src.shape[1]), dtype=src.dtype, pin_memory=src.is_pinned())
        torch.index_select(src, 0, _index(si, src.device), out=run)
    staged = run.to(device, non_blocking=True)
    dst.index_copy_(0, _index(di, device), staged)
    launch.keep += [run, staged]
    return num_bytes


def _wide(rows: torch.Tensor) -> torch.Tensor:
    """`rows` reinterpreted as the widest integer type its row length, row stride and
    offset allow: same bytes, fewer elements for the index kernels."""
    size = rows.element_size()
    for wide in (torch.int64, torch.int32, torch.int16):
        w = torch.empty((), dtype=wide).element_size()
        if w <= size:
            return rows
        byte_counts = (rows.shape[1] * size, rows.stride(0) * size, rows.storage_offset() * size)
        if rows.stride(1) == 1 and all(b % w == 0 for b in byte_counts):
            return rows.view(wide)
    return rows


def _index(rows: Slots, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(rows)).to(device)


def _is_run(rows: Slots) -> bool:
    """Ascending consecutive rows (one slice instead of an index)."""
    return (
        len(rows) > 0
        and int(rows[-1]) - int(rows[0]) == len(rows) - 1
        and (len(rows) == 1 or bool(np.all(np.diff(rows) == 1)))
    )


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
