"""Random transfer sequences against a reference that copies slot by slot."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tiers.pools import random_kv_pool, same_bits
from uniradix import native
from uniradix.memory.host_kv import HostKVPool
from uniradix.tiers.copiers import KVCopier
from uniradix.tiers.transfer import Direction

DEVICE_PAGES, HOST_PAGES = 10, 8


def _slots(pages: list[int], page_size: int, whole_pages: bool, draw_offsets: int) -> np.ndarray:
    slots = (np.array(pages)[:, None] * page_size + np.arange(page_size)).reshape(-1)
    if whole_pages or page_size == 1:
        return slots
    # Drop a few tokens so the move is per slot, not per page (layer_first only).
    return slots[draw_offsets % page_size :]


@settings(max_examples=100, deadline=None)
@given(
    layout=st.sampled_from(["layer_first", "page_first"]),
    page_size=st.sampled_from([1, 4]),
    staged=st.booleans(),
    use_native=st.booleans(),
    force_runs=st.booleans(),
    steps=st.lists(
        st.tuples(
            st.booleans(),  # D2H?
            st.integers(1, 6),  # pages in the batch
            st.randoms(use_true_random=False),
            st.booleans(),  # whole pages?
            st.integers(0, 3),
            st.booleans(),  # consecutive pages on both sides?
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_random_transfers_match_a_slot_by_slot_reference(
    layout: str,
    page_size: int,
    staged: bool,
    use_native: bool,
    force_runs: bool,
    steps: list[tuple],  # type: ignore[type-arg]
) -> None:
    # Forcing runs (any run is long enough) sends every CPU move with a run through the
    # slice-copy path, whatever its size; otherwise these small rows always gather/scatter.
    with patch("uniradix.tiers.row_runs.MIN_RUN_BYTES", 1 if force_runs else 1 << 20):
        _random_transfers(layout, page_size, staged, use_native and native.BUILT, steps)


def _random_transfers(
    layout: str,
    page_size: int,
    staged: bool,
    use_native: bool,
    steps: list[tuple],  # type: ignore[type-arg]
) -> None:
    device = random_kv_pool((DEVICE_PAGES + 1) * page_size, seed=21)
    host = HostKVPool.like(device, (HOST_PAGES + 1) * page_size, page_size, layout)  # type: ignore[arg-type]
    copier = KVCopier(device, host)
    copier.staged = staged
    copier.use_native = use_native  # the native loop (CPU, not staged) or torch's calls
    # Reference: K of every layer then V of every layer, on each side, copied slot by slot.
    ref_dev = [b.clone() for b in device.k_buffers + device.v_buffers]
    ref_host = [torch.zeros((host.num_slots, *b.shape[1:]), dtype=b.dtype) for b in ref_dev]
    for d2h, num_pages, rnd, whole, offset, consecutive in steps:
        if consecutive:
            first_dev = rnd.randint(1, DEVICE_PAGES + 1 - num_pages)
            first_host = rnd.randint(1, HOST_PAGES + 1 - num_pages)
            dev_pages = list(range(first_dev, first_dev + num_pages))
            host_pages = list(range(first_host, first_host + num_pages))
        else:
            dev_pages = rnd.sample(range(1, DEVICE_PAGES + 1), num_pages)
            host_pages = rnd.sample(range(1, HOST_PAGES + 1), num_pages)
        whole = whole or layout == "page_first"
        dev_slots = _slots(dev_pages, page_size, whole, offset)
        host_slots = _slots(host_pages, page_size, whole, offset)
        if d2h:
            copier.copy(Direction.D2H, dev_slots, host_slots)
            for r_dev, r_host in zip(ref_dev, ref_host, strict=True):
                for d, h in zip(dev_slots.tolist(), host_slots.tolist(), strict=True):
                    r_host[h] = r_dev[d]
        else:
            copier.copy(Direction.H2D, host_slots, dev_slots)
            for r_dev, r_host in zip(ref_dev, ref_host, strict=True):
                for d, h in zip(dev_slots.tolist(), host_slots.tolist(), strict=True):
                    r_dev[d] = r_host[h]
        everything = torch.arange(host.num_slots)
        for layer in range(host.num_layers):
            got_k, got_v = host.get_kv(layer, everything)
            assert same_bits(got_k, ref_host[layer])
            assert same_bits(got_v, ref_host[host.num_layers + layer])
        dev_now = device.k_buffers + device.v_buffers
        assert all(same_bits(a, b) for a, b in zip(dev_now, ref_dev, strict=True))
