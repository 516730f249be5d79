"""The layers of epsim, and of live/ and app/ on it: README.md's layer table, held by the AST.

README.md's "Layers" table is the one statement of the order (top row first); this file reads it
and checks every module of `epsim/`, `live/` and `app/`:

- no upward import: a module imports modules of its own row or of rows below;
- no import cycle between modules;
- epsim never imports torch or live/ at module level; app/ never imports live/;
- epsim's internal imports sit at the top of each module.

Every import statement counts as an edge, wherever it is written: at module level, inside a
function, or under `if TYPE_CHECKING:`. A function-level import is an upward import or a cycle
all the same (it runs later, it does not depend less); the only function-level import allowed
to point up is `LAZY_UPWARD`'s. Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`, so
those packages count as imported too (except the importer's own). `importlib.import_module`
calls (the CLI's lazy subcommands; `epsim`, `epsim.spec` and `epsim.plan` re-exporting lazily
through `epsim.exports`) are not imports here.

Run as a script, it prints the share of epsim's internal import statements that sit inside
functions: `python tests/test_layers.py [CHECKOUT]`.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("epsim", "live", "app")
TABLE_MARK = "<!-- layers: tests/test_layers.py reads this table"

# Known violations another branch is removing while this guard lands, each with a comment naming
# it; the lead empties this set as they merge. Nothing else may go here: fix a new violation.
# (Empty: R1's cost.tables <-> traffic, R3's sim.engine -> plan.screen cycle and R4's
# bench_records <-> bench_worker are gone from main.)
PENDING: set[tuple[str, str]] = set()

# Upward imports that may exist, inside a function only: `epsim calibrate --live` runs the bench.
LAZY_UPWARD = {("epsim.commands.calibrate", "live")}



@dataclass(frozen=True)
class Edge:
    """One import: `importer` imports `named` at `line`, which imports (or runs the `__init__`
    of) `target`: `named` itself or a package above it."""

    importer: str
    target: str
    line: int
    where: str          # "module", "function" or "type_checking"
    named: str

    @property
    def pending(self) -> bool:
        return (self.importer, self.named) in PENDING


@dataclass(frozen=True)
class Layer:
    name: str
    units: tuple[str, ...]
    rank: int           # 0 = the bottom row


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@lru_cache(maxsize=None)
def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the checked packages, by dotted name."""
    return {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """(import node, where) for every import statement of a module."""
    def walk(node, where):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, where
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, "function")
            elif isinstance(child, ast.If) and _is_type_checking(child) and where == "module":
                yield from walk(child, "type_checking")
            else:
                yield from walk(child, where)
    yield from walk(tree, "module")


def _targets(node, importer: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The modules an import statement names (`from p import m` names p.m when that is a
    module, else p)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:                                  # relative: from the importer's package up
        parts = importer.split(".") if is_package else importer.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    named = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    return named or [base]


@lru_cache(maxsize=None)
def edges(root: Path = ROOT) -> tuple[Edge, ...]:
    """Every internal import of the checked packages, each target's packages included."""
    known = modules(root)
    out = []
    for importer, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, where in _imports(tree):
            for target in _targets(node, importer, path.name == "__init__.py", known):
                if target.split(".")[0] not in PACKAGES:
                    continue
                parts = target.split(".")
                for i in range(1, len(parts) + 1):
                    name = ".".join(parts[:i])
                    own_package = importer.startswith(name + ".")
                    if name != importer and not own_package:
                        out.append(Edge(importer, name, node.lineno, where, target))
    return tuple(out)


@lru_cache(maxsize=None)
def layers(readme: Path = ROOT / "README.md") -> tuple[Layer, ...]:
    """README.md's layer table, bottom row first."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_MARK))
    rows = []
    for line in lines[start + 3:]:                       # the mark, the header, the rule
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((cells[0], tuple(re.findall(r"`([\w.]+)`", cells[1]))))
    return tuple(Layer(name, units, rank) for rank, (name, units) in enumerate(reversed(rows)))


def unit_of(module: str) -> tuple[str, Layer] | None:
    """The table's unit holding `module` (the longest matching prefix) and its layer. The
    root `epsim` holds only the package itself: a new top-level module needs its own row
    entry."""
    best = None
    for layer in layers():
        for unit in layer.units:
            if module == unit or (module.startswith(unit + ".") and unit != "epsim"):
                if best is None or len(unit) > len(best[0]):
                    best = (unit, layer)
    return best


def _rank(module: str) -> int:
    return unit_of(module)[1].rank


def upward(all_edges=None) -> list[Edge]:
    """Edges from a module to a higher layer (`LAZY_UPWARD` in a function excepted)."""
    out = []
    for e in all_edges if all_edges is not None else edges():
        if _rank(e.target) <= _rank(e.importer):
            continue
        lazy = any(e.importer == a and (e.target == b or e.target.startswith(b + "."))
                   for a, b in LAZY_UPWARD)
        if not (lazy and e.where == "function"):
            out.append(e)
    return out


def cycles(pairs: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for a, b in pairs:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _pairs(all_edges) -> set[tuple[str, str]]:
    return {(e.importer, e.target) for e in all_edges}


def _show(found: list[Edge]) -> str:
    return "\n".join(f"  {e.importer} -> {e.target} ({modules()[e.importer].relative_to(ROOT)}:"
                     f"{e.line}, {e.where})" for e in found)


# -- the table -----------------------------------------------------------------------------------
def test_the_table_places_every_module_once():
    units = [u for layer in layers() for u in layer.units]
    assert len(layers()) >= 10 and len(units) == len(set(units)), units
    unplaced = [m for m in modules() if unit_of(m) is None]
    assert not unplaced, f"modules in no row of README.md's layer table: {unplaced}"
    empty = [u for u in units if not any(m == u or m.startswith(u + ".") for m in modules())]
    assert not empty, f"layer table names modules that do not exist: {empty}"


# -- the rule ------------------------------------------------------------------------------------
def test_no_module_imports_a_layer_above_its_own():
    found = [e for e in upward() if not e.pending]
    assert not found, "upward imports (README.md's layer table):\n" + _show(found)


def test_no_import_cycle():
    kept = [e for e in edges() if not e.pending]
    found = cycles(_pairs(kept))
    assert not found, f"import cycles: {found}"


def test_every_pending_violation_still_exists():
    """A PENDING entry that no longer violates anything must leave the set (so it cannot
    excuse a new violation later)."""
    violations = {(e.importer, e.target) for e in upward()}
    pairs = _pairs(edges())
    in_cycle = set()
    for component in cycles(pairs):
        members = set(component)
        in_cycle |= {(a, b) for a, b in pairs if a in members and b in members}
    stale = sorted(p for p in PENDING if p not in violations and p not in in_cycle)
    assert not stale, f"PENDING entries that violate nothing now (remove them): {stale}"


def test_the_guard_catches_an_upward_import_and_a_cycle():
    made_up = [Edge("epsim.errors", "epsim.sim.engine", 1, "function", "epsim.sim.engine"),
               Edge("epsim.sim.engine", "epsim.errors", 1, "module", "epsim.errors")]
    assert [(e.importer, e.target) for e in upward(made_up)] == [("epsim.errors", "epsim.sim.engine")]
    assert cycles(_pairs(made_up)) == [["epsim.errors", "epsim.sim.engine"]]
    lazy = [Edge("epsim.commands.calibrate", "live.bench", 1, "function", "live.bench"),
            Edge("epsim.commands.calibrate", "live.bench", 1, "module", "live.bench")]
    assert [e.where for e in upward(lazy)] == ["module"]


# -- what epsim and app never import -------------------------------------------------------------
def _imported_names(where: set[str]):
    """(module, imported module's name, line) for every import statement written at `where`."""
    for module, path in modules().items():
        for node, at in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if at in where:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                yield from ((module, name, node.lineno) for name in names)


def test_epsim_never_imports_torch_or_live_at_module_level():
    """Module level: what runs on `import` (an `if TYPE_CHECKING:` block never runs)."""
    found = [(m, n, line) for m, n, line in _imported_names({"module"})
             if m.split(".")[0] == "epsim" and n.split(".")[0] in ("torch", "live")]
    assert not found, found


def test_app_never_imports_live():
    found = [e for e in edges() if e.importer.split(".")[0] == "app" and e.target.split(".")[0] == "live"]
    assert not found, _show(found)


def test_import_epsim_cli_loads_no_library():
    """`epsim --help` (the CLI module and its parser) stays as cheap as the standard library:
    each subcommand's module, and the libraries it needs, load only when it runs."""
    code = ("import sys; import epsim.cli; epsim.cli.build_parser(); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    loaded = set(out.stdout.split())
    heavy = {"numpy", "scipy", "simpy", "pydantic", "yaml", "matplotlib", "pandas", "pyarrow",
             "torch", "tqdm", "ray", "live"}
    assert not loaded & heavy, sorted(loaded & heavy)


# -- imports at the top --------------------------------------------------------------------------
def in_function_share(root: Path = ROOT) -> tuple[int, int]:
    """(epsim's internal import statements, those inside a function)."""
    total = inside = 0
    for module, path in modules(root).items():
        if module.split(".")[0] != "epsim":
            continue
        for node, where in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                ["epsim" if node.level else node.module or ""]
            if any(n.split(".")[0] == "epsim" for n in names):
                total += 1
                inside += where == "function"
    return total, inside


def _in_function() -> list[Edge]:
    return [e for e in edges() if e.where == "function" and e.target == e.named
            and e.importer.split(".")[0] == "epsim"
            and not any(e.importer == a and e.target.split(".")[0] == b for a, b in LAZY_UPWARD)]


def test_epsim_imports_its_own_modules_at_the_top():
    found = _in_function()
    assert not found, "internal imports inside functions (move them to the top):\n" + _show(found)


if __name__ == "__main__":
    checkout = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    total, inside = in_function_share(checkout)
    print(f"{checkout}: {total} internal import statements in epsim/, {inside} inside functions "
          f"({100 * inside / total:.1f} %)")
