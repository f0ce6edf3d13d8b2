"""The package's layers: imports point one way, nothing imports in a circle, and the engine and
the connector API load without Spark.

The import graph is read from the source (every import, at module level or inside a function,
except under ``if TYPE_CHECKING``): an import inside a function is still a dependency, and
hiding a cycle there is what this test exists to prevent.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from lookup_source.registry import FIRST_PARTY

PACKAGE = Path(__file__).resolve().parents[2] / "lookup_source"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):  # what is imported only for type checkers
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(child) for child in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.startswith("lookup_source")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {target for target in _imports(path) if target in modules and target != name}
        for name, path in modules.items()
    }


GRAPH = _graph()


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<package>"


def test_no_import_cycle() -> None:
    # Tarjan's strongly connected components over every module of the package
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in GRAPH:
        if node not in index:
            visit(node)
    assert cycles == [], f"import cycles: {cycles}"


# layer -> the layers it may import (besides itself); the package root only re-exports
ALLOWED = {
    "errors": {"redaction"},
    "redaction": set(),
    "connector_api": {"errors", "redaction"},
    "registry": {"connector_api", "errors"},
    # every option, declared once and parsed once; neither Spark nor the engine
    "settings": {"connector_api", "errors", "redaction", "registry"},
    # the public name of the settings (users import parse_options from it); nothing inside
    # the package goes through it
    "options": {"settings"},
    "engine": {"connector_api", "errors", "redaction", "settings"},
    # a user's async function, adapted to the connector API like a connector
    "functions": {"connector_api", "errors", "redaction"},
    "spark": {
        "connector_api",
        "errors",
        "redaction",
        "settings",
        "registry",
        "engine",
        "functions",
    },
    # the contract suite drives a connector as a Spark task would: it may use every layer
    "testing": {
        "connector_api",
        "errors",
        "redaction",
        "settings",
        "registry",
        "engine",
        "functions",
        "spark",
    },
}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_point_one_way(layer: str) -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if _layer(module) == layer
        for target in targets
        if _layer(target) not in ALLOWED[layer] | {layer, "<package>"}
        or (_layer(target) == "<package>" and layer != "<package>")
    )
    assert wrong == [], f"{layer} imports what it must not: {wrong}"


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        (
            "lookup_source.connector_api",
            ("pyspark", "lookup_source.engine", "lookup_source.settings"),
        ),
        ("lookup_source.settings", ("pyspark", "lookup_source.spark", "lookup_source.engine")),
        ("lookup_source.engine", ("pyspark", "lookup_source.spark", "lookup_source.options")),
        ("lookup_source", ("pyspark", "lookup_source.spark")),
    ],
)
def test_importing_loads_no_spark(module: str, forbidden: tuple[str, ...]) -> None:
    code = (
        f"import sys, {module}; "
        f"print(sorted(m for m in sys.modules if m.startswith({forbidden!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"import {module} loaded {done.stdout.strip()}"


ROOT = PACKAGE.parent


@pytest.mark.parametrize(
    "folder", [*(f"connectors/{name}" for name in FIRST_PARTY), "examples/sqlite"]
)
def test_connectors_use_the_public_api_only(folder: str) -> None:
    """A built-in connector is built exactly as a third party's (the example is one): on
    lookup_source.connector_api (the package itself), nothing internal, not even a submodule."""
    name = folder.split("/")[1]
    sources = sorted((ROOT / folder / f"asynclookup_{name}").rglob("*.py"))
    assert sources, f"no sources for the {name} connector"
    used = {target for path in sources for target in _imports(path)}
    wrong = sorted(t for t in used if not t.startswith("lookup_source.connector_api"))
    wrong += sorted(
        t
        for t in used
        if t.startswith("lookup_source.connector_api.")
        and t.removeprefix("lookup_source.connector_api.") not in _public_names()
    )
    assert wrong == [], f"the {name} connector imports internals: {wrong}"


def _public_names() -> set[str]:
    import lookup_source.connector_api as api

    return set(api.__all__)


def test_the_engine_names_no_connectors_option() -> None:
    """Which options are secrets, which hold URLs, is the connector's to declare
    (``OptionSpec(secret=..., url=...)``): no text in the engine names a first-party
    connector's option."""
    prefixes = ("http.", "redis.", "postgres.")
    named = sorted(
        f"{path.name}: {node.value}"
        for path in (PACKAGE / "engine").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(prefixes)
    )
    assert named == [], f"the engine names connectors' options: {named}"


CLOCK_READS = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "process_time"}


def test_one_module_reads_the_clock() -> None:
    """The runtime reads the system's time in engine/clock.py only (monotonic and wall, handed
    over as one ``Clocks``); the rest is given a clock or reads its event loop's, so that tests
    can move time. The bench, the demo and the testing kit measure on their own."""
    outside = ("bench", "demo", "testing")
    reading = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in outside
        for node in ast.walk(ast.parse(path.read_text()))
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "time"
            and node.attr in CLOCK_READS
        )
        or (
            isinstance(node, ast.ImportFrom)
            and node.module == "time"
            and any(alias.name in CLOCK_READS for alias in node.names)
        )
    )
    assert sorted(set(reading)) == ["engine/clock.py"], reading


_STATE_CALLS = {
    "set",
    "dict",
    "list",
    "OrderedDict",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
    "defaultdict",
    "deque",
    "Recent",
    "Lock",
    "RLock",
    "local",
}


def _module_state(path: Path) -> list[str]:
    """A module's process-wide state: what it binds at module level to an empty container, a
    lock or a thread-local (a filled literal is a table of constants)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, (ast.Dict, ast.List, ast.Set)):
            empty = not (value.keys if isinstance(value, ast.Dict) else value.elts)
        elif isinstance(value, ast.Call):
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            empty = name in _STATE_CALLS
        else:
            empty = False
        if empty:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_process_wide_state_outside_the_worker() -> None:
    """What outlives a task on an executor is the worker's (engine/worker.py: the one Worker of
    the process, and all it keeps): no other module of the engine, the settings, the connector
    API or a connector keeps a table, a set or a lock of its own at module level. (The Spark
    layer's registries live on the driver, one per application.)"""
    folders = ["lookup_source/engine", "lookup_source/settings", "lookup_source/connector_api"]
    folders += ["connectors/redis/asynclookup_redis", "connectors/http/asynclookup_http"]
    folders += ["connectors/postgres/asynclookup_postgres"]
    found = [
        place
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
        for place in _module_state(path)
    ]
    assert [p for p in found if not p.startswith("lookup_source/engine/kept/worker.py")] == []


MAX_FILE_LINES = 400
MAX_CLASS_LINES = 300


def test_modules_and_classes_stay_small() -> None:
    """No module of the package or a connector over 400 lines, no class over 300: a module
    with several jobs is split by job (the house's rule)."""
    sources = [p for p in PACKAGE.rglob("*.py")]
    sources += [p for p in (ROOT / "connectors").rglob("*.py") if "tests" not in p.parts]
    too_long = []
    for path in sources:
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}: class {node.name} {lines} lines")
    assert too_long == [], too_long
