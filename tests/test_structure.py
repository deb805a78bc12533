"""The house as issue 26 asks it to stay: no import circle among the project's modules
(imports inside functions count), no module over 400 lines, a docstring on every package
and module, and every op's places found by one grep of its name."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest

from refir.ir import ops

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("refir", "interp", "gpu_backend", "conformance")
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for n in ast.walk(block)}  # `if TYPE_CHECKING:` imports make no runtime circle
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # `from pkg import mod` imports the module; `from pkg import name` the package's __init__
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_are_found():
    """The check can fail: a planted circle is reported."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert cycles(graph) == []


def test_no_module_over_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules().values()}
    long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert long == {}


def test_every_package_and_module_says_what_it_holds():
    bare = [str(p.relative_to(ROOT)) for p in modules().values() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert bare == []


# ---- one grep per op ----------------------------------------------------------------------

SOURCE_OPS = typing.get_args(ops.Op)
FAMILIES = {ops.Binary: ops.BINARY, ops.Unary: ops.UNARY, ops.Compare: ops.COMPARISONS, ops.Reduction: ops.REDUCTIONS}


def text_of(*paths: str) -> str:
    return "".join(p.read_text() for rel in paths for p in sorted(ROOT.glob(rel)))


LAYERS = {  # where an op's own code lives, layer by layer
    "spec": "docs/spec.md",
    "dataclass": "refir/ir/ops.py",
    "syntax (parser)": "refir/text/op_syntax.py",
    "type rule": "refir/checks/*rules*.py",
    "numpy impl": "interp/*.py",  # impls, and the families that register into its table
    "gpu impl": "gpu_backend/**/*.py",
    "builder": "refir/frontends/builder_values.py",
    "importer mapping": "refir/frontends/nvfuser*.py",
}


# Places that do not exist, and why (an entry that is found after all fails the test).
ABSENT = {
    **{(n, "importer mapping"): "nvFuser's frontend has no bitwise reduction (sum, prod, max, min)"
       for n in ("band", "bor", "bxor")},
}


def names_of(cls: type) -> list[str]:
    """An op's text names: its family's members, or its class name in lower case."""
    return list(FAMILIES.get(cls, (cls.__name__.lower(),)))


@pytest.mark.parametrize("cls", SOURCE_OPS, ids=lambda c: c.__name__)
def test_one_grep_finds_every_place_of_an_op(cls):
    missing = []
    for layer, glob in LAYERS.items():
        text = text_of(glob)
        for name in names_of(cls):
            word = re.compile(rf"\b(ops\.{cls.__name__}\b|{re.escape(name)}\b)", re.I)
            found = bool(word.search(text)) if (name, layer) not in ABSENT else not _word(name).search(text)
            if not found:
                missing.append(f"{name}: {layer} ({glob})")
    assert missing == []


def _word(name: str) -> re.Pattern:
    return re.compile(rf"\b{re.escape(name)}\b", re.I)
