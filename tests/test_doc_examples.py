"""The README's library example runs as printed, and gives the hit its comments show."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_library_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    scope: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), scope)
    hit = scope["hit"]
    assert hit.device_prefix_len == 4  # type: ignore[attr-defined]
    assert hit.device_indices.tolist() == [1, 2, 3, 4]  # type: ignore[attr-defined]
