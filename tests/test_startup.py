"""Cold start: what ``import toolexec`` and ``toolexec --help`` load, in fresh processes.

``import toolexec`` imports the values, errors, plans, the registry and the
policy basics; the machinery (executor, tools, agents), the tiers and every
integration load the first time they are used. ``toolexec --help`` builds its
parser from constants alone. How fast that is lives in
``benchmarks/bench_startup.py``; these tests only check what is loaded, so
that a new top-level import of something heavy fails here, by name.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

# Third-party packages neither may load: trio and jsonschema are the bulk of
# the import time; the rest belong to extras.
THIRD_PARTY = (
    "trio",
    "jsonschema",
    "jsonschema_rs",
    "httpx",
    "httpx2",
    "hypercorn",
    "mcp",
    "yaml",
    "ray",
    "opentelemetry",
    "pydantic",
    "pydantic_ai",
    "langchain_core",
    "langgraph",
    "agents",
    "openai",
    "anthropic",
    "hypothesis",
)
# The machinery and the integrations, which neither may load.
MACHINERY = (
    "toolexec._core._executor",
    "toolexec._core._batch",
    "toolexec._core._limits",
    "toolexec._core._events",
    "toolexec._core._tool_protocol",
    "toolexec._gate._approval",
    "toolexec._gate._rules",
    "toolexec._gate._audit",
    "toolexec._agents._agent",
    "toolexec._agents._subagent",
    "toolexec._tools",
    "toolexec._proc",
    "toolexec._ipc",
    "toolexec._adapters._models",
    "toolexec._backends._ray",
    "toolexec._backends._remote",
    "toolexec._backends._remote_worker",
    "toolexec._backends._sandbox",
    "toolexec.mcp",
    "toolexec.openapi",
    "toolexec.testing",
    "toolexec._cli._commands",
    "toolexec._cli._ipc",
    "toolexec._cli._remote",
)
# What ``import toolexec`` leaves out besides: the tiers and public extras, the
# formats' code, the command line.
NOT_ON_IMPORT = (
    "toolexec._adapters",
    "toolexec._agents",
    "toolexec._backends",
    "toolexec._cli",
    "toolexec.aio",
    "toolexec.approval",
    "toolexec.backends",
    "toolexec.events",
    "toolexec.formats",
    "toolexec.ipc",
    "toolexec.langgraph",
    "toolexec.models",
    "toolexec.openai_agents",
    "toolexec.otel",
    "toolexec.policy",
    "toolexec.pydantic_ai",
    "toolexec.streams",
    "toolexec.tools",
)


def _loaded(code: str) -> set[str]:
    """The modules loaded once ``code`` ran in a fresh interpreter."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def _within(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that are one of ``names`` or inside one."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_import_toolexec_loads_only_the_light_root() -> None:
    loaded = _loaded("import toolexec")
    assert _within(loaded, THIRD_PARTY + MACHINERY + NOT_ON_IMPORT) == []
    assert {"toolexec._core._types", "toolexec._core._registry", "toolexec._gate._policy"} <= loaded


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["exec", "--help"], ["tools", "--help"], ["serve", "--help"]],
)
def test_help_loads_only_the_parser(argv: list[str]) -> None:
    loaded = _loaded(
        f"""
        from toolexec._cli._main import main
        try:
            main({argv!r})
        except SystemExit as exit:
            assert exit.code == 0, exit.code
        """
    )
    assert "toolexec._cli._main" in loaded
    assert _within(loaded, THIRD_PARTY + MACHINERY) == []


def test_lazy_names_load_on_first_use_and_name_the_root() -> None:
    script = """
        import sys
        import toolexec
        assert "toolexec._core._executor" not in sys.modules
        executor = toolexec.ToolExecutor
        assert "toolexec._core._executor" in sys.modules
        assert executor.__module__ == "toolexec", executor.__module__
        # Loaded with the executor, bound and fixed up before their first use:
        assert vars(toolexec)["Batch"].__module__ == "toolexec"
        assert vars(toolexec)["ToolContext"].__module__ == "toolexec"
        assert toolexec.policy.Rule.__module__ == "toolexec.policy"
        assert set(toolexec.__all__) | {"policy", "tools", "formats"} <= set(dir(toolexec))
        """
    assert "toolexec.policy" in _loaded(script)


def test_a_root_name_loaded_by_a_tier_names_the_root() -> None:
    _loaded(
        """
        import sys
        import toolexec.tools
        root = vars(sys.modules["toolexec"])
        assert root["register_builtin_tools"].__module__ == "toolexec"
        assert "Workspace" not in root  # not loaded by toolexec.tools
        assert toolexec.tools.ShellTool.__module__ == "toolexec.tools"
        """
    )


def test_star_import_and_unknown_names() -> None:
    namespace: dict[str, object] = {}
    exec("from toolexec import *", namespace)
    import toolexec

    assert {name for name in namespace if not name.startswith("__")} == set(toolexec.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        toolexec.nothing_here  # type: ignore[attr-defined]  # noqa: B018


def test_the_root_lists_its_lazy_names_and_tiers() -> None:
    import toolexec

    names = set(dir(toolexec))
    assert set(toolexec.__all__) <= names
    assert {"approval", "events", "policy", "tools", "__version__"} <= names
    policy = importlib.import_module("toolexec.policy")
    assert vars(toolexec)["__getattr__"]("policy") is policy
