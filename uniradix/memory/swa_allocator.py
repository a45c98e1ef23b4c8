"""SWASlotAllocator: full-attention slots paired with slots of a smaller sliding-window pool.

A model mixing full-attention and sliding-window (SWA) layers keeps every token's full KV but
only a window of SWA KV. Each allocated token gets one slot in each pool; requests, rows and
the tree hold only the *full* slot, and `full_to_swa` maps it to its SWA peer (0 = none: slot
0 of the SWA pool is padding and never handed out)::

    full slot:   ps..2ps-1 | 2ps..3ps-1 | ...          (full pool, capacity C)
    full_to_swa: 7ps..8ps-1| 0 .. 0     | ...          (page 2's SWA peer was freed)
    SWA slot:    its own pages 1..C_swa/ps             (SWA pool, capacity C_swa <= C)

Freeing comes in three kinds, matching `FreeKind`: both sides (`free`), the SWA side only
(`free_swa`: a tombstone or an out-of-window position; the full slot stays allocated) and the
full side of a slot whose SWA side is already gone (`free_full_only`). The mapping is cleared
whenever an SWA peer is freed, so a stale peer can never be freed twice; and every free checks
the whole call before changing anything, so a bad call raises and leaves both pools intact.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from uniradix.memory.allocator import TokenSlotAllocator, to_numpy
from uniradix.types import Slots


class SWASlotAllocator:
    def __init__(
        self, full_tokens: int, swa_tokens: int, page_size: int = 1, device: str = "cpu"
    ) -> None:
        self.full = TokenSlotAllocator(full_tokens, page_size, device)
        self.swa = TokenSlotAllocator(swa_tokens, page_size, device)
        self.page_size = page_size
        self.device = self.full.device
        self.capacity = self.full.capacity
        self.swa_capacity = self.swa.capacity
        # Host-side, like every index the cache keeps; `translate` results go to the device
        # through the caller (see `UnifiedRadixCache.to_device`).
        self.full_to_swa: Slots = np.zeros((self.full.num_pages + 1) * page_size, dtype=np.int64)
        self._page_offsets = np.arange(page_size, dtype=np.int64)

    # ------------------------------------------------------------------ sizes
    def available_size(self) -> int:
        """Tokens `alloc` can serve now: the smaller of the two pools' free slots."""
        return min(self.full.available_size(), self.swa.available_size())

    def full_available_size(self) -> int:
        return self.full.available_size()

    def swa_available_size(self) -> int:
        return self.swa.available_size()

    def used_size(self) -> int:
        """Full slots in use (tree and requests)."""
        return self.full.used_size()

    def swa_used_size(self) -> int:
        return self.swa.used_size()

    # ------------------------------------------------------------------ alloc
    def alloc(self, num_tokens: int) -> torch.Tensor | None:
        """`num_tokens` full slots, each with a fresh SWA peer, or None when either pool is
        short (then nothing is taken from either)."""
        if num_tokens < 0 or num_tokens % self.page_size:
            raise ValueError(
                f"alloc({num_tokens}): need a non-negative multiple of page_size={self.page_size}"
            )
        if num_tokens > self.available_size():
            return None
        full, swa = self.full.alloc_host(num_tokens), self.swa.alloc_host(num_tokens)
        assert full is not None and swa is not None
        self.full_to_swa[full] = swa
        slots = torch.from_numpy(full)
        return slots if self.device.type == "cpu" else slots.to(self.device)

    def alloc_swa_for(self, full: Slots) -> Slots | None:
        """Gives allocated full slots without SWA peers (whole pages) fresh SWA peers and
        returns them, or None when the SWA pool is short (nothing changes). Used when the host
        tier loads a window's SWA KV back under full KV that stayed on the device."""
        pages = self._pages(full, node_value=True)
        if pages.size == 0:
            return np.empty(0, np.int64)
        if np.count_nonzero(self._peers(pages)):
            raise ValueError(f"alloc_swa_for: full slots {full[:8].tolist()} already have peers")
        swa = self.swa.alloc(int(full.shape[0]))
        if swa is None:
            return None
        peers = to_numpy(swa)
        self.full_to_swa[full] = peers
        return peers

    def translate(self, full: torch.Tensor | Slots) -> Slots:
        """SWA peers of full slots (0 where the peer was freed); raises on a slot outside the
        pool."""
        return self.peers_of(self._checked(full))

    def peers_of(self, full: Slots) -> Slots:
        """`translate` without the range check, for slots known to be in the pool (the
        tree's own, or ones checked on entry): the check costs more than the lookup."""
        return self.full_to_swa[full]

    # ------------------------------------------------------------------ free
    def free(self, full: torch.Tensor | Slots, node_value: bool = False) -> None:
        """Frees full slots and whatever SWA peers they still have."""
        pages = self._pages(full, node_value)
        if pages.size:
            peers = self._peers(pages)
            mapped = peers[peers > 0]
            if mapped.size:
                self.swa.free(mapped)
            self._unmap(pages)
            self.full.free_pages(pages)

    def free_full_only(self, full: torch.Tensor | Slots, node_value: bool = False) -> None:
        """Frees full slots whose SWA peers were freed already; raises if one still has one
        (freeing it here would leak the peer)."""
        pages = self._pages(full, node_value)
        if pages.size:
            peers = self._peers(pages)
            if np.count_nonzero(peers):
                raise ValueError(
                    f"free_full_only: pages {pages[peers > 0][:8].tolist()} still have SWA "
                    f"peers {peers[peers > 0][:8].tolist()}; free them with free()"
                )
            self.full.free_pages(pages)

    def free_swa(self, full: torch.Tensor | Slots, node_value: bool = False) -> None:
        """Frees only the SWA peers of full slots (the full slots stay allocated); raises if a
        peer is already gone, which would be a double free."""
        pages = self._pages(full, node_value)
        if pages.size:
            peers = self._peers(pages)
            if np.count_nonzero(peers) != peers.size:
                raise ValueError(
                    f"free_swa: pages {pages[peers == 0][:8].tolist()} have no SWA peer "
                    "(freed twice?)"
                )
            self.swa.free(peers)
            self._unmap(pages)

    def move_swa(self, kept_and_incoming: torch.Tensor | Slots, node_value: bool = False) -> None:
        """Row 0 (`kept`) are full slots without SWA peers, row 1 (`incoming`) full slots with
        them, both whole pages in the same order: each kept slot takes over the SWA peer of
        the incoming slot at the same position, and the incoming full slots are freed.

        Used when the tree recovers SWA KV for a node whose (locked) full slots must stay.
        (`node_value` is accepted like every free function's and not needed here.)"""
        both = (
            kept_and_incoming.detach().cpu().numpy()
            if isinstance(kept_and_incoming, torch.Tensor)
            else kept_and_incoming
        )
        if both.ndim != 2 or both.shape[0] != 2:
            raise ValueError(f"move_swa needs a 2 x n array, got {tuple(both.shape)}")
        kept, incoming = to_numpy(both[0]), to_numpy(both[1])
        kept_pages, incoming_pages = self._pages(kept), self._pages(incoming)
        peers = self._peers(incoming_pages)
        if np.count_nonzero(self._peers(kept_pages)) or np.count_nonzero(peers) != peers.size:
            raise ValueError(
                f"move_swa: kept slots {kept[:8].tolist()} must have no SWA peers and incoming "
                f"slots {incoming[:8].tolist()} must all have one"
            )
        self.full_to_swa[kept] = self.full_to_swa[incoming]
        self._unmap(incoming_pages)
        self.full.free_pages(incoming_pages)

    # ------------------------------------------------------------------ state
    def is_allocated(self, full: torch.Tensor | Slots) -> npt.NDArray[np.bool_]:
        """Per full slot: is it handed out."""
        return self.full.is_allocated(full)

    def reset(self) -> None:
        self.full.reset()
        self.swa.reset()
        self.full_to_swa[:] = 0

    # ------------------------------------------------------------------ internals
    def _checked(self, full: torch.Tensor | Slots) -> Slots:
        slots = to_numpy(full)
        if slots.size and (slots.min() < 0 or slots.max() >= self.full_to_swa.size):
            raise ValueError(
                f"full slots outside [0, {self.full_to_swa.size}): {slots[:8].tolist()}"
            )
        return slots

    def _pages(self, full: torch.Tensor | Slots, node_value: bool = False) -> Slots:
        """Distinct allocated full pages of `full` (raises otherwise; changes nothing)."""
        slots = to_numpy(full)
        return self.full.checked_pages(slots, node_value) if slots.size else slots

    def _peers(self, pages: Slots) -> Slots:
        """The first SWA slot of each full page's peer page (0 = none)."""
        return self.full_to_swa[pages * self.page_size if self.page_size > 1 else pages]

    def _unmap(self, pages: Slots) -> None:
        if self.page_size == 1:
            self.full_to_swa[pages] = 0
        else:
            slots = (pages[:, None] * self.page_size + self._page_offsets).reshape(-1)
            self.full_to_swa[slots] = 0
