"""The engine's tensors are tiny: intra-op threads only add barrier waits, which on a busy
2-core machine made single calls 100x slower. Run these tests on one thread, then restore."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
