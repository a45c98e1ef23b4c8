"""KVEventIndex: a router's view of what every instance caches, built only from the KV
events they publish (the job of llm-d's KV block index or Dynamo's indexer).

Per instance it keeps the published block hashes per medium and namespace (`lora_name`).
It is fed in-process (`apply`) or subscribes to publishers over ZeroMQ (`subscribe`, then
`poll`). Sequence numbers are checked per instance: a gap is filled from the publisher's
replay socket when it has one and the ring still holds the missing batches; otherwise the
instance is cleared (it then under-reports, never over-reports, until stores arrive again).
A sequence number going back means the publisher restarted: the instance is cleared.

`prefix_lengths(tokens)` answers, per instance, how many leading tokens it holds: the
request's pages are hashed with the publishers' chain (`uniradix.hashing.page`) and matched
page by page. Hybrid publishers' SWA / Mamba groups (`uniradix.events.groups`) are kept
apart: `resumable_lengths(tokens, media)` answers how many tokens an instance can resume
from, per medium.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import zmq

from uniradix.event_sink import MEDIUM_CPU_PINNED, MEDIUM_DISK, MEDIUM_GPU
from uniradix.events.replay_client import fetch_replay
from uniradix.events.resumable import GroupPages, resumable_pages
from uniradix.events.types import AllBlocksCleared, BlockStored, KVEvent, KVEventBatch
from uniradix.events.wire import decode_batch
from uniradix.hashing.events import block_hashing
from uniradix.hashing.page import chain_digests
from uniradix.key import RadixKey


@dataclass
class IndexStats:
    batches: int = 0
    gaps: int = 0  # sequence gaps seen
    replayed: int = 0  # batches recovered by replay
    resets: int = 0  # instances cleared for a gap that replay could not fill, or a restart
    orphan_stores: int = 0  # stores whose parent the instance does not hold (dropped)


# What other publishers call our media (SGLang's names): vLLM says `CPU` for the host tier
# and `STORAGE` for L3, SGLang `EXTERNAL` for a remote L3 (Mooncake).
MEDIUM_ALIASES = {
    "CPU": MEDIUM_CPU_PINNED,
    "CPU_TIER1": MEDIUM_CPU_PINNED,
    "STORAGE": MEDIUM_DISK,
    "EXTERNAL": MEDIUM_DISK,
}
MAIN_GROUP = 0  # the index's key for the full-attention group, whatever its `group_idx`
MAIN_KINDS = (None, "full_attention", "mla_attention", "sink_full_attention")


@dataclass
class _Instance:
    # (medium, lora_name, group) -> block hashes; group MAIN_GROUP or an auxiliary
    # group's `group_idx` (`uniradix.events.groups`)
    blocks: dict[tuple[str, str | None, int], set[int]] = field(default_factory=dict)
    # its auxiliary groups, learned from its stores: group_idx -> (kind, sliding window)
    groups: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    next_seq: int | None = None
    sub: zmq.Socket[bytes] | None = None
    replay_endpoint: str | None = None


class KVEventIndex:
    def __init__(
        self,
        block_size: int,
        cache_salt: str | None = None,
        hash_algo: str = "sglang_sha256",
        hash_seed: str | None = None,
        bigram: bool = False,
    ) -> None:
        """`hash_algo`, `hash_seed`, `cache_salt` and `bigram` (EAGLE publishers) must be
        the publishers' for `prefix_lengths` to find their blocks."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.bigram = bigram
        self.hashing = block_hashing(hash_algo, cache_salt, hash_seed, bigram)
        self._instances: dict[str, _Instance] = {}
        self.stats = IndexStats()
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._poller = zmq.Poller()
        self._by_socket: dict[zmq.Socket[bytes], str] = {}

    @property
    def instances(self) -> list[str]:
        return list(self._instances)

    def add_instance(self, instance: str) -> None:
        self._instances.setdefault(instance, _Instance())

    # ------------------------------------------------------------------ events
    def apply(self, instance: str, batch: KVEventBatch | bytes, seq: int | None = None) -> None:
        """Applies one batch from `instance` (decoded, or its payload in any wire shape);
        with `seq`, checks it against the instance's sequence first."""
        if isinstance(batch, bytes):
            batch = decode_batch(batch)
        inst = self._instances.setdefault(instance, _Instance())
        if seq is not None:
            if inst.next_seq is not None and seq < inst.next_seq:
                self._clear(inst)  # the publisher restarted
                self.stats.resets += 1
            elif inst.next_seq is not None and seq > inst.next_seq:
                self.stats.gaps += 1
                if not self._fill_gap(instance, inst, inst.next_seq, seq):
                    self._clear(inst)
                    self.stats.resets += 1
            inst.next_seq = seq + 1
        self.stats.batches += 1
        for event in batch.events:
            self._apply_event(inst, event)

    def _apply_event(self, inst: _Instance, event: KVEvent) -> None:
        if isinstance(event, AllBlocksCleared):
            self._clear(inst)
            return
        medium = event.medium or MEDIUM_GPU
        medium = MEDIUM_ALIASES.get(medium, medium)
        if isinstance(event, BlockStored):
            if event.kv_cache_spec_kind not in MAIN_KINDS and event.group_idx is not None:
                # A window's or a state's pages: no parent chain in the group itself.
                kind, window = event.kv_cache_spec_kind, event.kv_cache_spec_sliding_window
                inst.groups[event.group_idx] = (str(kind), window)
                key = (medium, event.lora_name, event.group_idx)
                inst.blocks.setdefault(key, set()).update(event.block_hashes)
                return
            blocks = inst.blocks.setdefault((medium, event.lora_name, MAIN_GROUP), set())
            parent = event.parent_block_hash
            # The parent may be held on another medium: a write-back host copy's parent can
            # be device-only (llm-d keys blocks across tiers the same way).
            if parent is not None and not any(
                parent in b
                for (_, lora, group), b in inst.blocks.items()
                if lora == event.lora_name and group == MAIN_GROUP
            ):
                self.stats.orphan_stores += 1  # as llm-d and Dynamo do: dropped
                return
            blocks.update(event.block_hashes)
            return
        group = event.group_idx if event.group_idx in inst.groups else MAIN_GROUP
        for blocks in [b for (m, _, g), b in inst.blocks.items() if m == medium and g == group]:
            blocks.difference_update(event.block_hashes)

    @staticmethod
    def _clear(inst: _Instance) -> None:
        inst.blocks.clear()

    # ------------------------------------------------------------------ queries
    def has_groups(self, instance: str) -> bool:
        """Whether `instance` published SWA / Mamba groups: a prefix it resumes from then
        ends only where its windows and states survive, not on any full page."""
        inst = self._instances.get(instance)
        return inst is not None and bool(inst.groups)

    def blocks(
        self,
        instance: str,
        medium: str = MEDIUM_GPU,
        lora_name: str | None = None,
        group: int = MAIN_GROUP,
    ) -> set[int]:
        """The block hashes `instance` holds on `medium` in `group` (a copy)."""
        return set(self._blocks(instance, medium, lora_name, group))

    def _blocks(self, instance: str, medium: str, lora_name: str | None, group: int) -> set[int]:
        inst = self._instances.get(instance)
        if inst is None:
            raise ValueError(f"unknown instance {instance!r}; known: {self.instances}")
        return inst.blocks.get((medium, lora_name, group), set())

    def page_hashes(
        self, tokens: Sequence[int] | np.ndarray, lora_name: str | None = None
    ) -> list[int]:
        """The published hashes of the whole pages of `tokens` (a request's, from the
        root)."""
        units = RadixKey(np.asarray(tokens, dtype=np.int64), is_bigram=self.bigram).units
        h, bs = self.hashing, self.block_size
        if h.hasher is None:
            blob = chain_digests(units, bs, h.seed, self.bigram)
        else:
            blob = h.hasher(units, bs, h.seed, lora_name, True)
        hashes: list[int] = h.published(blob).tolist()
        return hashes

    def prefix_lengths(
        self,
        tokens: Sequence[int] | np.ndarray,
        lora_name: str | None = None,
        medium: str = MEDIUM_GPU,
        hashes: list[int] | None = None,
    ) -> dict[str, int]:
        """Tokens of the longest cached prefix of `tokens` per instance (whole pages).
        `hashes` may pass `page_hashes(tokens)` already computed."""
        if hashes is None:
            hashes = self.page_hashes(tokens, lora_name)
        out = {}
        for name, inst in self._instances.items():
            blocks = inst.blocks.get((medium, lora_name, MAIN_GROUP), set())
            n = 0
            for h in hashes:
                if h not in blocks:
                    break
                n += 1
            out[name] = n * self.block_size
        return out

    def resumable_lengths(
        self,
        tokens: Sequence[int] | np.ndarray,
        media: Sequence[str] = (MEDIUM_GPU,),
        lora_name: str | None = None,
        hashes: list[int] | None = None,
        groups: bool = True,
    ) -> dict[str, int]:
        """Tokens per instance up to the deepest page boundary where it holds the full pages
        and every auxiliary group can resume (`uniradix.events.resumable`), counting pages
        held on any of `media`. Without group events (or with `groups=False`: what a
        full-only stream promises) it is the full-attention prefix."""
        if hashes is None:
            hashes = self.page_hashes(tokens, lora_name)
        return {
            name: self._resumable(inst, hashes, media, lora_name, groups) * self.block_size
            for name, inst in self._instances.items()
        }

    def _resumable(
        self,
        inst: _Instance,
        hashes: list[int],
        media: Sequence[str],
        lora_name: str | None,
        with_groups: bool = True,
    ) -> int:
        full = [inst.blocks.get((m, lora_name, MAIN_GROUP), set()) for m in media]
        groups = [
            GroupPages(kind, window, [inst.blocks.get((m, lora_name, g), set()) for m in media])
            for g, (kind, window) in inst.groups.items()
            if with_groups
        ]
        return resumable_pages(hashes, full, groups, self.block_size)

    def weighted_prefix(
        self, hashes: list[int], weights: dict[str, float], lora_name: str | None = None
    ) -> dict[str, tuple[float, int]]:
        """Per instance: (score, pages) of the resumable prefix of `hashes` on the media in
        `weights`: the media are added cheapest first (highest weight), and the pages each
        one adds to the resumable prefix score its weight (a device page 1, a host page
        llm-d's 0.8: it needs a load-back)."""
        order = sorted(weights, key=lambda m: -weights[m])
        out = {}
        for name, inst in self._instances.items():
            score, n = 0.0, 0
            for k, medium in enumerate(order):
                deeper = self._resumable(inst, hashes, order[: k + 1], lora_name)
                if deeper > n:
                    score += weights[medium] * (deeper - n)
                    n = deeper
            out[name] = (score, n)
        return out

    # ------------------------------------------------------------------ ZeroMQ
    def subscribe(
        self,
        instance: str,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic: bytes = b"",
    ) -> None:
        """Connects a SUB socket to `instance`'s publisher (its replay socket, if any, fills
        sequence gaps, including the batches sent before the subscription took effect)."""
        if self._ctx is None:
            self._ctx = zmq.Context()
        inst = self._instances.setdefault(instance, _Instance())
        if inst.sub is not None:
            raise ValueError(f"instance {instance!r} is already subscribed")
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, topic)
        sub.connect(endpoint)
        inst.sub, inst.replay_endpoint, inst.next_seq = sub, replay_endpoint, 0
        self._poller.register(sub, zmq.POLLIN)
        self._by_socket[sub] = instance

    def poll(self, timeout_ms: int = 0) -> int:
        """Applies every batch that arrives within `timeout_ms`; returns how many."""
        num = 0
        for sock, _ in self._poller.poll(timeout_ms):
            instance = self._by_socket[sock]
            while sock.poll(0):
                frames = sock.recv_multipart()
                if len(frames) != 3:
                    continue  # not `[topic, seq, payload]`
                self.apply(instance, frames[2], int.from_bytes(frames[1], "big"))
                num += 1
        return num

    def _fill_gap(self, instance: str, inst: _Instance, start: int, stop: int) -> bool:
        """Applies batches `[start, stop)` from the replay socket; False if it cannot."""
        if inst.replay_endpoint is None or self._ctx is None:
            return False
        got = fetch_replay(self._ctx, inst.replay_endpoint, start, stop)
        if got is None:
            return False
        for payload in got:
            self.stats.batches += 1
            self.stats.replayed += 1
            for event in decode_batch(payload).events:
                self._apply_event(inst, event)
        return True

    def close(self) -> None:
        for sock in self._by_socket:
            sock.close()
        self._by_socket.clear()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None


class IndexPublisher:
    """An `EventPublisher` that applies each batch to a `KVEventIndex` in-process, as
    `instance`, with consecutive sequence numbers (a simulated router's subscription)."""

    def __init__(self, index: KVEventIndex, instance: str) -> None:
        self.index = index
        self.instance = instance
        self.published = 0
        self.dropped = 0
        index.add_instance(instance)

    def publish(self, events: Sequence[KVEvent]) -> bool:
        self.index.apply(self.instance, KVEventBatch(time.time(), list(events), 0), self.published)
        self.published += 1
        return True

    def close(self) -> None:
        return
