#!/usr/bin/env bash
# Creates .venv (idempotent) with the CPU torch build and uniradix installed editable.
# torch is pinned to 2.13.0 first: any other version would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[test]"
