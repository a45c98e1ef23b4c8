"""The import gate (`scripts/check_import_layers.py`): the package passes it, and it catches a
circle made only of TYPE_CHECKING imports, a lazy import that points up, and a sideways one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_import_layers.py"


def _run(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(package)], capture_output=True, text=True, check=False
    )


def test_the_package_has_no_circle_and_imports_point_down() -> None:
    result = _run(SCRIPT.parents[1] / "uniradix")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 problem(s)" in result.stdout


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "uniradix" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "uniradix"


def test_a_type_checking_circle_and_upward_imports_are_reported(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "types.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from uniradix.tree.core import TreeCore\n",
            "tree/__init__.py": "",
            "tree/core.py": "from uniradix.types import Slots\n",
            "memory/__init__.py": "",
            "memory/pool.py": "def f() -> None:\n    from uniradix.cache import controller\n",
            "cache/__init__.py": "",
            "cache/controller.py": "from . import helper\n",
            "cache/helper.py": "import uniradix.memory.pool\n",
            "sim/__init__.py": "",
            "sim/run.py": "from uniradix.engine import model\n",
            "engine/__init__.py": "",
            "engine/model.py": "from uniradix.plan import budget\n",
            "plan/__init__.py": "",
            "plan/budget.py": "",
        },
    )
    result = _run(package)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    circles = [line for line in lines if line.startswith("circle of 2 modules")]
    assert len(circles) == 1
    assert "uniradix.types -> uniradix.tree.core" in circles[0]
    assert "(TYPE_CHECKING)" in circles[0]
    up = [line for line in lines if line.startswith("import points up")]
    assert any("uniradix.types -> uniradix.tree.core" in line for line in up)
    assert any("uniradix.memory.pool -> uniradix.cache.controller" in line for line in up)
    assert any("uniradix.sim.run -> uniradix.engine.model" in line for line in up)
    assert any("uniradix.engine.model -> uniradix.plan.budget" in line for line in up)  # sideways
    # A lazy import (inside a function) closes a circle too.
    lazy = [line for line in lines if line.startswith("circle of 3 modules")]
    assert len(lazy) == 1 and "uniradix.memory.pool -> uniradix.cache.controller" in lazy[0]
    # Relative imports resolve, and imports down the layers pass.
    assert not any("uniradix.cache.controller -> uniradix.cache.helper" in line for line in up)
    assert not any("uniradix.cache.helper -> uniradix.memory.pool" in line for line in up)
    assert lines[-1].endswith(f"{len(lines) - 1} problem(s)")
