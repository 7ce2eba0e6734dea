"""Structural checks of the package: no import cycles, small files and functions where the step
layer lives, and the one shape legend."""

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "mojax"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _resolve(name: str, mods) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> modules it imports (anywhere in the file, function-local imports included;
    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else ``pkg``)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            edges |= {r for t in targets if (r := _resolve(t, mods)) and r != name}
        # a submodule importing names its own package re-exports is the package's business
        graph[name] = {e for e in edges if not name.startswith(e + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_planted_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]


def test_no_import_cycles_inside_mojax():
    graph = import_graph()
    assert "mojax.rl.spec" in graph["mojax.rl.trainer"]
    assert cycles(graph) == []


def test_config_module_is_a_leaf():
    assert not {m for m in import_graph()["mojax.config"] if m.startswith("mojax")}


@pytest.mark.parametrize("sub", ["rl", "rollout"])
def test_files_and_functions_are_small(sub):
    long_files, long_fns = [], []
    for path in sorted((PKG / sub).rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 500:
            long_files.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long_fns.append(f"{path.name}:{node.name}: {n} lines")
    assert not long_files and not long_fns, long_files + long_fns


def test_papers_are_cited_by_name_not_seed_file_id():
    import re

    bad = []
    for path in sorted(PKG.rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(?<![\w.])00[0-3](_[0-9a-f]{16})?(?![\w.])", line):
                bad.append(f"{path.relative_to(PKG)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad[:40])
