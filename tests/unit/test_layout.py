"""The house rules the tree keeps: seams are the only doors, and every document a docstring cites exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "polar_cli"
# `docs/name.md` optionally followed by quoted section headings: "Token fields", "Abort"
CITATION = re.compile(r'(docs/[\w-]+\.md)((?:\s*"[^"\n]+"(?:,\s*)?)*)')


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_runtime_package_imports_the_docker_sdk() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if "runtime" not in path.relative_to(PACKAGE).parts[:1]
        and any(m == "docker" or m.startswith("docker.") for m in imported_modules(path))
    ]
    assert offenders == []
    # the seam is real: the runtime package does use it
    assert any("docker" in imported_modules(p) for p in (PACKAGE / "runtime").glob("*.py"))


def test_every_cited_document_and_section_exists() -> None:
    cited = 0
    for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("README.md"), ROOT / "README.md"]:
        text = path.read_text()
        assert not re.search(r"\b(DESIGN|UPSTREAM|HARNESSES)\.md", text), f"{path}: cites a file outside the repository"
        for match in CITATION.finditer(text):
            doc = ROOT / match[1]
            assert doc.is_file(), f"{path}: {match[1]} does not exist"
            headings = set(re.findall(r"^#+ (.+)$", doc.read_text(), re.M))
            for section in re.findall(r'"([^"\n]+)"', match[2]):
                assert section in headings, f"{path}: {match[1]} has no section {section!r}"
                cited += 1
    assert cited >= 8


def test_every_test_module_has_a_basename_of_its_own() -> None:
    """pytest imports test modules by basename (no packages under tests/): two files of one name stop collection."""
    from collections import Counter

    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert not [name for name, n in names.items() if n > 1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(path: Path, modules: Collection[str]) -> set[str]:
    """The polar_cli modules a file imports, anywhere in it (a function's lazy import and a type-only one count);
    ``from package import submodule`` names the submodule alone."""
    names: set[str] = set()
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            inner = {f"{base}.{a.name}" for a in node.names}
            submodules = {n for n in inner if n in modules}
            names.update(submodules)
            if submodules != inner:  # a name defined in the module itself
                names.add(base)
    return {n for n in names if n.split(".")[0] == "polar_cli"}


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(file -> files it imports, room -> rooms it imports); a room is a package folder or a top-level module."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    files: dict[str, set[str]] = {}
    rooms: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = {t for t in _targets(path, modules) if t in modules and t != name}
        files[name] = imported
        room = ".".join(name.split(".")[:2])
        rooms.setdefault(room, set()).update(".".join(t.split(".")[:2]) for t in imported)
        rooms[room].discard(room)
    return files, rooms


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_packages_import_one_way_down() -> None:
    """No two packages import each other, even through others (docs/architecture.md): a package that a lower one
    needs moves down, or the upper one hands it in (`generate.run.generate`'s ``elsewhere``)."""
    files, rooms = _graph()
    assert _cycles(rooms) == []
    assert _cycles(files) == []
    # the seam is real: the tree has both layers and arrows
    assert "polar_cli.node" in rooms["polar_cli.generate"]


def test_only_the_commands_know_the_cluster() -> None:
    """`cluster/` runs the same stages on more machines: the layers below it must not know it exists."""
    _, rooms = _graph()
    knowing = sorted(room for room, imported in rooms.items() if "polar_cli.cluster" in imported)
    assert knowing == ["polar_cli.commands"]


def test_each_package_readme_names_what_the_package_may_import() -> None:
    """A package's README says what it may import ("May import: `a`, `b`."); an import of anything else is either a
    mistake or a change of the house that its README must say."""
    _, rooms = _graph()
    checked = 0
    for readme in sorted(PACKAGE.glob("*/README.md")):
        line = re.search(r"^May import: (.*)$", readme.read_text(), re.M)
        assert line, f"{readme.relative_to(ROOT)}: no 'May import:' line"
        allowed = {f"polar_cli.{name}" for name in re.findall(r"`([\w.]+)`", line[1])}
        extra = sorted(rooms.get(f"polar_cli.{readme.parent.name}", set()) - allowed)
        assert extra == [], f"{readme.relative_to(ROOT)}: imports {extra}, which its README does not allow"
        checked += 1
    assert checked >= 20
