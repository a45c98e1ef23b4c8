"""Loads SGLang 0.5.23 for the integration tests, or skips the module with the reason.

SGLang imports GPU-only and front-end packages at load time (triton, ...); on a CPU machine
they are stubbed here, inside the test process only (benchmarks/peer/stubs.py), never in the
library a user imports."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WANTED = "0.5.23"


def load_sglang(kits: bool = False) -> None:
    """Skips the calling test module unless SGLang 0.5.23 imports. `kits`: also make SGLang's
    test kits (sglang.test.kits) importable, which pull in its benchmark datasets module and
    query triton's runtime at import."""
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(
            f"sglang=={WANTED} is not installed (scripts/setup_sglang.sh installs it)",
            allow_module_level=True,
        )
    if version != WANTED:
        pytest.skip(f"needs sglang=={WANTED}, found {version}", allow_module_level=True)
    sys.path.insert(0, str(REPO / "benchmarks" / "peer"))
    from stubs import install_stubs

    # Both modes set the same stubs up, whichever module loads first: each call counts a
    # package an earlier call stubbed as missing (not as installed), so the triton stub's
    # runtime always gets no driver and SGLang's FLA utils fall back to the CPU when the
    # kits import them, even after a module without kits has loaded SGLang.
    if "triton" in install_stubs(("datasets",) if kits else ()):
        import triton.runtime

        triton.runtime.driver = None
    # The default core is Rust; the tests choose theirs per cache.
    os.environ.setdefault("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python")
