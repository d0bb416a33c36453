"""``toolexec exec`` and ``toolexec tools``: the machinery behind the two commands.

``exec`` loads a provider response, a workspace and a policy file, opens the
tool sources (``_sources``), runs the calls through a ``ToolExecutor`` with
progress on stderr, and returns the result messages in the response's
format; ``tools`` returns the built-in tool definitions in a provider's
format. ``_main`` parses the arguments and imports this module only when
one of these commands runs, so ``toolexec --help`` loads none of it.
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import attrs
import trio

from .._adapters import _formats as formats
from .._backends._microvm import MicroVMBackend
from .._backends._ray import RayBackend
from .._backends._sandbox import SubprocessBackend
from .._backends._sandbox_default import SandboxByDefault
from .._backends._wasm import WasmBackend
from .._core._display import display_text
from .._core._events import (
    ApprovalRequested,
    ApprovalResolved,
    CallCompleted,
    CallFailed,
    CallProgress,
    CallStarted,
    RunStarted,
)
from .._core._executor import ToolExecutor
from .._core._registry import ToolRegistry
from .._core._trace import TraceRecorder
from .._gate._approval import ApprovalConfig, AutoApprover, TerminalApprover
from .._gate._policy import HOST, Allow, AllowAll, Ask
from .._gate._rules import RulePolicy
from .._tools._builtins import register_builtin_tools
from .._tools._workspace import Workspace
from ._sources import (
    ToolSources,
    UsageError,
    load_mcp_config,
    load_tools,
    open_mcp_tools,
    warnings_to,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from .._core._backend import Backend
    from .._core._events import Event, EventSink
    from .._core._tool_protocol import ToolFactory
    from .._core._types import ToolCall, ToolDefinition, ToolResult
    from .._gate._policy import Decision, ToolPolicy
    from ..mcp import MCPServerConfig

__all__ = ["ProgressPrinter", "exec_command", "load_policy", "tools_command"]


def exec_command(args: argparse.Namespace, stdin: TextIO, stderr: TextIO) -> list[dict[str, Any]]:
    """Run ``toolexec exec``: the result messages to print.

    Raises:
        UsageError: a file, the workspace or the tools cannot be used (exit code 2).
    """
    return trio.run(_exec, _load_job(args), args, stdin, stderr)


def tools_command(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run ``toolexec tools``: the built-in tool definitions in ``args.format``."""
    registry = ToolRegistry()
    register_builtin_tools(registry, Workspace("."), shell=args.shell)
    return formats.render_tools(registry.definitions(), args.format)


# -- loading ----------------------------------------------------------------------


def _load_response(path: str, fmt: str | None) -> tuple[str, tuple[ToolCall, ...]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; pass a JSON response file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "pass the provider's response body saved as JSON"
        ) from None
    name = fmt or _detected(path, data)
    try:
        return name, formats.parse_calls(data, name)
    except formats.FormatError as exc:
        hint = "" if fmt else " (or pass --format if the detection was wrong)"
        raise UsageError(f"{path}: {exc}; fix the file{hint}") from None


def _detected(path: str, data: object) -> str:
    """The provider format of a response file, or a ``UsageError`` advising ``--format``."""
    try:
        return formats.detect_format(data)
    except formats.FormatError as exc:
        # The library advises naming the format; here that is --format: say it once.
        words = str(exc).removesuffix("; name the format explicitly")
        raise UsageError(
            f"{path}: {words}; fix the file, or name its format with --format"
        ) from None


def load_policy(path: str | None) -> tuple[RulePolicy | None, ApprovalConfig]:
    """The rules and approval modes of a ``--policy`` file (``.toml`` or ``.json``).

    Raises:
        UsageError: the file cannot be read, does not parse, or holds a bad rule.
    """
    if path is None:
        return None, ApprovalConfig()
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.endswith(".toml") else json.loads(text)
    except OSError as exc:
        raise UsageError(f"cannot read policy {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"policy {path} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"policy {path}: expected an object with 'rules' and 'approval'")
    approval = data.pop("approval", {})
    try:
        config = _approval_config(approval)
        policy = RulePolicy.from_dict(data) if data else None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"policy {path}: {exc}") from None
    return policy, config


def _approval_config(data: Any) -> ApprovalConfig:
    if not isinstance(data, dict):
        raise ValueError("'approval' must be a table of side effect -> mode")
    data = dict(data)
    tools = data.pop("tools", {})
    timeout = data.pop("timeout", 300.0)
    return ApprovalConfig(modes=data, per_tool=tools, timeout=timeout)


# -- output -----------------------------------------------------------------------


@attrs.define(eq=False)
class ProgressPrinter:
    """An event sink printing one line per step of a batch to a text stream."""

    stream: TextIO
    echo_answers: bool = False
    origin: float | None = None
    _prompted: bool = attrs.field(default=False, init=False)

    def emit(self, event: Event) -> None:
        """Print the event, if it is one people follow."""
        if self.origin is None:
            self.origin = event.time
        if isinstance(event, ApprovalRequested):
            self._prompted = self.echo_answers
        line = _progress_line(event)
        if line:
            # An answer piped in is not echoed: end the prompt's line ourselves.
            start = "\n" if self._prompted and isinstance(event, ApprovalResolved) else ""
            self._prompted = False
            self.stream.write(f"{start}[{event.time - self.origin:7.3f}s] {line}\n")
            self.stream.flush()


_CALL_EVENTS = (CallStarted, CallProgress, ApprovalResolved, CallCompleted, CallFailed)


def _progress_line(event: Event) -> str | None:
    # Ids, names, messages and who answered come from the model or a peer:
    # escaped, so none can move the cursor, retitle the terminal or forge a line.
    if isinstance(event, RunStarted):
        return f"run {event.index} ({event.routing.value}): {len(event.call_ids)} call(s)"
    if not isinstance(event, _CALL_EVENTS):
        return None
    call = f"{display_text(event.call_id)} {display_text(event.tool_name)}"
    if isinstance(event, CallStarted):
        return f"  start    {call}"
    if isinstance(event, CallProgress):
        return f"  progress {call}: {display_text(event.message)}"
    if isinstance(event, ApprovalResolved):
        verdict = "approved" if event.approved else "denied"
        return f"  {verdict:<8} {call} (by {display_text(event.by)})"
    if isinstance(event, CallCompleted):
        return f"  ok       {call} ({event.duration * 1000:.1f} ms)"
    first = event.message.split("\n", 1)[0] if event.message else ""
    return f"  error    {call} [{event.error_class.value}] {display_text(first)}"


def _summary(results: Sequence[ToolResult]) -> str:
    errors = [r for r in results if r.is_error]
    kinds = sorted({r.error_class.value for r in errors if r.error_class is not None})
    detail = f" ({', '.join(kinds)})" if kinds else ""
    return (
        f"{len(results)} call(s): {len(results) - len(errors)} ok, {len(errors)} error(s){detail}"
    )


# -- running ----------------------------------------------------------------------


@attrs.frozen
class _Job:
    format: str
    calls: tuple[ToolCall, ...]
    workspace: Workspace
    policy: ToolPolicy
    approval: ApprovalConfig
    tools: tuple[tuple[str, tuple[ToolFactory, ...]], ...] = ()
    mcp: tuple[MCPServerConfig, ...] = ()


def _load_job(args: argparse.Namespace) -> _Job:
    fmt, calls = _load_response(args.response, args.format)
    if not Path(args.workspace).is_dir():
        raise UsageError(
            f"workspace {args.workspace!r} is not an existing directory; "
            "create it or pass another with --workspace"
        )
    if args.trace and not Path(args.trace).resolve().parent.is_dir():
        raise UsageError(f"cannot write the trace to {args.trace}: its directory does not exist")
    policy, approval = load_policy(args.policy)
    workspace = Workspace(args.workspace)
    if policy is not None:  # rules see paths as the workspace resolves them
        policy = attrs.evolve(policy, workspace=workspace)
    tools = tuple((spec, tuple(load_tools(spec))) for spec in args.tools)
    mcp = load_mcp_config(args.mcp_config) if args.mcp_config else ()
    return _Job(fmt, calls, workspace, policy or AllowAll(), approval, tools, mcp)


async def _open_tools(
    job: _Job, args: argparse.Namespace, stack: contextlib.AsyncExitStack
) -> ToolRegistry:
    """The registry of the run: built-ins, ``--tools``, then the MCP servers' tools."""
    sources = ToolSources()
    register_builtin_tools(sources.registry, job.workspace, shell=args.shell)
    sources.claim("the built-in tools")
    for spec, factories in job.tools:
        for factory in factories:
            sources.add(factory, f"--tools {spec}")
    if job.mcp:
        await open_mcp_tools(stack, job.mcp, sources, args.mcp_config)
    return sources.registry


async def _exec(
    job: _Job, args: argparse.Namespace, stdin: TextIO, stderr: TextIO
) -> list[dict[str, Any]]:
    with warnings_to(stderr):
        async with contextlib.AsyncExitStack() as stack:
            registry = await _open_tools(job, args, stack)
            backends, policy = _backends(args, job.policy, registry)
            sandbox = backends["subprocess"]
            assert isinstance(sandbox, SubprocessBackend)
            await stack.enter_async_context(sandbox)  # closes its warm sandboxes
            wasm = backends["wasm"]
            assert isinstance(wasm, WasmBackend)
            await stack.enter_async_context(wasm)  # ends its warm guests
            return await _run(job, args, registry, (backends, policy), (stdin, stderr))


async def _run(
    job: _Job,
    args: argparse.Namespace,
    registry: ToolRegistry,
    routing: tuple[dict[str, Backend], ToolPolicy],
    streams: tuple[TextIO, TextIO],
) -> list[dict[str, Any]]:
    backends, policy = routing
    stdin, stderr = streams
    recorder = TraceRecorder() if args.trace else None
    printer = ProgressPrinter(stderr, echo_answers=not args.yes and not _isatty(stdin))
    sinks: list[EventSink] = [] if args.quiet else [printer]
    if recorder is not None:
        sinks.append(recorder)
    executor = ToolExecutor(
        registry,
        policy=policy,
        backends=backends,
        sinks=sinks,
        workspace=job.workspace,
        approver=AutoApprover(by="--yes") if args.yes else TerminalApprover(stdin, stderr),
        approval=job.approval,
    )
    batch = executor.prepare(job.calls)
    if not args.quiet:
        plan = batch.plan.describe() or "(no call to run)"
        stderr.write(f"{job.format}: {len(job.calls)} tool call(s)\nplan:\n{_indent(plan)}\n")
        if isinstance(policy, SandboxByDefault):
            stderr.write(await _sandbox_line(backends["subprocess"], registry, policy))
    outcome = await batch.run()
    if not args.quiet:
        stderr.write(_summary(outcome.results) + "\n")
    if recorder is not None:
        _write_trace(args.trace, recorder)
    return formats.render_results(outcome.results, job.format)


@attrs.frozen
class _RoutedTo:
    """A policy that sends every call its inner policy grants to the host to ``sandbox``."""

    inner: ToolPolicy
    sandbox: str

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        decision = self.inner.decide(definition, arguments, agent_path)
        if isinstance(decision, Allow | Ask) and decision.grant.sandbox == HOST:
            return attrs.evolve(decision, grant=attrs.evolve(decision.grant, sandbox=self.sandbox))
        return decision


async def _sandbox_line(backend: Backend, registry: ToolRegistry, policy: SandboxByDefault) -> str:
    """Which tools run in the sandbox by default, and at which level."""
    assert isinstance(backend, SubprocessBackend)
    names = [name for name in registry.names() if policy.runs_there(name)]
    if not names:
        return ""
    found = await backend.detect()
    where = (
        f"isolation '{found.level}' (warm)"
        if found.level is not None
        else f"no level available ({found.why_not()})"
    )
    return f"sandbox: {', '.join(names)} run in the subprocess sandbox at {where}\n"


def _backends(
    args: argparse.Namespace, policy: ToolPolicy, registry: ToolRegistry
) -> tuple[dict[str, Backend], ToolPolicy]:
    """The backends of the run, and the policy routing to them: the subprocess
    sandbox, which a policy file's rules may name (docs/sandbox.md) and where
    the shell and importable function tools run unless ``--sandbox none``; the
    ``wasm`` and ``microvm`` sandboxes, which only a policy file's rules send
    calls to; and Ray when ``--ray-address`` is given (``--backend ray`` sends
    every call there)."""
    level = None if args.sandbox in ("auto", "none") else args.sandbox
    backends: dict[str, Backend] = {
        "subprocess": SubprocessBackend(warm=4, require=level),
        "wasm": WasmBackend(),
        "microvm": MicroVMBackend(),
    }
    if args.ray_address is not None:
        try:
            backends["ray"] = RayBackend(address=args.ray_address)
        except (ImportError, ValueError) as exc:
            raise UsageError(f"--ray-address: {exc}") from None
    elif args.backend == "ray":
        raise UsageError(
            "--backend ray needs --ray-address ADDR: the address of a running Ray "
            "cluster ('auto' finds the one started on this machine with 'ray start')"
        )
    if args.backend == "ray":  # every call the policy grants to the host goes there
        return backends, _RoutedTo(policy, "ray")
    if args.sandbox != "none":
        policy = SandboxByDefault(registry, policy)
    return backends, policy


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _write_trace(path: str, recorder: TraceRecorder) -> None:
    try:
        Path(path).write_text(json.dumps(recorder.chrome_trace(), indent=1), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the trace to {path}: {exc.strerror or exc}") from None
