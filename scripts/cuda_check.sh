#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one short run (~5 min at most; no network needed):
#   1. finds a Python whose torch sees CUDA ($PYTHON, python3, python, .venv/bin/python) and
#      says what is missing if none does or a dependency is absent (nothing is downloaded);
#   2. the CUDA-marked tests (`pytest -m cuda`: the `device`/engine fixtures' cuda params);
#   3. `uniradix generate --verify` on the GPU for every config, with and without a host
#      tier (pinned host pools, CudaTransferEngine), outputs checked against no cache;
#   4. the host-tier transfer benchmark on CUDA (D2H into / H2D from pinned host pools).
# Logs, JSON and the transfer table go to $OUT (default: a fresh temporary folder).
# Exit status: 0 when every step passed, 1 when one failed, 2 when nothing could run.
# CUDA_CHECK_DEVICE=cpu runs the same steps on the CPU (a dry run of this script: the cuda
# tests then skip, generate uses the thread engine, the benchmark does one repetition).
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=${CUDA_CHECK_DEVICE:-cuda}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
echo "results in $OUT"

py=""
for candidate in "${PYTHON:-}" python3 python .venv/bin/python; do
  [[ -n $candidate ]] && command -v "$candidate" >/dev/null 2>&1 || continue
  if "$candidate" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() or sys.argv[1] == 'cpu' else 1)" "$DEVICE" 2>/dev/null; then
    py=$candidate
    break
  fi
  echo "skip $candidate: $("$candidate" -c "import torch; print('torch', torch.__version__, 'sees no CUDA device')" 2>&1 | tail -1)"
done
if [[ -z $py ]]; then
  echo "MISSING: no Python with a CUDA-enabled torch (set PYTHON=/path/to/python)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>&1 | head -3
  exit 2
fi
{
  "$py" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current \
      --format=csv 2>&1
  fi
} | tee "$OUT/env.txt"

missing=$("$py" - <<'EOF'
import importlib.util
needed = ["numpy", "tqdm", "xxhash", "redis", "zmq", "msgspec", "pytest", "hypothesis"]
print(" ".join(m for m in needed if importlib.util.find_spec(m) is None))
EOF
)
if [[ -n $missing ]]; then
  echo "MISSING Python packages (tests that import them will error): $missing"
fi
# The package from this checkout: an editable install when pip can do it offline, else
# the source tree on PYTHONPATH (enough for the tests and `python -m uniradix.cli`).
if ! "$py" -m pip install -q -e . --no-deps --no-build-isolation >"$OUT/pip.log" 2>&1; then
  echo "pip install -e . failed offline (see pip.log); using PYTHONPATH=$PWD"
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0

echo "== CUDA-marked tests"
timeout 240 "$py" -m pytest -q -p no:cacheprovider -m cuda tests \
  --junitxml="$OUT/cuda_tests.xml" >"$OUT/cuda_tests.log" 2>&1 || status=1
tail -5 "$OUT/cuda_tests.log"

engine=cuda reps=5
[[ $DEVICE == cpu ]] && engine=thread reps=1
echo "== generate --verify on $DEVICE (no cache vs cache; host tier: pinned, $engine engine)"
for config in full swa mamba hybrid; do
  for host in none host; do
    args=(--config "$config" --device "$DEVICE" --verify --page-size 4 --num-prompts 10
      --max-new-tokens 10 --full-tokens 160 --json)
    [[ $config == swa || $config == hybrid ]] && args+=(--swa-tokens 96)
    [[ $host == host ]] && args+=(--host-tokens 640 --host-engine "$engine")
    name="generate_${config}_${host}"
    if ! timeout 60 "$py" -m uniradix.cli generate "${args[@]}" >"$OUT/$name.json" \
      2>"$OUT/$name.err"; then
      # A config the host tier does not cover yet is a note, not a failure.
      grep -q "host tier covers" "$OUT/$name.err" || status=1
    fi
    "$py" -c "import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], {k: d.get(k) for k in ('hit_tokens', 'mismatches', 'max_abs_logit_diff', 'leaked')})" \
      "$OUT/$name.json" "$name" 2>/dev/null \
      || if grep -q "host tier covers" "$OUT/$name.err"; then
        echo "$name: not covered by the host tier yet"
      else
        echo "$name: FAILED"
        tail -3 "$OUT/$name.err"
      fi
  done
done

echo "== host-tier transfers on $DEVICE (pinned host pools on cuda) against plain copies"
timeout 150 "$py" -m benchmarks.transfer --device "$DEVICE" --reps "$reps" \
  --out "$OUT/transfer_$DEVICE.md" >"$OUT/transfer_$DEVICE.log" 2>&1 || status=1
cat "$OUT/transfer_$DEVICE.md" 2>/dev/null || tail -5 "$OUT/transfer_$DEVICE.log"
echo "status $status"
exit "$status"
