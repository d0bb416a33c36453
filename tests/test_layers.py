"""The layers of the library, read from the source: imports point inward only.

Every module of the package belongs to one layer. A module may import from
its own layer and the layers below it, never above; the core imports nothing
but the core; and no two modules import each other, directly or around a
loop. Every import counts: type-only imports under ``TYPE_CHECKING`` and
imports inside functions too, since each is a dependency a reader must hold
in mind. A module's layer is its folder's (``FOLDERS``); a new folder fails
the test until it is given a layer here.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "toolexec"

CORE = "core"
API = "api"
# Lower layers first; a module may import from its own layer or any earlier one.
ORDER = (CORE, "tools", "agents", "integrations", "cli", API)

# Each folder of the package is one layer; a module's layer is its folder's.
# A module directly in the package is the public face (``api``): it may import
# any layer, and no module in a folder may import it.
FOLDERS: dict[str, str] = {
    # The core: values, errors, plans, limits, the call lifecycle, the executor;
    # and the gate it drives for every call (schema, policy, approval, hooks).
    "_core": CORE,
    "_gate": CORE,
    # Tools and the world they act on (workspace, files, shell, child processes).
    "_tools": "tools",
    "_proc": "tools",
    # Agents: the model protocol, the loop, sub-agents.
    "_agents": "agents",
    # Integrations: backends, IPC, provider formats and adapters, MCP, OpenAPI,
    # the testing aids.
    "_backends": "integrations",
    # Durable execution: the journal stores (the protocol is the core's).
    "_durable": "integrations",
    "_ipc": "integrations",
    "_adapters": "integrations",
    "mcp": "integrations",
    "openapi": "integrations",
    "testing": "integrations",
    # The command line, and the page it serves over a journal (``toolexec ui``).
    "_cli": "cli",
    "_ui": "cli",
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """``toolexec/_x.py`` -> ``_x``; ``toolexec/mcp/_y.py`` -> ``mcp._y``."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """The package modules ``source`` imports (any import, anywhere in it)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    if module == "__init__":
        package = []
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "toolexec" or alias.name.startswith("toolexec."):
                    found.add(alias.name.removeprefix("toolexec").lstrip(".") or "__init__")
        elif isinstance(node, ast.ImportFrom):
            found |= _from_import(node, package)
    found.discard(module)
    return found


def _from_import(node: ast.ImportFrom, package: list[str]) -> set[str]:
    if node.level == 0:
        if node.module is None or not (
            node.module == "toolexec" or node.module.startswith("toolexec.")
        ):
            return set()
        base: list[str] = []
        target = node.module.removeprefix("toolexec").lstrip(".")
    else:
        base = package[: len(package) - (node.level - 1)]
        target = node.module or ""
    prefix = [*base, *target.split(".")] if target else base
    if target:
        return {".".join(prefix)}
    # ``from . import formats``: each name is a module of that package.
    return {".".join([*prefix, alias.name]) for alias in node.names}


def layer_of(module: str) -> str | None:
    """The layer of a module: its folder's; ``api`` for a module directly in the package.

    ``None`` for a module in a folder that has no layer yet, and for a private
    module directly in the package: it belongs in a layer's folder.
    """
    folder, dot, _ = module.partition(".")
    if not dot and module not in FOLDERS and not _private(module):
        return API
    return FOLDERS.get(folder)


def _private(name: str) -> bool:
    """A private name (``_x``; not ``__init__`` or ``__main__``) belongs in a folder."""
    return name.startswith("_") and not name.startswith("__")


def package_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        is_package = path.name == "__init__.py" and path.parent != root
        graph[name] = imports_of(path.read_text(), name, is_package)
    return graph


_ADD_IT = "add it to FOLDERS in tests/test_layers.py"


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points outward, every unplaced module, every cycle."""
    found = []
    for module, imported in sorted(graph.items()):
        here = layer_of(module)
        if here is None:
            found.append(f"{module}: its folder has no layer; {_ADD_IT}")
            continue
        for target in sorted(imported):
            there = layer_of(target)
            if there is not None and ORDER.index(there) > ORDER.index(here):
                found.append(f"{module} ({here}) imports {target} ({there}), a layer above it")
    found.extend(f"import cycle: {' -> '.join(c)}" for c in cycles(graph))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [[*group, group[0]] for group in groups]


def test_every_import_points_inward_and_no_module_imports_itself_around_a_loop() -> None:
    assert violations(package_graph()) == []


def test_the_core_imports_only_the_core() -> None:
    graph = package_graph()
    core = {m for m in graph if layer_of(m) == CORE}
    assert {
        "_core._executor",
        "_core._types",
        "_core._tool_protocol",
        "_core._registry",
        "_core._batch",
    } <= core
    for module in sorted(core):
        outside = {t for t in graph[module] if layer_of(t) not in (CORE, None)}
        assert not outside, f"{module} imports {sorted(outside)}"


# -- the test of the test: a deliberate bad import is caught -------------------


def _graph_with(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return package_graph(tmp_path)


def test_an_outward_import_from_the_core_fails(tmp_path: Path) -> None:
    graph = _graph_with(
        tmp_path,
        {
            "_core/__init__.py": "",
            "_core/_types.py": "X = 1\n",
            "_core/_executor.py": """\
                from typing import TYPE_CHECKING
                from ._types import X
                if TYPE_CHECKING:
                    from .._agents._subagent import AgentTree
                """,
            "_agents/__init__.py": "",
            "_agents/_subagent.py": "from .._core._executor import X\n",
        },
    )
    assert violations(graph) == [
        "_core._executor (core) imports _agents._subagent (agents), a layer above it",
        "import cycle: _agents._subagent -> _core._executor -> _agents._subagent",
    ]


def test_a_planted_upward_import_in_the_real_package_fails(tmp_path: Path) -> None:
    """The real tree, with one upward import planted in the executor, fails."""
    graph = package_graph()
    graph["_core._executor"] = graph["_core._executor"] | {"_tools._shell"}
    assert violations(graph) == [
        "_core._executor (core) imports _tools._shell (tools), a layer above it"
    ]


def test_a_folder_module_importing_the_public_face_fails(tmp_path: Path) -> None:
    graph = _graph_with(
        tmp_path,
        {
            "formats.py": "X = 1\n",
            "_adapters/__init__.py": "",
            "_adapters/_models.py": "from ..formats import X\n",
        },
    )
    assert violations(graph) == [
        "_adapters._models (integrations) imports formats (api), a layer above it"
    ]


def test_a_cycle_inside_one_layer_fails(tmp_path: Path) -> None:
    graph = _graph_with(
        tmp_path,
        {
            "_core/_batch.py": "def f():\n    from . import _executor\n",
            "_core/_executor.py": "from toolexec._core._callpath import run\n",
            "_core/_callpath.py": "from ._batch import f\n",
        },
    )
    assert violations(graph) == [
        "import cycle: _core._batch -> _core._callpath -> _core._executor -> _core._batch"
    ]


def test_an_unplaced_folder_and_subpackage_imports_are_seen(tmp_path: Path) -> None:
    graph = _graph_with(
        tmp_path,
        {
            "_new/__init__.py": "",
            "_new/_thing.py": "X = 1\n",
            "mcp/__init__.py": "from ._client import C\n",
            "mcp/_client.py": "from .._core._types import T\nfrom .._cli._main import C\n",
            "_core/_types.py": "T = 1\n",
            "_cli/_main.py": "C = 1\n",
        },
    )
    assert graph["mcp"] == {"mcp._client"}
    assert graph["mcp._client"] == {"_core._types", "_cli._main"}
    assert violations(graph) == [
        "_new: its folder has no layer; add it to FOLDERS in tests/test_layers.py",
        "_new._thing: its folder has no layer; add it to FOLDERS in tests/test_layers.py",
        "mcp._client (integrations) imports _cli._main (cli), a layer above it",
    ]


def test_layers_come_from_folders() -> None:
    assert layer_of("_core._executor") == CORE
    assert layer_of("_gate._policy") == CORE
    assert layer_of("_tools._shell") == "tools"
    assert layer_of("mcp._server") == "integrations"
    assert layer_of("formats") == API
    assert layer_of("_nowhere._x") is None
    assert layer_of("_loose") is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import toolexec.formats\n", {"formats"}),
        ("from toolexec import formats, _types\n", {"formats", "_types"}),
        ("from . import formats\n", {"formats"}),
        ("from .mcp import MCPServer\n", {"mcp"}),
        ("import os\nfrom trio import run\n", set()),
    ],
)
def test_imports_are_read_in_every_spelling(source: str, expected: set[str]) -> None:
    assert imports_of(source, "_cli", is_package=False) == expected


def test_no_function_of_the_core_is_over_50_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if layer_of(module_name(path)) != CORE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 50:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
