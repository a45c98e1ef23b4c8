#!/usr/bin/env bash
# Installs SGLang 0.5.23 into the project's .venv for the SGLang integration tests and the
# SGLang benchmark (idempotent). sglang goes in with --no-deps: its declared set pins a CUDA
# torch (never installed here) and the GPU stack; only the pure-Python packages its cache
# modules import at load time follow (IPython too: a stub of it would fool matplotlib in the
# same test process). GPU-only modules it imports at load time are stubbed
# inside the tests and benchmarks (benchmarks/peer/stubs.py), never in the library.
# A failure here is not fatal: the SGLang tests then skip, naming the missing package.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if "$PY" -c "import importlib.metadata as m; assert m.version('sglang') == '0.5.23'" 2>/dev/null; then
    exit 0
fi
"$PY" -m pip install -q --no-deps sglang==0.5.23 || {
    echo "setup_sglang: sglang==0.5.23 could not be installed; SGLang tests will skip" >&2
    exit 0
}
"$PY" -m pip install -q numpy msgspec psutil orjson pybase64 requests packaging pillow \
    starlette pydantic pyzmq tqdm dill ipython "transformers==5.19.0" "openai==2.8.0" || {
    echo "setup_sglang: some SGLang dependencies could not be installed" >&2
    exit 0
}
