"""Backups of the host tier: what a write backs up, the batch that does it, and its undoing.

- `hot_anchor`: the deepest node of an insert's path hit often enough for the policy;
- `backup_plan`: the chain without a full host copy (root-first, a contiguous run ending at
  the anchor, as "child backed up => parent backed up" holds under write-through) and the
  backed-up nodes above it whose device window or state has no host copy: it came back to
  the device after their backup (an insert revived an SWA tombstone, or published a Mamba
  state on a backed-up fragment), so their next device tombstone would lose it;
- `submit_backup`: one batch for both: host slots committed now, bytes moved by the engine;
  the chain is marked `{"write": ticket}`, the revived copies are remembered by ticket
  (`tier.revived_copies`) so a failed batch can drop them, and every node whose window or
  state the batch reads stays locked until the ack (`tier.writes`, `tier.aux_locks`);
- `drop_failed_backup`: a batch whose copy raised loses its host copies.

The controller (`uniradix.tiers.controller`) calls these and drains the acks.
"""

from __future__ import annotations

import numpy as np

from uniradix.tiers import aux_tier
from uniradix.tiers.transfer import AuxCopy, CopyOp, Direction
from uniradix.tiers.views import HostTierView
from uniradix.tree.node import TreeNode
from uniradix.types import Slots


def hot_anchor(node: TreeNode, threshold: int) -> TreeNode | None:
    """The deepest node from `node` up hit at least `threshold` times; None if none."""
    anchor: TreeNode | None = node
    while anchor is not None and anchor.parent is not None:
        if anchor.hit_count >= threshold:
            return anchor
        anchor = anchor.parent
    return None


def backup_plan(tier: HostTierView, node: TreeNode) -> tuple[list[TreeNode], list[TreeNode]]:
    """`node` and its ancestors without a host copy, root-first; and, root-first, the
    backed-up ones above them whose device window or state has no host copy."""
    chain, revived, aux = [], [], tier.aux_indices
    for n in tier.cache.tree.path_to_root(node):
        if n.data[0].host_value is None:
            chain.append(n)
        elif aux and aux_tier.lacks_host_copy(n, aux):
            revived.append(n)
    chain.reverse()
    revived.reverse()
    return chain, revived


def submit_backup(
    tier: HostTierView,
    chain: list[TreeNode],
    anchor: TreeNode,
    lock: bool,
    revived: list[TreeNode] | None = None,
) -> int | None:
    """One batch: the full KV (and window, state) of `chain`, plus the window and state of
    the `revived` nodes above it (their full KV has its host copy already). With `lock` the
    anchor stays device-locked until the ack (`tier.writes`). Returns the ticket, or None
    when the host pools could take nothing."""
    ops = []
    if chain:
        num = sum(n.num_tokens for n in chain)
        host = tier.alloc_host(num)
        if host is None:
            tier.stats.write_skipped_tokens += num
            chain = []
        else:
            ops.append(_full_backup(tier, chain, host))
    copies: list[AuxCopy] = []
    ops += aux_tier.backup_ops(tier, [*(revived or ()), *chain], copies)
    if not ops:
        return None
    ticket = tier.engine.submit(ops)
    tier.stats.written_tokens += sum(n.num_tokens for n in chain)
    for n in chain:
        n.data[0].metadata = {"write": ticket}
    if revived:  # a failed batch must drop them: no write mark says they are in flight
        above = set(revived)
        if mine := [c for c in copies if c[0] in above]:
            tier.revived_copies[ticket] = mine
    if lock:
        tier.writes[ticket] = (anchor, tier.cache.inc_lock_ref(anchor))
        # The anchor's lock holds the chain's full KV but only the window and the state
        # near the anchor: every other node whose window or state the batch reads is locked
        # too, or device eviction could free slots (for a new request to overwrite) that an
        # asynchronous copy has yet to read.
        if others := [n for n in dict.fromkeys(c[0] for c in copies) if n is not anchor]:
            tier.aux_locks[ticket] = [(n, tier.cache.inc_lock_ref(n)) for n in others]
    return ticket


def _full_backup(tier: HostTierView, chain: list[TreeNode], host: Slots) -> CopyOp:
    values = [n.data[0].value for n in chain]
    src = np.concatenate(values) if len(values) > 1 else values[0]  # type: ignore[arg-type]
    assert src is not None
    start = 0
    for n in chain:
        tier.full.commit_backup(n, host[start : start + n.num_tokens])
        start += n.num_tokens
    return CopyOp("full", Direction.D2H, src, host)


def drop_failed_backup(tier: HostTierView, chain: list[TreeNode]) -> None:
    """A backup whose copy raised: its host copies hold garbage, so they go (the nodes stay
    on the device, unbacked). Host data below the chain, written after it under
    write-through, would lose its host parent: that case is refused loudly."""
    tier.stats.write_failed_tokens += sum(n.num_tokens for n in chain)
    deepest = chain[-1] if chain else None
    stack = [] if deepest is None else list(deepest.children.values())
    while stack:
        n = stack.pop()
        if n.data[0].host_value is not None and tier.threshold is not None:
            raise RuntimeError(
                f"host tier: backup of {chain} failed after {n} below it was backed up"
            )
        stack.extend(n.children.values())
    for node in chain:
        aux_tier.drop_aux_host(tier, node)
        tier.host_pools.full.free(tier.full.drop_host_copy(node), node_value=True)
