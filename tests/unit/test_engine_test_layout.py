"""The engine's unit tests mirror its folders: every module of ``lookup_source/engine`` is
imported by a test file in the folder of ``tests/unit/engine`` that has its path, so that a
module's tests are found by its name (``engine/request/slots.py`` ->
``tests/unit/engine/request/test_*.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "lookup_source" / "engine"
TESTS = ROOT / "tests" / "unit" / "engine"


def engine_modules() -> list[str]:
    """Every engine module, dotted (``lookup_source.engine.request.slots``)."""
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in ENGINE.rglob("*.py")
        if path.name != "__init__.py"
    )


def imported_modules(path: Path) -> set[str]:
    """The modules a file imports, as dotted names (``from a.b import c`` gives ``a.b`` and,
    where ``c`` is a module, ``a.b.c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_every_engine_module_is_imported_by_a_test_in_its_mirror_folder() -> None:
    modules = engine_modules()
    assert "lookup_source.engine.request.slots" in modules and len(modules) > 40
    unmirrored = []
    for module in modules:
        folder = TESTS.joinpath(*module.split(".")[2:-1])
        tests = sorted(folder.glob("test_*.py"))
        if not any(module in imported_modules(test) for test in tests):
            unmirrored.append(f"{module} (no test in {folder.relative_to(ROOT)} imports it)")
    assert unmirrored == []


def test_the_mirror_has_no_folder_the_engine_lacks() -> None:
    folders = {p.relative_to(TESTS) for p in TESTS.rglob("*") if p.is_dir() and p.name[0] != "_"}
    assert folders == {
        p.relative_to(ENGINE) for p in ENGINE.rglob("*") if p.is_dir() and p.name[0] != "_"
    }
