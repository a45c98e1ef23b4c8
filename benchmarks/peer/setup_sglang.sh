#!/usr/bin/env bash
# Creates <repo>/.peer-venv with SGLang 0.5.23 for the side-by-side benchmark (idempotent).
# Never touches the project's own .venv. torch is pinned to 2.13.0 first: any other version
# would download a multi-GB CUDA build. sglang goes in with --no-deps; only the pure-Python
# packages its cache modules import at load time follow. GPU-only modules are stubbed inside
# the driver process instead (benchmarks/peer/stubs.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PEER_PYTHON:-python3.11}"
VENV=.peer-venv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import sglang, torch" 2>/dev/null; then
    exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q torch==2.13.0
"$VENV/bin/python" -m pip install -q --no-deps sglang==0.5.23
"$VENV/bin/python" -m pip install -q numpy msgspec psutil orjson pybase64 requests packaging \
    pillow starlette pydantic pyzmq tqdm dill "transformers==5.19.0" "openai==2.8.0"
