"""The match walk: from the root, down the children whose whole edge the key's units
continue with.

The native module runs the same walk in one call (`uniradix.native.walk_edges`), reading the
units in place from any buffer: an engine's `array('q')` of token ids then needs no `bytes`
copy of the whole request, which on a long prompt cost more than the walk itself. This is
its pure-Python twin, for builds without the module; both leave the tree as it is and
hand back the child whose edge the units leave part way, for the caller to split.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from typing_extensions import Buffer

from uniradix import native
from uniradix.key import common_prefix_len
from uniradix.tree.node import TreeNode

Walk = tuple[list[TreeNode], int, TreeNode | None]
"""The nodes matched whole (root side first), the bytes they cover, and the child whose
edge the units leave part way (None: no child continues the units, or the units ended)."""


def walk_edges(
    root: TreeNode, units: Buffer, num_bytes: int, page_bytes: int, namespace: Any
) -> Walk:
    """The walk over the first `num_bytes` (whole pages) of `units`; a child is found under
    its first page, with the namespace when there is one. Units not in `bytes` are copied
    into it (the native walk reads any buffer in place)."""
    if type(units) is not bytes:
        units = bytes(units)
    path: list[TreeNode] = []
    node, offset = root, 0
    while offset < num_bytes:
        page = units[offset : offset + page_bytes]
        child = node.children.get(page if namespace is None else (namespace, page))
        if child is None:
            break
        if not units.startswith(child.key, offset, num_bytes):
            return path, offset, child
        path.append(child)
        offset += len(child.key)
        node = child
    return path, offset, None


def walker() -> Callable[[TreeNode, Buffer, int, int, Any], Walk]:
    """The walk to run now: the native one while the module is in use (`native.HAVE_NATIVE`
    is read at each call, so a test can switch it)."""
    return native.walk_edges if native.HAVE_NATIVE else walk_edges


def unit_bytes(units: Buffer, start: int, stop: int) -> bytes:
    """Bytes `start:stop` of the units, whatever buffer holds them (an `array('q')`'s own
    view counts 8-byte items)."""
    if type(units) is bytes:
        return units[start:stop]
    return bytes(memoryview(units).cast("B")[start:stop])


def shared_pages(
    child: TreeNode, units: Buffer, offset: int, num_bytes: int, page_size: int
) -> int:
    """Whole pages of `child`'s edge that the units from byte `offset` (up to `num_bytes`)
    share: where a walk that leaves the edge part way splits it."""
    edge = child.key
    shared = common_prefix_len(edge, unit_bytes(units, offset, min(offset + len(edge), num_bytes)))
    return shared - shared % page_size
