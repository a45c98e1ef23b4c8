"""`Slots`, the array type of pool slot indices. Its own module at the bottom of the layers:
tree nodes (`uniradix.tree.node`) hold slots, and the params and results of
`uniradix.types` hold both slots and nodes."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Slots = npt.NDArray[np.int64]
"""Pool indices as the tree keeps them: a 1-D int64 numpy array on the host.

Index bookkeeping stays on the host whatever the pool's device (numpy slices and
concatenates in a fraction of torch's per-call cost); results handed to callers are torch
tensors on the pool's device."""
