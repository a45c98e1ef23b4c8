"""Mamba state memory: the slot allocator, the state tensors, and the per-request slots.

A Mamba (SSM) layer's whole past is one fixed-size state per sequence: a conv state (the last
few inputs of the short convolution) and a temporal state (the SSM recurrence). A *slot*
indexes one such state in every Mamba layer at once::

    conv_states:     [num_layers, num_slots + 1, *conv_shape]
    temporal_states: [num_layers, num_slots + 1, *temporal_shape]
    slot:             0 (padding) | 1 | 2 | ... | num_slots

Slots are shared by running requests (their working state, plus up to two ping-pong tracking
slots in extra-buffer mode) and the radix tree (checkpointed states). Zero layers is allowed: a
simulation then carries the slot accounting without the memory.

This module is memory only: which slot holds which prefix's state is the tree's business
(`components/mamba.py`), when a request gets and gives back slots is the cache's
(`uniradix/cache/mamba_requests.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from uniradix.memory.allocator import TokenSlotAllocator
from uniradix.memory.kv_pool import check_rows
from uniradix.types import Req

PING_PONG_SIZE = 2


class MambaSlotAllocator(TokenSlotAllocator):
    """Hands out Mamba state slots `1..num_slots` (a state is one slot: page size 1); freeing
    a slot twice, or one never handed out, raises. As for KV slots, free slots form a stack,
    so the slots freed last are reused first and tests can pin exact slots."""

    def __init__(self, num_slots: int, device: str = "cpu") -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        super().__init__(num_slots, 1, device)

    # A state slot is one page, taken and given back one or two at a time per request
    # (several times per admission): plain Python on the free stack, no arrays made, with
    # the same order and the same checks as `alloc` / `free`.
    def alloc_one(self) -> int | None:
        if not self._top:
            return None
        self._top -= 1
        slot = int(self._stack[self._top])
        self._in_use[slot] = True
        return slot

    def free_slots(self, slots: Sequence[int]) -> None:
        if len(slots) > 2:
            self.free(np.array(list(slots), dtype=np.int64))
            return
        # One slot (a request's working state, most calls) needs no sort.
        ordered = [int(slots[0])] if len(slots) == 1 else sorted(int(s) for s in slots)
        if len(ordered) == 2 and ordered[0] == ordered[1]:
            raise ValueError(f"free: duplicate slots in one call: {ordered[:1]}")
        for slot in ordered:
            if not 1 <= slot <= self.num_pages:
                raise ValueError(f"free: pages outside [1, {self.num_pages}]: {ordered}")
            if not self._in_use[slot]:
                raise ValueError(
                    f"free: pages {[slot]} are not allocated (freed twice, or never allocated)"
                )
        for slot in reversed(ordered):  # the stack order `free_pages` leaves
            self._in_use[slot] = False
            self._stack[self._top] = slot
            self._top += 1


class MambaStatePool:
    """The conv and temporal state tensors of every Mamba layer, indexed by slot; on the
    host (`HostMambaStates`) pinned when they mirror a CUDA pool."""

    def __init__(
        self,
        num_slots: int,
        num_layers: int = 0,
        conv_shape: Sequence[int] = (1,),
        temporal_shape: Sequence[int] = (1,),
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
        pin_memory: bool = False,
    ) -> None:
        check_rows(num_slots, num_layers)
        self.num_slots = num_slots
        rows = (num_layers, num_slots + 1)
        self.conv_states, self.temporal_states = (
            torch.zeros((*rows, *shape), dtype=dtype, device=device, pin_memory=pin_memory)
            for shape in (conv_shape, temporal_shape)
        )
        # No state memory (a simulation): copies and clears have nothing to move.
        self._stateless = self.conv_states.numel() == 0 and self.temporal_states.numel() == 0

    @property
    def num_layers(self) -> int:
        return int(self.conv_states.shape[0])

    def size_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.conv_states, self.temporal_states))

    def copy(self, src_slot: int, dst_slot: int) -> None:
        """Every layer's state in `dst_slot` becomes a copy of `src_slot`'s."""
        if self._stateless:
            return
        self.conv_states[:, dst_slot] = self.conv_states[:, src_slot]
        self.temporal_states[:, dst_slot] = self.temporal_states[:, src_slot]

    def clear(self, slot: int) -> None:
        """Zero state: a sequence that has seen no token yet."""
        if self._stateless:
            return
        self.conv_states[:, slot] = 0
        self.temporal_states[:, slot] = 0


class MambaReqPool:
    """The Mamba slots of running requests, kept on the request record (`Req.mamba_*`).

    Every running request owns a *working* slot (`req.mamba_pool_idx`): the state after
    `token_ids[:kv_committed_len]`, which its Mamba layers read and update in place.

    Extra-buffer mode (needed for page_size > 1) adds two *ping-pong* tracking entries
    (`req.mamba_ping_pong`). A chunk rarely ends on a page boundary, yet the tree can only
    checkpoint a state at one, so during a forward pass the runner copies the state at the
    last checkpoint-grid position `s` it crosses into `track_slot(req)` and calls
    `commit_track(req, s)`. The entries alternate, so the last checkpoint survives while the
    next one is being written. An entry holds a slot only while it holds a state that can
    still be published: slots are taken when a track is written (`set_track_slot`), and given
    back when a newer state supersedes them (`commit_track`; a request publishes the prefix up
    to its committed length, never below its last tracked state) or when the tree takes or
    forgets them (a publish). So a request holds its working slot, one tracking slot between
    passes, and two only while a pass writes the next::

        entry:          0            1
        commit s1:      [state@s1]   None         last = 0, next = 1
        write s2:       [state@s1]   [state@s2]
        commit s2:      None         [state@s2]   last = 1, next = 0
    """

    def __init__(
        self, allocator: MambaSlotAllocator, states: MambaStatePool, extra_buffer: bool = False
    ) -> None:
        if states.conv_states.shape[1] < allocator.capacity + 1:
            raise ValueError(
                f"state pool has {states.conv_states.shape[1]} rows for "
                f"{allocator.capacity} slots (+1 padding)"
            )
        self.allocator = allocator
        self.states = states
        self.extra_buffer = extra_buffer

    def missing_slots(self, req: Req) -> int:
        """Slots `alloc_req` still has to hand `req` (its working slot)."""
        return 1 if req.mamba_pool_idx is None else 0

    def held_slots(self, req: Req) -> list[int]:
        held = [] if req.mamba_pool_idx is None else [req.mamba_pool_idx]
        return held + [s for s in req.mamba_ping_pong or () if s is not None]

    def alloc_req(self, req: Req) -> bool:
        """Gives `req` its working slot (and, in extra-buffer mode, two empty tracking entries)
        unless it has them already. The working state is *not* initialized (see
        `MambaStatePool.copy` / `clear`). Returns False, allocating nothing, when the pool is
        short."""
        if req.mamba_pool_idx is not None:
            return True
        slot = self.allocator.alloc_one()
        if slot is None:
            return False
        req.mamba_pool_idx = slot
        if self.extra_buffer:
            req.mamba_ping_pong = [None] * PING_PONG_SIZE
            req.mamba_next_track_idx = 0
        req.mamba_last_track_seqlen = None
        return True

    def free_req(self, req: Req, keep: int | None = None) -> None:
        """Gives back every slot `req` holds except `keep` (which the caller now owns) and
        clears its Mamba fields. Idempotent."""
        held = [s for s in self.held_slots(req) if s != keep]
        if held:
            self.allocator.free_slots(held)
        req.mamba_pool_idx = None
        req.mamba_ping_pong = None
        req.mamba_next_track_idx = 0
        req.mamba_last_track_seqlen = None

    # ------------------------------------------------------------------ ping-pong tracking
    def track_slot(self, req: Req) -> int | None:
        """The slot the runner writes the next tracked state into; None until one is set."""
        return self.track_slots(req)[req.mamba_next_track_idx]

    def set_track_slot(self, req: Req, slot: int) -> None:
        """Hands the free entry the runner writes next the (allocated) `slot`."""
        entries = self.track_slots(req)
        if entries[req.mamba_next_track_idx] is not None:
            raise ValueError(f"tracking entry {req.mamba_next_track_idx} already has a slot")
        entries[req.mamba_next_track_idx] = slot

    def commit_track(self, req: Req, seqlen: int) -> None:
        """`track_slot(req)` now holds the state after `token_ids[:seqlen]`; the older
        entry's state is superseded and its slot given back."""
        entries = self.track_slots(req)
        if not isinstance(seqlen, int) or seqlen <= 0:
            raise ValueError(f"commit_track: seqlen must be a positive int, got {seqlen!r}")
        last = req.mamba_last_track_seqlen
        if last is not None and seqlen <= last:
            raise ValueError(f"commit_track: seqlen={seqlen} is not past the last {last}")
        if entries[req.mamba_next_track_idx] is None:
            raise ValueError("commit_track: no slot to track into (set_track_slot first)")
        req.mamba_last_track_seqlen = seqlen
        req.mamba_next_track_idx = 1 - req.mamba_next_track_idx
        self.drop_track(req, req.mamba_next_track_idx)

    def drop_track(self, req: Req, idx: int) -> None:
        """Gives back entry `idx`'s slot, if any (its state will never be published)."""
        entries = self.track_slots(req)
        slot = entries[idx]
        if slot is not None:
            self.allocator.free_slots([slot])
            entries[idx] = None

    def tracked_entry(self, req: Req, max_seqlen: int) -> tuple[int, int] | None:
        """(ping-pong entry, seqlen) of the last tracked state if it is at or below
        `max_seqlen`, else None."""
        last = req.mamba_last_track_seqlen
        if last is None or last > max_seqlen:
            return None
        return 1 - req.mamba_next_track_idx, last

    def track_slots(self, req: Req) -> list[int | None]:
        """The request's two tracking entries (the list itself: donation empties an entry)."""
        if req.mamba_ping_pong is None:
            raise ValueError(
                "request has no ping-pong slots (extra-buffer mode off, or no Mamba slots: "
                "pass req= to match_prefix at admission)"
            )
        return req.mamba_ping_pong

    def reset(self) -> None:
        self.allocator.reset()
