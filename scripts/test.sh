#!/usr/bin/env bash
# The whole test suite: lint, types, module size gate, import-layer gate, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check uniradix tests benchmarks examples
.venv/bin/ruff format --check uniradix tests benchmarks examples
.venv/bin/mypy
.venv/bin/python scripts/check_module_size.py uniradix 500
.venv/bin/python scripts/check_import_layers.py uniradix
# The native module is optional at install; here it must have been built
# (tests/test_native.py fails otherwise), so CI never passes on the fallbacks alone.
UNIRADIX_REQUIRE_NATIVE=1 .venv/bin/python -m pytest -q "$@"
