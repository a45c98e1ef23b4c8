#!/usr/bin/env bash
# Creates .venv (idempotent) with the CPU torch build and uniradix installed editable.
# torch is pinned to 2.13.0 first: any other version would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[test]"
# L3 storage tests start their own Redis servers: install the Debian package when missing.
if ! command -v redis-server >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q </dev/null
    $SUDO apt-get install -y -q redis-server </dev/null
fi
bash scripts/setup_sglang.sh
bash scripts/setup_vllm_events.sh
