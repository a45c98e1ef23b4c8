"""Host (L2) copies of the device pools' tensors: `HostKVPool` for KV, `HostMambaStates`.

A host pool holds tensors indexed by *host* slots; which host slot holds which prefix is the
tree's business and who owns a slot is the host allocator's (a `TokenSlotAllocator`, as on
the device). Slot 0 (and the rest of page 0) is padding, as on the device side, so a pool
of `num_slots` rows serves `num_slots - page_size` tokens.

Two KV layouts::

    layer_first: k_buffers[layer]  [num_slots, heads, head_dim]        (as the device pool)
    page_first:  k_pages           [num_pages, num_layers, page_size, heads, head_dim]

`page_first` keeps one page of every layer contiguous (all of K, then all of V), which is
the unit a storage (L3) write moves; `layer_first` mirrors the device pool, so a transfer of
whole token runs is one contiguous range per layer on both sides. Either way, a page of one
layer is one *row* of `page_rows(layer)`, the view the copiers move.

When the device pool lives on CUDA the host tensors are pinned, so copies can overlap with
compute. Zero layers is allowed: the pool then has no tensors and only carries accounting.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from uniradix.memory.kv_pool import KVPool
from uniradix.memory.mamba_pool import MambaStatePool
from uniradix.types import Slots

Layout = Literal["layer_first", "page_first"]
LAYOUTS: tuple[Layout, ...] = ("layer_first", "page_first")


class HostKVPool:
    def __init__(
        self,
        num_slots: int,
        num_layers: int = 0,
        num_kv_heads: int = 1,
        head_dim: int = 1,
        dtype: torch.dtype = torch.float32,
        page_size: int = 1,
        layout: Layout = "layer_first",
        pin_memory: bool = False,
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if page_size < 1 or num_layers < 0:
            raise ValueError(
                f"need page_size >= 1 and num_layers >= 0, got {page_size}, {num_layers}"
            )
        if num_slots < 2 * page_size or num_slots % page_size:
            raise ValueError(
                f"num_slots={num_slots} must be a multiple of page_size={page_size} holding "
                "the padding page and at least one more"
            )
        self.num_slots = num_slots
        self.page_size = page_size
        self.num_pages = num_slots // page_size
        self.layout: Layout = layout
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self._num_layers = num_layers
        self.k_buffers: list[torch.Tensor] = []
        self.v_buffers: list[torch.Tensor] = []
        self.k_pages: torch.Tensor | None = None
        self.v_pages: torch.Tensor | None = None
        if num_layers == 0:
            return
        pin = pin_memory
        if layout == "layer_first":
            shape: tuple[int, ...] = (num_slots, num_kv_heads, head_dim)
            self.k_buffers = [_zeros(shape, dtype, pin) for _ in range(num_layers)]
            self.v_buffers = [_zeros(shape, dtype, pin) for _ in range(num_layers)]
        else:
            shape = (self.num_pages, num_layers, page_size, num_kv_heads, head_dim)
            self.k_pages = _zeros(shape, dtype, pin)
            self.v_pages = _zeros(shape, dtype, pin)

    @classmethod
    def like(
        cls,
        device_pool: KVPool,
        num_slots: int,
        page_size: int = 1,
        layout: Layout = "layer_first",
    ) -> HostKVPool:
        """A host pool of `num_slots` rows with the device pool's layers, heads, head_dim and
        dtype; pinned when the device pool is on CUDA."""
        if device_pool.num_layers == 0:
            return cls(num_slots, 0, page_size=page_size, layout=layout)
        k0 = device_pool.k_buffers[0]
        return cls(
            num_slots,
            device_pool.num_layers,
            int(k0.shape[1]),
            int(k0.shape[2]),
            k0.dtype,
            page_size,
            layout,
            pin_memory=k0.is_cuda,
        )

    @property
    def num_layers(self) -> int:
        return self._num_layers

    @property
    def row_numel(self) -> int:
        """Elements of one token of one layer of K (or V)."""
        return self.num_kv_heads * self.head_dim

    def is_pinned(self) -> bool:
        tensors = self.k_buffers or ([self.k_pages] if self.k_pages is not None else [])
        return bool(tensors) and all(t.is_pinned() for t in tensors)

    def size_bytes(self) -> int:
        tensors = self.k_buffers + self.v_buffers
        tensors += [t for t in (self.k_pages, self.v_pages) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    def page_rows(self, layer: int, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of `layer` as 2-D views `[num_slots // page_size, page_size * heads * dim]`:
        row `r` is slots `[r * page_size, (r + 1) * page_size)`. `page_first` supports only
        `page_size` 1 or the pool's own (a row must be contiguous there)."""
        if self.layout == "layer_first":
            k, v = self.k_buffers[layer], self.v_buffers[layer]
            return k.view(-1, page_size * self.row_numel), v.view(-1, page_size * self.row_numel)
        assert self.k_pages is not None and self.v_pages is not None
        if page_size != self.page_size:
            raise ValueError(
                f"a page_first pool moves whole pages of {self.page_size} slots, not {page_size}"
            )
        return self.k_pages[:, layer].flatten(1), self.v_pages[:, layer].flatten(1)

    def get_kv(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V `[len(slots), heads, dim]` of `layer` at host `slots` (a copy)."""
        if self.layout == "layer_first":
            return self.k_buffers[layer][slots], self.v_buffers[layer][slots]
        assert self.k_pages is not None and self.v_pages is not None
        pages, offsets = slots // self.page_size, slots % self.page_size
        return self.k_pages[pages, layer, offsets], self.v_pages[pages, layer, offsets]

    # ------------------------------------------------------------------ page bytes (L3)
    def page_nbytes(self) -> int:
        """Bytes of one page of every layer, K and V."""
        return 2 * self._num_layers * self.page_size * self.row_numel * _itemsize(self.dtype)

    def page_bytes(self, pages: Slots) -> torch.Tensor:
        """The bytes of host `pages` as a contiguous uint8 tensor `[len(pages), page_nbytes()]`:
        per page, K of layers 0..L-1 then V of layers 0..L-1 (each `[page_size, heads, dim]`).
        The same bytes whichever the layout; `page_first` reads them with one gather."""
        index = self._page_index(pages)
        if self._num_layers == 0:
            return torch.empty((len(index), 0), dtype=torch.uint8)
        if self.k_pages is not None and self.v_pages is not None:
            both = torch.stack((self.k_pages[index], self.v_pages[index]), dim=1)
        else:
            rows = [self.page_rows(layer, self.page_size) for layer in range(self._num_layers)]
            k = torch.stack([kr[index] for kr, _ in rows], dim=1)
            v = torch.stack([vr[index] for _, vr in rows], dim=1)
            both = torch.stack((k, v), dim=1)
        return both.contiguous().view(torch.uint8).view(len(index), -1)

    def set_page_bytes(self, pages: Slots, data: torch.Tensor) -> None:
        """Inverse of `page_bytes`: writes `data` `[len(pages), page_nbytes()]` uint8 into
        host `pages`."""
        index = self._page_index(pages)
        expected = (len(index), self.page_nbytes())
        if data.dtype != torch.uint8 or tuple(data.shape) != expected:
            raise ValueError(f"page data must be uint8 {expected}, got {data.dtype} {data.shape}")
        if self._num_layers == 0:
            return
        shaped = data.contiguous().view(self.dtype)
        shaped = shaped.view(len(index), 2, self._num_layers, self.page_size * self.row_numel)
        if self.k_pages is not None and self.v_pages is not None:
            self.k_pages.view(self.num_pages, -1).index_copy_(0, index, shaped[:, 0].flatten(1))
            self.v_pages.view(self.num_pages, -1).index_copy_(0, index, shaped[:, 1].flatten(1))
            return
        for layer in range(self._num_layers):
            kr, vr = self.page_rows(layer, self.page_size)
            kr.index_copy_(0, index, shaped[:, 0, layer])
            vr.index_copy_(0, index, shaped[:, 1, layer])

    def _page_index(self, pages: Slots) -> torch.Tensor:
        pages = np.asarray(pages, dtype=np.int64)
        if pages.ndim != 1:
            raise ValueError(f"pages must be 1-D, got shape {pages.shape}")
        bad = pages[(pages < 1) | (pages >= self.num_pages)]
        if len(bad):
            raise ValueError(f"host page {int(bad[0])} out of range 1..{self.num_pages - 1}")
        return torch.from_numpy(pages)


class HostMambaStates(MambaStatePool):
    """Host copy of a `MambaStatePool`'s tensors, the same layout on the CPU (slot 0:
    padding), plus the byte view of one slot's state that L3 stores."""

    @classmethod
    def like(cls, device_states: MambaStatePool, num_slots: int) -> HostMambaStates:
        conv, temporal = device_states.conv_states, device_states.temporal_states
        return cls(
            num_slots,
            device_states.num_layers,
            tuple(conv.shape[2:]),
            tuple(temporal.shape[2:]),
            conv.dtype,
            pin_memory=conv.is_cuda and device_states.num_layers > 0,
        )

    # ------------------------------------------------------------------ state bytes (L3)
    def state_nbytes(self) -> int:
        """Bytes of one slot's state: conv then temporal, every layer."""
        return sum(
            t[:, 0].numel() * t.element_size() for t in (self.conv_states, self.temporal_states)
        )

    def state_bytes(self, slot: int) -> torch.Tensor:
        """Host state `slot` as a contiguous uint8 tensor of `state_nbytes()` bytes."""
        self._check_slot(slot)
        parts = [t[:, slot].contiguous().view(torch.uint8).flatten() for t in self._tensors()]
        return torch.cat(parts)

    def set_state_bytes(self, slot: int, data: torch.Tensor) -> None:
        """Inverse of `state_bytes`: writes `data` (uint8, `state_nbytes()`) into `slot`."""
        self._check_slot(slot)
        if data.dtype != torch.uint8 or tuple(data.shape) != (self.state_nbytes(),):
            raise ValueError(
                f"state data must be uint8 ({self.state_nbytes()},), got {data.dtype} "
                f"{tuple(data.shape)}"
            )
        start = 0
        for t in self._tensors():
            row = t[:, slot]
            n = row.numel() * t.element_size()
            row.copy_(data[start : start + n].view(t.dtype).view(row.shape))
            start += n

    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv_states, self.temporal_states

    def _check_slot(self, slot: int) -> None:
        if not 1 <= slot <= self.num_slots:
            raise ValueError(f"host state slot {slot} out of range 1..{self.num_slots}")


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, pin_memory: bool) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, pin_memory=pin_memory)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
