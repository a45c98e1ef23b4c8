"""README and docs/ name only what exists: every repository path, every `uniradix.x.y` module
or attribute, every `benchmarks.x` module; docs/design.md's layer table is the import gate's
LAYERS; the README stays short; no command points outside the repository."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = "uniradix|benchmarks|docs|examples|scripts|tests"
PATH = re.compile(rf"(?<![\w./-])((?:{TOP})/[\w./{{}},*-]*)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MODULE = re.compile(r"(?<![\w./-])(uniradix(?:\.\w+)+)")
BENCH_MODULE = re.compile(r"python -m\s+(benchmarks(?:\.\w+)+)|`(benchmarks(?:\.\w+)+)`")


def expand(path: str) -> list[str]:
    """`a_{1,2}.json` -> both names; `run{1..3}` -> three."""
    m = re.search(r"\{([^{}]*)\}", path)
    if m is None:
        return [path]
    body = m.group(1)
    if ".." in body:
        lo, hi = body.split("..")
        choices = [str(i) for i in range(int(lo), int(hi) + 1)]
    else:
        choices = body.split(",")
    return [p for c in choices for p in expand(path[: m.start()] + c + path[m.end() :])]


def named_paths(text: str) -> set[str]:
    return {p for m in PATH.findall(text) for p in expand(m.rstrip(".,;:"))}


def test_every_named_path_exists() -> None:
    missing = []
    for doc in DOCS:
        text = doc.read_text()
        for path in named_paths(text):
            if not list(ROOT.glob(path.rstrip("/"))):
                missing.append(f"{doc.name}: {path}")
        for target in LINK.findall(text):
            if "://" not in target and not (doc.parent / target).exists():
                missing.append(f"{doc.name}: link {target}")
    assert missing == []


def defined_in_source(dotted: str) -> bool:
    """The longest prefix that is a module file, then the rest defined in its text.

    For `uniradix.integrations`: they import optional packages (SGLang needs GPU modules
    stubbed), so importing them would test the environment, not the docs."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        for source in (base.with_suffix(".py"), base / "__init__.py"):
            if source.exists():
                text = source.read_text()
                return all(re.search(rf"\b{attr}\b", text) for attr in parts[cut:])
    return False


def resolves(dotted: str) -> bool:
    """The longest importable module prefix, then attributes for the rest."""
    if dotted.startswith("uniradix.integrations."):
        return defined_in_source(dotted)
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            obj: object = importlib.import_module(name)
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def test_every_named_module_exists() -> None:
    sys.path.insert(0, str(ROOT))
    missing = []
    for doc in DOCS:
        text = doc.read_text()
        for name in set(MODULE.findall(text)):
            if not resolves(name):
                missing.append(f"{doc.name}: {name}")
        for groups in BENCH_MODULE.findall(text):
            name = next(g for g in groups if g)
            base = ROOT / name.replace(".", "/")
            if not (base.with_suffix(".py").exists() or (base / "__init__.py").exists()):
                missing.append(f"{doc.name}: {name}")
    assert missing == []


def test_design_layer_table_is_the_import_gate() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from check_import_layers import LAYERS

    text = (ROOT / "docs/design.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    table = tuple(
        tuple(m.strip('"') for m in re.findall(r"`([^`]*)`", row.split("|")[2])) for row in rows
    )
    assert table == LAYERS


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert 40 < lines <= 250, lines


def test_no_path_outside_the_repository() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in [*DOCS, *(ROOT / "examples").rglob("*")]
        if p.is_file() and "../shared" in p.read_text(errors="replace")
    ]
    assert offenders == []


def test_results_keep_the_latest_run_per_benchmark() -> None:
    """Earlier runs live in git history, not beside the latest ones."""
    files = [p for p in (ROOT / "benchmarks/results").rglob("*") if p.is_file()]
    assert len(files) <= 30, len(files)
