#!/usr/bin/env bash
# Reruns every benchmark whose figures README.md and docs/ cite, writing the latest results
# under benchmarks/results/ and the plan figure under docs/. Slow (hours on 2 cores: the
# SGLang side-by-side and the L3 replay dominate); not part of CI. Run on a quiet machine.
#
#   bash scripts/figures.sh            # everything
#   bash scripts/figures.sh plan hits  # only some groups: plan hits host events storage
#                                      #   perf engine sessions
#
# Whole-trace benchmarks read the public synthetic Mooncake trace: set UNIRADIX_TRACE to its
# path (benchmarks/trace.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
UR=.venv/bin/uniradix
R=benchmarks/results
GROUPS_WANTED=("$@")
want() { [ ${#GROUPS_WANTED[@]} -eq 0 ] || [[ " ${GROUPS_WANTED[*]} " == *" $1 "* ]]; }
step() { echo "== $*" >&2; }

if want plan; then
    step "planner (docs/planner.md, README)"
    $UR plan --workload long_doc_qa --model qwen3-next-80b-a3b --gpu-cache 1GB,2GB,4GB,8GB \
        --page-size 16 --report reports/plan
    cp reports/plan/plan.png docs/plan_qwen3_next.png
    if [ -n "${UNIRADIX_TRACE:-}" ]; then
        $UR plan --trace "$UNIRADIX_TRACE" --model nemotron-nano-9b-v2 --gpu-cache 40GB --page-size 16 \
            --report reports/plan_mooncake
    fi
fi

if want hits; then
    step "hybrid hit rates (docs/hit_rates.md)"
    $PY -m benchmarks.hybrid_hits --sources trace --configs swa hybrid --label trace
    $PY -m benchmarks.hybrid_hits --sources agentic agentic_interfered long_doc_qa multi_turn \
        random shared_prefix --label workloads
    $PY -m benchmarks.hybrid_hits --sources trace --scales 1 1.0625 1.125 1.25 1.5 2 4 \
        --label pools
fi

if want host; then
    step "host tier (docs/host_tier.md)"
    $PY -m benchmarks.bench_host_tier --json "$R/host_tier.json"
    $PY -m benchmarks.bench_host_tier --hybrid --json "$R/host_tier_hybrid.json"
    $PY benchmarks/soak.py --ops 1000000
    $PY -m benchmarks.transfer --reps 9 --out "$R/transfer.md"
fi

if want events; then
    step "KV events and routing (docs/events.md, docs/native.md)"
    for part in routing publisher hashing; do $PY -m benchmarks.bench_events "$part"; done
    $PY -m benchmarks.bench_events ops --rounds 6 --page-sizes 16 --cool-kb 0 65536
fi

if want storage; then
    step "L3 storage (docs/storage.md)"
    $PY -m benchmarks.storage --out "$R/storage.md"
    if [ -n "${UNIRADIX_TRACE:-}" ]; then
        l3=$(mktemp -d)
        $UR replay --trace "$UNIRADIX_TRACE" --config full --page-size 16 --full-tokens 1048576 \
            --host-tokens 4194304 --storage "file://$l3" --json
        rm -rf "$l3"
        $PY -m benchmarks.l3_scaleout --requests 1000 --out "$R/storage.md"
    fi
fi

if want perf; then
    step "per-op cost against SGLang (docs/benchmarks.md)"
    $PY -m benchmarks.side_by_side --parts streams --cores rust
    $PY -m benchmarks.side_by_side --parts scale --cores rust --out "$R/side_by_side_scale"
    $PY benchmarks/bench_ops.py --host-tokens 400000
    $PY -m benchmarks.bench_free
    step "SGLang's cache on the uniradix TreeCore against its Rust core (docs/sglang.md)"
    $PY benchmarks/sglang_cores.py --workloads chat,fewshot --configs full,full+swa,full+mamba \
        --scale 1.0 --out "$R/sglang_cores.md"
fi

if want engine; then
    step "engine through the cache (docs/gpu_check.md)"
    for config in full hybrid; do
        $UR generate --config "$config" --prompts examples/prompts/revisits.jsonl \
            --full-tokens 48 --host-tokens 256 --page-size 4 --verify --json
    done
fi

if want sessions; then
    step "sessions (docs/library.md)"
    $PY benchmarks/bench_sessions.py
fi
