#!/usr/bin/env bash
# Fetches vLLM's event classes (vllm/distributed/kv_events.py, one file) from the vllm 0.33.0
# wheel into .cache/vllm/ for tests/events/test_vllm_classes.py, which decodes our batches
# with them (idempotent). vllm itself is never installed: the wheel is downloaded without its
# dependencies to a temporary folder, the one file is extracted and the wheel deleted.
# A failure here is not fatal: the test then skips, naming the missing file.
set -uo pipefail
cd "$(dirname "$0")/.."
VERSION=0.33.0
DEST=.cache/vllm
FILE=vllm/distributed/kv_events.py
if [ -f "$DEST/$FILE" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
    exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if ! .venv/bin/python -m pip download -q --no-deps "vllm==$VERSION" -d "$TMP" >/dev/null 2>&1; then
    echo "setup_vllm_events: vllm==$VERSION could not be downloaded; the vLLM decode test will skip" >&2
    exit 0
fi
WHEEL=$(ls "$TMP"/vllm-*.whl 2>/dev/null | head -n 1)
mkdir -p "$DEST"
if ! .venv/bin/python - "$WHEEL" "$DEST" "$FILE" <<'PY'
import sys, zipfile
wheel, dest, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    z.extract(name, dest)
PY
then
    echo "setup_vllm_events: $FILE not found in $WHEEL; the vLLM decode test will skip" >&2
    exit 0
fi
echo "$VERSION" > "$DEST/VERSION"
