"""The layers of the library, read from the source: imports point inward only.

Every module of the package belongs to one layer. A module may import from
its own layer and the layers below it, never above; the core imports nothing
but the core; and no two modules import each other, directly or around a
loop. Every import counts: type-only imports under ``TYPE_CHECKING`` and
imports inside functions too, since each is a dependency a reader must hold
in mind. A new module fails the test until it is given a layer here.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "toolexec"

CORE = "core"
# Lower layers first; a module may import from its own layer or any earlier one.
ORDER = (CORE, "tools", "agents", "integrations", "cli", "api")

LAYERS: dict[str, str] = {
    # The core: values, errors, schema, plan, limits, lifecycle, events,
    # registry, the tool protocol, the gate, and the executor.
    **dict.fromkeys(
        [
            "_types",
            "_errors",
            "_schema",
            "_plan",
            "_limits",
            "_lifecycle",
            "_events",
            "_registry",
            "_tool",
            "_policy",
            "_hooks",
            "_approval",
            "_display",
            "_public",
            "_messages",
            "_report",
            "_backend",
            "_planning",
            "_asking",
            "_callpath",
            "_batch",
            "_executor",
            "_resource_keys",
            "_resources",
            "_fairness",
        ],
        CORE,
    ),
    # Tools and the world they act on (workspace, processes, path policies).
    **dict.fromkeys(
        [
            "_function",
            "_function_meta",
            "_function_pydantic",
            "_function_types",
            "_process",
            "_supervisor",
            "_reaper",
            "_workspace",
            "_workspace_errors",
            "_confined",
            "_dirstack",
            "_worker",
            "_file_ops",
            "_lines",
            "_tree",
            "_builtins",
            "_file_tools",
            "_search",
            "_shell",
            "_shell_classify",
            "_rules",
            "_audit",
            "_trace",
            "_path_keys",
        ],
        "tools",
    ),
    # Agents: the model protocol, the loop, sub-agents.
    **dict.fromkeys(["_model", "_agent", "_subagent"], "agents"),
    # Integrations: provider formats and SDK adapters, MCP, OpenAPI, OpenTelemetry,
    # the asyncio bridge, the testing aids.
    **dict.fromkeys(
        ["formats", "_adapters", "mcp", "openapi", "otel", "aio", "testing", "_ray"],
        "integrations",
    ),
    # Framework adapters (extras langgraph, openai-agents, pydantic-ai) and their collector.
    **dict.fromkeys(["_collect", "langgraph", "openai_agents", "pydantic_ai"], "integrations"),
    # The supervisor/runner IPC protocol.
    **dict.fromkeys(["_ipc_protocol", "_ipc_supervisor", "_ipc_client"], "integrations"),
    **dict.fromkeys(["_ipc_cli"], "cli"),
    **dict.fromkeys(["ipc"], "api"),
    **dict.fromkeys(["streams"], "integrations"),
    # Remote workers: the wire format, the backend and the worker's HTTP service.
    **dict.fromkeys(["_remote_wire", "_remote", "_remote_worker"], "integrations"),
    # The subprocess sandbox (bubblewrap through the optional "sandbox" extra).
    **dict.fromkeys(["_sandbox", "_sandbox_child", "_sandbox_codec"], "integrations"),
    **dict.fromkeys(["_cli", "_cli_sources"], "cli"),
    **dict.fromkeys(["_remote_cli"], "cli"),
    # The public face: re-exports only.
    **dict.fromkeys(
        [
            "__init__",
            "__main__",
            "events",
            "policy",
            "approval",
            "backends",
            "tools",
            "models",
        ],
        "api",
    ),
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
    """The layer of a module; a subpackage's modules share its layer."""
    while module:
        if module in LAYERS:
            return LAYERS[module]
        module = module.rpartition(".")[0]
    return None


def package_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        is_package = path.name == "__init__.py" and path.parent != root
        graph[name] = imports_of(path.read_text(), name, is_package)
    return graph


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points outward, every unplaced module, every cycle."""
    found = []
    for module, imported in sorted(graph.items()):
        here = layer_of(module)
        if here is None:
            found.append(f"{module}: no layer; add it to LAYERS in tests/test_layers.py")
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
    assert {"_executor", "_types", "_tool", "_registry", "_batch"} <= core
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
            "_types.py": "X = 1\n",
            "_executor.py": """\
                from typing import TYPE_CHECKING
                from ._types import X
                if TYPE_CHECKING:
                    from ._subagent import AgentTree
                """,
            "_subagent.py": "from ._executor import X\n",
        },
    )
    assert violations(graph) == [
        "_executor (core) imports _subagent (agents), a layer above it",
        "import cycle: _executor -> _subagent -> _executor",
    ]


def test_a_cycle_inside_one_layer_fails(tmp_path: Path) -> None:
    graph = _graph_with(
        tmp_path,
        {
            "_batch.py": "def f():\n    from . import _executor\n",
            "_executor.py": "from toolexec._callpath import run\n",
            "_callpath.py": "from ._batch import f\n",
        },
    )
    assert violations(graph) == ["import cycle: _batch -> _callpath -> _executor -> _batch"]


def test_an_unplaced_module_and_subpackage_imports_are_seen(tmp_path: Path) -> None:
    graph = _graph_with(
        tmp_path,
        {
            "_new.py": "X = 1\n",
            "mcp/__init__.py": "from ._client import C\n",
            "mcp/_client.py": "from .._types import T\nfrom .. import _cli\n",
            "_types.py": "T = 1\n",
            "_cli.py": "C = 1\n",
        },
    )
    assert graph["mcp"] == {"mcp._client"}
    assert graph["mcp._client"] == {"_types", "_cli"}
    assert violations(graph) == [
        "_new: no layer; add it to LAYERS in tests/test_layers.py",
        "mcp._client (integrations) imports _cli (cli), a layer above it",
    ]


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
