"""Full-KV slots of a path of the tree: its nodes' values joined, root side first."""

from __future__ import annotations

import numpy as np
import torch

from uniradix.tree.node import TreeNode
from uniradix.types import Slots

_EMPTY: Slots = np.empty(0, dtype=np.int64)


def concat_values(values: list[Slots | None]) -> Slots:
    """`values` joined (the one value itself when there is one: no copy)."""
    if len(values) == 1 and values[0] is not None:
        return values[0]
    present = [v for v in values if v is not None]
    assert len(present) == len(values), "a full-KV value is missing on a cached path"
    return np.concatenate(present) if present else _EMPTY


SLOT_TENSORS_KEPT = 64
"""Nodes whose slot tensor `cpu_indices` keeps at once. Matches that end on one node mostly end
on a few shared prompts; a bound keeps a tree that matched many nodes once (a fill of unrelated
sequences) from keeping a tensor (~400 bytes) on each of them."""


def cpu_indices(
    path: list[TreeNode], kept: dict[TreeNode, tuple[Slots, torch.Tensor]]
) -> torch.Tensor:
    """Full-KV slots of the non-empty `path` as a CPU tensor sharing their memory. A path of
    one node (a match that ends on a shared prefix: the usual one) reuses the tensor wrapped
    around that node's value last time, kept in `kept` (the tree's `slot_tensors`) while the
    value is the same array: wrapping one costs about a microsecond, a sixth of a whole
    match. `kept` holds at most `SLOT_TENSORS_KEPT` nodes, the oldest entry leaving first."""
    if len(path) == 1:
        node = path[0]
        value = node.data[0].value
        entry = kept.get(node)
        if entry is not None:
            if entry[0] is value:
                return entry[1]
        elif len(kept) >= SLOT_TENSORS_KEPT:
            del kept[next(iter(kept))]
        assert value is not None, "a full-KV value is missing on a cached path"
        tensor = torch.from_numpy(value)
        kept[node] = (value, tensor)
        return tensor
    return torch.from_numpy(concat_values([n.data[0].value for n in path]))


def span_slots(node: TreeNode, num: int) -> Slots:
    """Full slots of the `num` units ending with `node` (a hook may have split them)."""
    values, covered = [], 0
    while node.parent is not None and covered < num:
        values.append(node.data[0].value)
        covered += node.num_tokens
        node = node.parent
    values.reverse()
    return concat_values(values)


def path_tail(node: TreeNode, start: int) -> tuple[Slots, int]:
    """Full slots of positions `[start, end)` of the path ending at `node`, and `end` (the
    path's length). Joins only the nodes past `start`: a request that caches a chunk reads
    what the chunk added, not its whole prefix again."""
    nodes: list[TreeNode] = []
    end = 0
    while node.parent is not None:
        nodes.append(node)
        end += node.num_tokens
        node = node.parent
    if not 0 <= start <= end:
        raise ValueError(f"start={start} outside the path's [0, {end}]")
    values: list[Slots | None] = []
    covered = end  # positions [covered, end) are in `values`
    for n in nodes:
        if covered <= start:
            break
        values.append(n.data[0].value)
        covered -= n.num_tokens
    if not values:
        return _EMPTY, end
    values.reverse()
    return concat_values(values)[start - covered :], end
