#!/usr/bin/env bash
# The main job: set up, then replay the built-in workload through the real cache.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/uniradix replay "$@"
