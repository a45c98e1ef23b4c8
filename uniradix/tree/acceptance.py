"""Which prefix of a matched path a cache can use (`TreeCore.match`): the deepest node that
every validator accepts, that holds data of every required component and, for each sliding
window, ends a run of at least the window's units whose nodes all hold that component's data
(SWA: the tokens a request attends to)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from uniradix.tree.node import TreeNode

Validator = Callable[[TreeNode], bool]
_UNBOUNDED = float("inf")


def accepted_depth(
    path: list[TreeNode],
    validators: Sequence[Validator],
    required: Sequence[int],
    windows: Sequence[tuple[int, int]],
) -> int:
    """How many nodes of `path` (root side first) are usable. Every validator sees every
    node in order (they may be stateful)."""
    num_accepted = 0
    # Units with data since the last node without it, per window (none yet: unbounded).
    lives = [_UNBOUNDED] * len(windows)
    for i, n in enumerate(path):
        ok = True
        for validate in validators:
            ok = validate(n) and ok
        data = n.data
        for w, (index, window) in enumerate(windows):
            if data[index].value is None:
                lives[w] = 0
                ok = False
            else:
                lives[w] += n.num_tokens
                ok = ok and lives[w] >= window
        if ok:
            for index in required:
                if data[index].value is None:
                    ok = False
                    break
        if ok:
            num_accepted = i + 1
    return num_accepted


def accepted_one(
    path: list[TreeNode], windows: Sequence[tuple[int, int]], required: Sequence[int]
) -> int:
    """`accepted_depth` with at most one window and one required index and no
    validators (every hybrid match of the SGLang core): the deepest usable node's depth."""
    w_index, window = windows[0] if windows else (-1, 0)
    r_index = required[0] if required else -1
    live, num_accepted = _UNBOUNDED, 0
    for i, n in enumerate(path):
        data = n.data
        if w_index >= 0:
            if data[w_index].value is None:
                live = 0
                continue
            live += n.num_tokens
            if live < window:
                continue
        if r_index < 0 or data[r_index].value is not None:
            num_accepted = i + 1
    return num_accepted
