"""Where the benchmarks find the public synthetic Mooncake trace (3,993 requests; the
repository ships its first 400 rows as examples/traces/mooncake_sample.jsonl):
`$UNIRADIX_TRACE` when set, else `shared/reference/` beside the repository."""

from __future__ import annotations

import os
from pathlib import Path

BESIDE = Path(__file__).resolve().parents[2] / "shared/reference/mooncake_synthetic_trace.jsonl"
TRACE = Path(os.environ.get("UNIRADIX_TRACE") or BESIDE)
