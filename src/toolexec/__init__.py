"""toolexec: a concurrency-focused tool-call executor for LLM agents, built on trio.

General layout: every module is private (``_name.py``) and holds one concept;
this package only re-exports the public names. Anything not listed in
``__all__`` may change without notice.
"""

from __future__ import annotations

from . import formats as formats  # the provider-format submodule
from ._agent import AgentLoop, AgentResult, StopReason
from ._approval import (
    ApprovalAnswer,
    ApprovalConfig,
    ApprovalMode,
    ApprovalRequest,
    Approver,
    AutoApprover,
    FirstAnswer,
    TerminalApprover,
)
from ._audit import JsonlAuditSink
from ._batch import Batch, BatchOutcome, Steering
from ._builtins import EchoTool, register_builtin_tools
from ._errors import InternalError, RegistrationError, ToolError, ToolexecError
from ._events import (
    ApprovalRequested,
    ApprovalResolved,
    BatchFinished,
    BatchPlanned,
    CallbackSink,
    CallCompleted,
    CallFailed,
    CallProgress,
    CallStarted,
    CallUpdate,
    ChannelSink,
    Event,
    EventSink,
    InputInvalid,
    RunFinished,
    RunStarted,
)
from ._executor import ToolExecutor
from ._file_tools import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool
from ._function import FunctionTool, function_tool
from ._hooks import CallHook, HookDecision, Rewrite, Skip
from ._limits import ConcurrencyConfig, ExecutorStatistics, PoolStatistics
from ._model import Message, Model, ModelResponse, Usage
from ._plan import Batched, BatchPlan, ExecutionStrategy, Parallel, RunPlan, Sequential
from ._policy import Allow, AllowAll, Ask, Decision, Deny, ExecutionGrant, ToolPolicy
from ._registry import ToolRegistry
from ._rules import (
    Capabilities,
    CapabilityPolicy,
    CommandPrefix,
    ComposedPolicy,
    Equals,
    Matcher,
    PathGlob,
    PathGrant,
    Prefix,
    Regex,
    Rule,
    RulePolicy,
)
from ._search import SearchFilesTool
from ._shell import ShellTool
from ._shell_classify import classify_shell_command
from ._subagent import AgentTree, SubAgentTool, TreeLimits, TreeStatistics
from ._tool import Tool, ToolContext, ToolFactory
from ._types import (
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
from ._workspace import DirEntry, Workspace, WorkspaceError

__version__ = "0.1.0"

__all__ = [
    "AgentLoop",
    "AgentResult",
    "AgentTree",
    "Allow",
    "AllowAll",
    "ApprovalAnswer",
    "ApprovalConfig",
    "ApprovalMode",
    "ApprovalRequest",
    "ApprovalRequested",
    "ApprovalResolved",
    "Approver",
    "Ask",
    "AutoApprover",
    "Batch",
    "BatchFinished",
    "BatchOutcome",
    "BatchPlan",
    "BatchPlanned",
    "Batched",
    "CallCompleted",
    "CallFailed",
    "CallHook",
    "CallProgress",
    "CallStarted",
    "CallUpdate",
    "CallbackSink",
    "Capabilities",
    "CapabilityPolicy",
    "ChannelSink",
    "CommandPrefix",
    "ComposedPolicy",
    "ConcurrencyConfig",
    "ContentBlock",
    "Decision",
    "Deny",
    "DirEntry",
    "EchoTool",
    "EditFileTool",
    "Equals",
    "ErrorClass",
    "Event",
    "EventSink",
    "ExecutionGrant",
    "ExecutionStrategy",
    "ExecutorStatistics",
    "FirstAnswer",
    "FunctionTool",
    "HookDecision",
    "ImageContent",
    "InputInvalid",
    "InternalError",
    "JsonContent",
    "JsonlAuditSink",
    "ListDirTool",
    "Matcher",
    "Message",
    "Model",
    "ModelResponse",
    "Parallel",
    "PathGlob",
    "PathGrant",
    "PoolStatistics",
    "Prefix",
    "ReadFileTool",
    "Regex",
    "RegistrationError",
    "Rewrite",
    "RoutingClass",
    "Rule",
    "RulePolicy",
    "RunFinished",
    "RunPlan",
    "RunStarted",
    "SearchFilesTool",
    "Sequential",
    "ShellTool",
    "SideEffects",
    "Skip",
    "Steering",
    "StopReason",
    "SubAgentTool",
    "TerminalApprover",
    "TextContent",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolExecutor",
    "ToolFactory",
    "ToolOutput",
    "ToolPolicy",
    "ToolRegistry",
    "ToolResult",
    "ToolexecError",
    "TreeLimits",
    "TreeStatistics",
    "Usage",
    "Workspace",
    "WorkspaceError",
    "WriteFileTool",
    "classify_shell_command",
    "function_tool",
    "register_builtin_tools",
]
