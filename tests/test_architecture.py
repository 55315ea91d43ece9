"""The package's layering, read from its source: no cycles between subpackages, and the import rules
of docs/architecture.md. Every `import` and `from ... import` counts, relative or absolute, at module
level or inside a function, so a lazy import cannot hide a dependency."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "gamengen"


@dataclass(frozen=True)
class Import:
    file: str       # path relative to the repository, e.g. src/gamengen/engine/world.py
    line: int
    importer: str   # dotted module that imports, e.g. gamengen.engine.world
    target: str     # dotted gamengen module (or package) imported, e.g. gamengen.train.world_model

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.where}: {self.importer} imports {self.target}"


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str, src: Path) -> bool:
    """A module or package (with or without __init__.py) under src."""
    p = src.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or p.is_dir()


def imports_of(path: Path, src: Path, root: str = ROOT) -> list[Import]:
    """Every import of a `root` module in one file, resolved to the deepest module that exists:
    `from .x import y` is an import of `pkg.x.y` when y is a submodule, of `pkg.x` when it is a name."""
    name = module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    rel = path.relative_to(src.parent).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level - 1 >= len(base_parts):
                    raise AssertionError(f"{rel}:{node.lineno}: relative import goes above the package")
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}"
                targets.append(sub if a.name != "*" and is_module(sub, src) else base)
        for t in dict.fromkeys(targets):  # `from .m import a, b` is one import of m
            if t == root or t.startswith(root + "."):
                found.append(Import(rel, node.lineno, name, t))
    return sorted(found, key=lambda i: i.line)


def all_imports(src: Path = SRC, root: str = ROOT) -> list[Import]:
    out = []
    for path in sorted((src / root).rglob("*.py")):
        out += imports_of(path, src, root)
    return out


def layer(dotted: str, root: str = ROOT) -> str:
    """The graph's node: the subpackage (gamengen.train) or top-level module (gamengen.bench);
    the root package itself (gamengen/__init__.py, gamengen/__main__.py) is `gamengen`."""
    parts = dotted.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return root
    return ".".join(parts[:2])


def layer_graph(imports: list[Import]) -> dict[tuple[str, str], list[Import]]:
    """(importing layer, imported layer) -> the imports that make that edge; no self-edges."""
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in imports:
        a, b = layer(imp.importer), layer(imp.target)
        if a != b:
            edges.setdefault((a, b), []).append(imp)
    return edges


def find_cycles(edges) -> list[list[str]]:
    """Every elementary cycle, as a path [a, ..., a] that starts at its smallest node (the graph has
    a dozen nodes, so a plain search is enough)."""
    succ: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        succ.setdefault(a, []).append(b)
    cycles = []

    def extend(path):
        for w in succ.get(path[-1], []):
            if w == path[0]:
                cycles.append(path + [w])
            elif w > path[0] and w not in path:
                extend(path + [w])

    for start in sorted(succ):
        extend([start])
    return cycles


def tangles(cycles: list[list[str]]) -> list[frozenset[str]]:
    """The groups of layers that import each other in a ring (strongly connected components): cycles
    that share a layer belong together."""
    groups: list[set[str]] = []
    for c in cycles:
        merged = set(c)
        for g in [g for g in groups if g & merged]:
            groups.remove(g)
            merged |= g
        groups.append(merged)
    return sorted((frozenset(g) for g in groups), key=sorted)


def describe_tangle(group: frozenset[str], cycles, edges) -> str:
    lines = [f"{', '.join(sorted(group))} import each other:"]
    lines += ["  " + " -> ".join(c) for c in cycles if set(c) <= group]
    for (a, b), imps in sorted(edges.items()):
        if a in group and b in group:
            lines += [f"  {a} -> {b}:"] + [f"    {imp}" for imp in imps]
    return "\n".join(lines)


# The layering rules (docs/architecture.md): importer layers -> layers they must never import.
G = ROOT + "."
RULES = {
    "engine-and-play-stay-off-training": (
        {G + "engine", G + "play"}, {G + "train", G + "agent", G + "eval"}),
    "models-and-diffusion-are-leaves": (
        {G + "models", G + "diffusion"},
        {G + "data", G + "train", G + "engine", G + "play", G + "eval", G + "agent", G + "record", G + "cli"}),
    "data-stays-below-models": (
        {G + "data"}, {G + "train", G + "engine", G + "play", G + "eval", G + "models", G + "diffusion"}),
}
# `python -m gamengen` (gamengen/__main__.py) is the one place outside cli that may import cli.
CLI_ENTRY_POINTS = {G + "__main__"}


def offenders(rule: str, imports: list[Import]) -> list[Import]:
    if rule == "only-cli-imports-cli":
        return [i for i in imports if layer(i.target) == G + "cli" and layer(i.importer) != G + "cli"
                and i.importer not in CLI_ENTRY_POINTS]
    importers, forbidden = RULES[rule]
    return [i for i in imports if layer(i.importer) in importers and layer(i.target) in forbidden]


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return all_imports()


def test_the_import_graph_reader_resolves_relative_local_and_submodule_imports(tmp_path):
    pkg = tmp_path / "pkg"
    for d in ("a", "b", "c"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text("")
    (pkg / "b" / "mod.py").write_text("X = 1\n")
    (pkg / "c" / "nsless").mkdir()  # a folder without __init__.py still counts as a package
    (pkg / "a" / "x.py").write_text(
        "import os\n"
        "from . import y\n"                 # sibling name, not a module: pkg.a
        "from ..b import mod\n"             # a submodule: pkg.b.mod
        "from ..b.mod import X\n"           # a name in a module: pkg.b.mod
        "from .. import top, c\n"           # modules of the parent: pkg.top, pkg.c
        "import pkg.c.nsless\n"
        "def f():\n"
        "    from ..c import z\n"           # function-local: pkg.c
        "    import pkg.b as b\n")
    got = [(i.line, i.importer, i.target) for i in imports_of(pkg / "a" / "x.py", tmp_path, "pkg")]
    assert got == [(2, "pkg.a.x", "pkg.a"), (3, "pkg.a.x", "pkg.b.mod"), (4, "pkg.a.x", "pkg.b.mod"),
                   (5, "pkg.a.x", "pkg.top"), (5, "pkg.a.x", "pkg.c"), (6, "pkg.a.x", "pkg.c.nsless"),
                   (8, "pkg.a.x", "pkg.c"), (9, "pkg.a.x", "pkg.b")]
    assert imports_of(pkg / "a" / "x.py", tmp_path, "pkg")[0].where.endswith("/pkg/a/x.py:2")
    (pkg / "a" / "__init__.py").write_text("from .x import f\nfrom . import x\n")  # in a package's __init__
    assert [i.target for i in imports_of(pkg / "a" / "__init__.py", tmp_path, "pkg")] == ["pkg.a.x", "pkg.a.x"]
    assert [layer(n, "pkg") for n in ("pkg", "pkg.__main__", "pkg.top", "pkg.b.mod")] == ["pkg", "pkg", "pkg.top", "pkg.b"]
    edges = {("p.a", "p.b"): [], ("p.b", "p.c"): [], ("p.c", "p.a"): [], ("p.c", "p.d"): [],
             ("p.d", "p.e"): [], ("p.e", "p.d"): [], ("p.e", "p.f"): [], ("p.f", "p.e"): [], ("p.g", "p.a"): []}
    cycles = find_cycles(edges)
    assert cycles == [["p.a", "p.b", "p.c", "p.a"], ["p.d", "p.e", "p.d"], ["p.e", "p.f", "p.e"]]
    assert tangles(cycles) == [{"p.a", "p.b", "p.c"}, {"p.d", "p.e", "p.f"}]
    assert find_cycles({("p.a", "p.b"): [], ("p.b", "p.c"): []}) == []


def test_the_real_graph_is_read(imports):
    # a few imports that certainly exist, so that an empty or broken graph cannot pass the rules
    edges = layer_graph(imports)
    assert (G + "cli", G + "errors") in edges
    assert (G + "cli", G + "play") in edges  # function-local in cli/play.py
    assert (ROOT, G + "cli") in edges  # gamengen/__main__.py
    assert all(not i.target.endswith(".__init__") for i in imports)


def test_no_cycles_between_subpackages(imports):
    edges = layer_graph(imports)
    cycles = find_cycles(edges)
    assert not cycles, "import cycles between subpackages:\n" + "\n".join(
        describe_tangle(g, cycles, edges) for g in tangles(cycles))


@pytest.mark.parametrize("rule", [*RULES, "only-cli-imports-cli"])
def test_layering_rule(rule, imports):
    bad = offenders(rule, imports)
    assert not bad, f"layering rule {rule} is broken by these imports:\n" + "\n".join(f"  {i}" for i in bad)
