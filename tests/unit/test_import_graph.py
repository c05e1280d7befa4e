"""No module of the package imports itself back through another: lint-imports checks the layers between
folders, this the modules inside one (an import cycle is a shared piece that has no home of its own)."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def cycles(imports: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan), iteratively: no recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in imports:
        if start in index:
            continue
        work = [(start, iter(imports[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in imports:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(imports[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(group)
    return found


def test_cycles_finds_a_pair_and_a_ring_and_nothing_in_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    found = cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "a"}})
    assert sorted(map(sorted, found)) == [["a", "b"], ["c", "d", "e"]]


def test_no_module_of_the_package_or_analysis_imports_itself_back(monkeypatch) -> None:
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])
    graph = grimp.build_graph("locust_spec", "analysis", cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert cycles(imports) == []


def test_each_class_name_is_defined_once_across_the_package_and_analysis() -> None:
    # a reader (or a grep) that finds a class by its name finds the one it means
    where: dict[str, list[str]] = defaultdict(list)
    for folder in (ROOT / "locust_spec", ROOT / "analysis"):
        for path in sorted(folder.rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
