"""The house rules the tree keeps: seams are the only doors, and every document a docstring cites exists."""

from __future__ import annotations

import ast
import re
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
