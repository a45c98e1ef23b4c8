"""insert_host: pages that arrived from outside the device (an L3 prefetch) join the tree on
the host tier.

`insert_host(tier, key, host_slots, start)`: `host_slots` hold the KV of the key's tokens
`[start, start + len(host_slots))`; the tree must already hold the key's first `start`
tokens (on any tier; the caller pinned that path while the pages were fetched). Walking the
key (as the reference's `insert_host` does):

    root ... p | covered part of the range        | remainder
                 device nodes without a host copy   one new host-only leaf under the
                 get one from the slots; others     deepest matched node
                 keep theirs (the slots are spare)

- a matched node lying wholly inside the range and without a host copy takes its slice of
  the slots as its host copy (write-through: only where its parent has one, the tier's
  "child on the host => parent on the host" rule);
- the remainder becomes one host-only leaf, unless write-through forbids it (its parent is a
  device node without a host copy): then it is dropped (`stats.host_insert_dropped_tokens`);
- every slot not given to a node is freed. The slots belong to the tier from the call on.

With a hybrid cache the caller may pass `aux` (`HostAux`), the auxiliary host copies of
the range's end: the host SWA slots of its last tokens (the window, whole pages) and the
host Mamba state at its end. They go to the new host-only leaf, which is split where the
window starts so that only the window's part holds SWA host slots (the part before it is an
SWA host tombstone, as after host eviction); a Mamba state sits at the leaf's end. Aux slots
no node takes (no new leaf, a dropped remainder, window tokens below the leaf) are freed.

Returns the tokens that gained a host copy. Bad arguments raise `ValueError` and change
nothing (the caller keeps its slots).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from uniradix.components.aux_host import AuxHostComponent
from uniradix.event_sink import MEDIUM_CPU_PINNED
from uniradix.key import RadixKey
from uniradix.memory.allocator import to_numpy
from uniradix.tiers.host_aux import HostAux
from uniradix.tiers.write_policy import WritePolicy
from uniradix.tree.node import TreeNode
from uniradix.types import Slots

if TYPE_CHECKING:
    from uniradix.tiers.views import HostTierView


def _aux_component(tier: HostTierView, name: str) -> AuxHostComponent:
    component = tier.aux_by_name.get(name)
    if component is None:
        raise ValueError(f"insert_host: aux {name!r} given but the cache has no {name} host half")
    return component


def _check_aux(tier: HostTierView, aux: HostAux, num_slots: int) -> None:
    for name, value in (("swa", aux.swa), ("mamba", aux.mamba)):
        if value is None:
            continue
        component = _aux_component(tier, name)
        try:
            slots = to_numpy(value)
        except TypeError as exc:
            raise ValueError(f"insert_host: aux {name} must be 1-D integers ({exc})") from None
        n = int(slots.shape[0])
        problem = component.arrival_problem(n, num_slots)
        if problem is not None:
            raise ValueError(f"insert_host: aux {name} {problem}")
        pool = tier.host_pools.aux[name]
        if np.unique(slots).size != n or not pool.is_allocated(slots).all():
            raise ValueError(
                f"insert_host: aux {name} slots repeat a slot or hold one not allocated"
            )


def _check(tier: HostTierView, key: RadixKey, host_slots: Slots, start: int) -> Slots:
    ps = tier.cache.page_size
    if not isinstance(key, RadixKey):
        raise ValueError(f"insert_host: key must be a RadixKey, got {type(key).__name__}")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0 or start % ps:
        raise ValueError(f"insert_host: start={start!r} must be a non-negative multiple of {ps}")
    try:
        slots = to_numpy(host_slots)
    except TypeError as exc:
        raise ValueError(f"insert_host: host_slots must be 1-D integers ({exc})") from None
    n = int(slots.shape[0])
    if n % ps or start + n > len(key):
        raise ValueError(
            f"insert_host: {n} host slots from start={start} are not whole pages of "
            f"{ps} within the key's {len(key)} tokens"
        )
    if n and (np.unique(slots).size != n or not tier.host_pools.full.is_allocated(slots).all()):
        raise ValueError("insert_host: host_slots repeat a slot or hold one not allocated")
    return slots


def insert_host(
    tier: HostTierView, key: RadixKey, host_slots: Slots, start: int, aux: HostAux | None = None
) -> int:
    slots = _check(tier, key, host_slots, start)
    aux = aux or HostAux()
    _check_aux(tier, aux, int(slots.shape[0]))
    cache, full = tier.cache, tier.full
    tree, end = cache.tree, start + int(slots.shape[0])
    walk = tree.match(key, end, ())  # splits where the key ends or diverges inside a node
    if walk.matched_len < start:
        raise ValueError(
            f"insert_host: the tree holds {walk.matched_len} tokens of the key, fewer than "
            f"start={start}: the pages would hang under nothing"
        )
    if not slots.shape[0]:
        _free_aux(tier, aux)
        return 0
    strict = tier.policy is not WritePolicy.WRITE_BACK
    used = np.zeros(slots.shape[0], bool)
    gained: list[TreeNode] = []
    offset = 0
    for node in walk.path:
        d, parent = node.data[0], node.parent
        lo, offset = offset - start, offset + node.num_tokens
        if lo < 0 or d.host_value is not None:
            continue
        assert parent is not None
        if strict and parent is not tree.root and parent.data[0].host_value is None:
            continue
        full.commit_backup(node, slots[lo : lo + node.num_tokens].copy())
        used[lo : lo + node.num_tokens] = True
        gained.append(node)
    tokens = sum(n.num_tokens for n in gained)
    if walk.matched_len < end:
        parent = walk.path[-1] if walk.path else tree.root
        if strict and parent is not tree.root and parent.data[0].host_value is None:
            tier.stats.host_insert_dropped_tokens += end - walk.matched_len
        else:
            leaf, present, new = tree.insert(key, end, _ignore, inserted_len=end)
            assert new and present == walk.matched_len and leaf.parent is parent
            lo = present - start
            leaf.data[0].host_value = slots[lo:].copy()
            used[lo:] = True
            full.host_tokens += leaf.num_tokens
            tree.update_leaf(parent)  # a host-only child leaves a device leaf evictable
            full.update_host_leaf(parent)
            full.update_host_leaf(leaf)
            tokens += leaf.num_tokens  # before `_attach_aux` may split it
            gained.extend(_attach_aux(tier, leaf, aux))
    _free_aux(tier, aux)
    if not used.all():
        tier.host_pools.full.free(slots[~used], node_value=True)
    tier.host_pools.note_usage()
    sink = cache.event_sink
    if sink is not None:
        for node in gained:  # root-first: each parent is reported before its child
            sink.on_stored(node, MEDIUM_CPU_PINNED)
    return tokens


def _attach_aux(tier: HostTierView, leaf: TreeNode, aux: HostAux) -> list[TreeNode]:
    """Gives the new host-only `leaf` the aux copies of its end (taking them from `aux`);
    returns the new nodes, root-first."""
    nodes = [leaf]
    if aux.swa is not None:
        swa = to_numpy(aux.swa)
        keep = min(int(swa.shape[0]), leaf.num_tokens)
        if keep < leaf.num_tokens:  # only the window's part of the leaf holds SWA slots
            nodes.insert(0, tier.cache.tree.split(leaf, leaf.num_tokens - keep))
        _aux_component(tier, "swa").host.adopt(leaf, swa[len(swa) - keep :].copy())
        aux.swa = swa[: len(swa) - keep] if keep < len(swa) else None
    if aux.mamba is not None:  # after the split: the state is the tail's, at the range end
        _aux_component(tier, "mamba").host.adopt(leaf, to_numpy(aux.mamba).copy())
        aux.mamba = None
    return nodes


def _free_aux(tier: HostTierView, aux: HostAux) -> None:
    """Frees the aux slots no node took."""
    for name, value in (("swa", aux.swa), ("mamba", aux.mamba)):
        if value is not None and value.shape[0]:
            tier.host_pools.aux[name].free(to_numpy(value), node_value=True)
    aux.swa = aux.mamba = None


def _ignore(node: TreeNode, offset: int, num_tokens: int) -> None:
    """The walk above already handled the nodes the key covers."""
