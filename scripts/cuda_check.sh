#!/usr/bin/env bash
# On a machine with a CUDA GPU and torch: the CUDA-marked tests, then the engine generating
# through the cache on the GPU for every config, verified against a no-cache run; then the
# host-tier transfer throughput (pinned host pools, CudaTransferEngine) against plain copies.
# Writes logs and JSON summaries to $OUT (default: a temporary folder).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tee "$OUT/cuda_tests.log" | tail -5
status=${PIPESTATUS[0]}
for config in full swa mamba hybrid; do
  swa=()
  [[ $config == swa || $config == hybrid ]] && swa=(--swa-tokens 96)
  python3 -m uniradix.cli generate --config "$config" --device cuda --verify --page-size 4 \
    --num-prompts 10 --max-new-tokens 10 --full-tokens 160 "${swa[@]}" --json \
    > "$OUT/generate_$config.json" || status=1
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('hit_tokens', 'evicted_tokens', 'retractions', 'mismatches', 'max_abs_logit_diff', 'leaked')})" "$OUT/generate_$config.json" "$config"
done
# Host-tier transfers on the GPU (pinned host pools, CudaTransferEngine), against plain copies.
python3 -m benchmarks.transfer --device cuda --reps 5 --out "$OUT/transfer_cuda.md" || status=1
exit "$status"
