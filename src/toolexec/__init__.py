"""toolexec: a concurrency-focused tool-call executor for LLM agents, built on trio.

General layout: every module that holds code is private (``_name.py``) and
holds one concept. The public API comes in tiers, each a module that only
re-exports:

- ``toolexec``: what an embedder uses every day: the executor and registry,
  calls, results and content, tools, concurrency and strategies, batches,
  the policy basics, agent loops and sub-agents, the workspace, the errors.
- ``toolexec.events``: events and the sinks that receive them.
- ``toolexec.policy``: rules, matchers, capabilities and hooks (and the
  policy basics again, as the same objects).
- ``toolexec.approval``: approval modes and approvers.
- ``toolexec.backends``: where calls run (the ``Backend`` seam).
- ``toolexec.tools``: the built-in tool classes (``register_builtin_tools``,
  which registers them all, is in the root).
- ``toolexec.models``: the ``Model`` protocol, its values, the SDK adapters.
- ``toolexec.formats``, ``toolexec.mcp``, ``toolexec.testing``: provider
  formats, MCP tool sources (extra ``mcp``), test helpers.

Each name lives in exactly one of them and reports it as its
``__module__``. Anything not listed in an ``__all__`` may change without
notice.

Startup. ``import toolexec`` imports the values, errors, plans, the
registry and the policy basics at once; they need neither trio nor
jsonschema. The machinery (the executor and batches, concurrency, tools,
agents, the workspace) and the tiers load the first time one of their names
is used (``toolexec.ToolExecutor``, ``from toolexec import ToolExecutor``,
``toolexec.policy``), and a tier's names report it as their ``__module__``
from the time it is imported (``_core._public`` has the details).
``benchmarks/bench_startup.py`` measures the cost; ``tests/test_startup.py``
keeps the rest out.
"""

from __future__ import annotations

import typing as _typing

from ._core._errors import InternalError, RegistrationError, ToolError, ToolexecError
from ._core._plan import Batched, BatchPlan, ExecutionStrategy, Parallel, RunPlan, Sequential
from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._core._public import lazy_names as _lazy_names
from ._core._registry import ToolRegistry
from ._core._resource_keys import Resource
from ._core._types import (
    ContentBlock,
    ErrorClass,
    ImageContent,
    JsonContent,
    RoutingClass,
    SideEffects,
    TextContent,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolResult,
)
from ._core._version import VERSION as _VERSION
from ._core._workspace_errors import WorkspaceError, WorkspaceErrorKind
from ._gate._policy import Allow, AllowAll, Ask, Deny, ToolPolicy

if _typing.TYPE_CHECKING:
    from . import approval as approval
    from . import backends as backends
    from . import events as events
    from . import formats as formats
    from . import models as models
    from . import policy as policy
    from . import tools as tools
    from ._agents._agent import AgentLoop, AgentResult, StopReason
    from ._agents._subagent import AgentTree, SubAgentTool, TreeLimits, TreeStatistics
    from ._core._batch import Batch, BatchOutcome, Steering
    from ._core._executor import ToolExecutor
    from ._core._limits import ConcurrencyConfig, ExecutorStatistics, PoolStatistics
    from ._core._tool_protocol import Tool, ToolContext
    from ._tools._builtins import register_builtin_tools
    from ._tools._function import FunctionTool, function_tool
    from ._tools._workspace import Workspace

__version__ = _VERSION

__all__ = [
    "AgentLoop",
    "AgentResult",
    "AgentTree",
    "Allow",
    "AllowAll",
    "Ask",
    "Batch",
    "BatchOutcome",
    "BatchPlan",
    "Batched",
    "ConcurrencyConfig",
    "ContentBlock",
    "Deny",
    "ErrorClass",
    "ExecutionStrategy",
    "ExecutorStatistics",
    "FunctionTool",
    "ImageContent",
    "InternalError",
    "JsonContent",
    "Parallel",
    "PoolStatistics",
    "RegistrationError",
    "Resource",
    "RoutingClass",
    "RunPlan",
    "Sequential",
    "SideEffects",
    "Steering",
    "StopReason",
    "SubAgentTool",
    "TextContent",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolExecutor",
    "ToolOutput",
    "ToolPolicy",
    "ToolRegistry",
    "ToolResult",
    "ToolexecError",
    "TreeLimits",
    "TreeStatistics",
    "Workspace",
    "WorkspaceError",
    "WorkspaceErrorKind",
    "function_tool",
    "register_builtin_tools",
]

# The names imported the first time they are used, each with its module.
_LAZY = {
    "AgentLoop": "._agents._agent",
    "AgentResult": "._agents._agent",
    "StopReason": "._agents._agent",
    "AgentTree": "._agents._subagent",
    "SubAgentTool": "._agents._subagent",
    "TreeLimits": "._agents._subagent",
    "TreeStatistics": "._agents._subagent",
    "Batch": "._core._batch",
    "BatchOutcome": "._core._batch",
    "Steering": "._core._batch",
    "ToolExecutor": "._core._executor",
    "ConcurrencyConfig": "._core._limits",
    "ExecutorStatistics": "._core._limits",
    "PoolStatistics": "._core._limits",
    "Tool": "._core._tool_protocol",
    "ToolContext": "._core._tool_protocol",
    "register_builtin_tools": "._tools._builtins",
    "FunctionTool": "._tools._function",
    "function_tool": "._tools._function",
    "Workspace": "._tools._workspace",
}
# The tiers, reached as attributes (``toolexec.policy.Rule``), imported on first use.
_SUBMODULES = ("approval", "backends", "events", "formats", "models", "policy", "tools")

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, not a catch-all
    __getattr__, __dir__ = _lazy_names(
        __name__, {name: __name__ + module for name, module in _LAZY.items()}, _SUBMODULES
    )

_fixup_module_metadata(__name__, [name for name in __all__ if name not in _LAZY])
