"""Where the benchmarks find the public synthetic Mooncake trace (3,993 requests):
`$UNIRADIX_TRACE` when set, else `shared/reference/` beside the repository when it is
there, else the repository's own sample of its first 400 rows
(examples/traces/mooncake_sample.jsonl), so every benchmark runs on a bare clone."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BESIDE = REPO.parent / "shared/reference/mooncake_synthetic_trace.jsonl"
SAMPLE = REPO / "examples/traces/mooncake_sample.jsonl"
TRACE = Path(os.environ.get("UNIRADIX_TRACE") or (BESIDE if BESIDE.exists() else SAMPLE))
