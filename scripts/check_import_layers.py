"""Import gate: no circle of imports inside the package, and imports point down the layers.

Usage: `python scripts/check_import_layers.py [PACKAGE_DIR]` (default `uniradix`). Exit 1 and
one line per problem when a circle exists or an import points up or sideways; 0 otherwise.

Every `import` / `from ... import` statement of every module counts: at the top, inside a
function (a lazy import is still a dependency) and under `if TYPE_CHECKING:` (a type-only
circle still ties the modules together for readers and for mypy). `from pkg import name`
points at the module `pkg.name` when there is one, else at `pkg` (its `__init__`).

The layers are DESIGN.md's "Layers (imports point down only)", lowest first; a module may
import its own layer's package freely (circles aside) and any lower layer, never a higher
one nor a sibling of its own layer.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Lowest first: the layer table of docs/design.md. A module belongs to the longest entry that
# is its dotted name below the package or a prefix of it (`tree.core` -> "tree", `tree.node`
# -> "tree.node"); "" is the package's own `__init__`. Placements that need a reason:
# - `slots` (the slot-array type) and `tree.node` (the node record) sit below `types`: the
#   params and results in `types` carry slots and nodes, and nodes carry slots;
# - `hashing` (page digests, the per-tree digest table, event hashes, storage keys) sits just
#   above `tree`: its digest table follows the tree's nodes;
# - `event_sink` (the protocol a sink implements) sits below `components` and `tiers`, which
#   report to it;
# - `eviction` (orders of the auxiliary pools) sits below `components`, which pick one;
# - `_native` (the compiled module, known here by its stub) sits below `native`, its
#   wrapper, which sits with `errors` at the bottom: the hashing and the copier call it;
# - `config` (the nested `CacheConfig`) sits above `storage` (it names a backend type) and
#   below `tiers` and `factory`, which build from it;
# - `sim` sits below `engine` and `plan`: the scheduler is shared, the planner replays;
# - `cli_flags` (flags shared by the CLI and `plan`; reads the scheduler's defaults) sits
#   between `sim` and the other users.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_native",),
    ("errors", "native"),
    ("key", "slots"),
    ("tree.node",),
    ("types",),
    ("memory",),
    ("tree",),
    ("event_sink", "hashing"),
    ("eviction",),
    ("components",),
    ("storage",),
    ("config",),
    ("tiers",),
    ("cache",),
    ("events",),
    ("factory",),
    ("sim",),
    ("cli_flags", "cli_groups"),
    ("engine", "plan", "sessions"),
    ("demo",),
    ("cli_generate",),
    ("cli", ""),
    ("integrations",),
)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool

    def where(self, root: Path) -> str:
        kind = " (TYPE_CHECKING)" if self.type_only else ""
        return f"{self.source} -> {self.target} at {_path_of(self.source, root)}:{self.line}{kind}"


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name (`uniradix.tree.node`, `uniradix.cache` for its `__init__`) -> file. A
    compiled module counts by its stub (`.pyi` with no `.py` beside it)."""
    names = {}
    stubs = [p for p in root.rglob("*.pyi") if not p.with_suffix(".py").exists()]
    for path in sorted([*root.rglob("*.py"), *stubs]):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _path_of(module: str, root: Path) -> str:
    names = module_names(root)
    return str(names.get(module, module))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it sits under `if TYPE_CHECKING:`."""

    def walk(node: ast.AST, type_only: bool) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, type_only
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), type_only)
            else:
                yield from walk(child, type_only)

    yield from walk(tree, False)


def edges(root: Path) -> list[Edge]:
    names = module_names(root)
    package = root.name
    found = []
    for module, path in names.items():
        is_package = path.name == "__init__.py"
        for stmt, type_only in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(stmt, ast.Import):
                targets = [alias.name for alias in stmt.names]
            else:
                base = stmt.module or ""
                if stmt.level:  # relative: from the module's package, up `level - 1`
                    anchor = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (stmt.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in stmt.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in names else base)
            for target in targets:
                while target and target not in names and "." in target:
                    target = target.rsplit(".", 1)[0]  # `import pkg.mod.Class`-style names
                if target in names and target != module and target.split(".")[0] == package:
                    found.append(Edge(module, target, stmt.lineno, type_only))
    return list(dict.fromkeys(found))  # `from m import a, b` is one edge, not two


def cycles(modules: Iterable[str], graph: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    succ: dict[str, list[str]] = {m: [] for m in modules}
    for e in graph:
        succ[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in succ:
        if start in index:
            continue
        work = [(start, iter(succ[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(succ[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def layer_of(module: str, package: str) -> tuple[int, str]:
    """(layer number, the layer entry) of `module`."""
    inner = module[len(package) + 1 :] if module != package else ""
    best: tuple[int, str] | None = None
    for number, row in enumerate(LAYERS):
        for entry in row:
            matches = inner == entry or (entry != "" and inner.startswith(entry + "."))
            if matches and (best is None or len(entry) > len(best[1])):
                best = (number, entry)
    if best is None:
        raise SystemExit(f"{module}: no entry in LAYERS for it; add one to the table")
    return best


def layer_violations(graph: list[Edge], package: str) -> list[Edge]:
    bad = []
    for e in graph:
        (source_layer, source_unit), (target_layer, target_unit) = (
            layer_of(e.source, package),
            layer_of(e.target, package),
        )
        if source_unit == target_unit:
            continue  # inside one package (or one module row entry): only circles matter
        if target_layer >= source_layer:
            bad.append(e)
    return bad


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "uniradix").resolve()
    names = module_names(root)
    graph = edges(root)
    problems = []
    for component in cycles(names, graph):
        members = set(component)
        inside = [e.where(root) for e in graph if e.source in members and e.target in members]
        problems.append(f"circle of {len(component)} modules: " + "; ".join(inside))
    for e in layer_violations(graph, root.name):
        problems.append(f"import points up or sideways: {e.where(root)}")
    for line in problems:
        print(line)
    print(
        f"{len(names)} modules, {len(graph)} imports inside {root.name}: {len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
