"""``toolexec serve --stdio -- COMMAND``: a supervisor for one runner process.

The runner is started with the channel on its stdin and stdout; it may use
the built-in tools of ``--workspace`` (the shell only with ``--shell``, as
``register_builtin_tools`` has it) and ``--tools``, limited to the
``--allow`` patterns and the ``--grant`` paths. Nobody approves its calls:
what the grants allow runs. Before the runner starts, stderr says which
tools are served, under which grants, and that nobody is asked. Every
decision goes to the ``--audit`` file. The exit status is the runner's. The
options are ``_main``'s (``_stdio_options``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import trio

from .._core._display import display_lines
from .._core._executor import ToolExecutor
from .._gate._audit import JsonlAuditSink
from .._gate._rules import Capabilities, PathGrant
from .._ipc._protocol import DEFAULT_MAX_LINE_BYTES
from .._ipc._supervisor import RunnerConfig, Supervisor
from .._tools._builtins import register_builtin_tools
from .._tools._workspace import Workspace
from ._sources import ToolSources, UsageError, load_tools

if TYPE_CHECKING:
    import argparse

    from .._core._registry import ToolRegistry

__all__ = ["serve"]


def _grant(spec: str) -> PathGrant:
    path, _, mode = spec.rpartition(":") if spec.endswith((":r", ":rw")) else (spec, "", "r")
    return PathGrant(path, mode)  # type: ignore[arg-type]


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.runner)
    if command and command[0] == "--":
        command.pop(0)
    if not command:
        raise UsageError("give the runner command after '--', e.g. -- python agent.py")
    return command


def _supervisor(
    args: argparse.Namespace,
) -> tuple[Supervisor, RunnerConfig, JsonlAuditSink | None, ToolRegistry]:
    if args.workspace is None:
        args.workspace = "."
    if not Path(args.workspace).is_dir():
        raise UsageError(f"workspace {args.workspace!r} is not an existing directory")
    if args.max_line_bytes is None:
        args.max_line_bytes = DEFAULT_MAX_LINE_BYTES
    if args.max_line_bytes < 1:
        raise UsageError(f"--max-line-bytes must be >= 1, got {args.max_line_bytes}")
    workspace = Workspace(args.workspace)
    sources = ToolSources()
    register_builtin_tools(sources.registry, workspace, shell=args.shell)
    sources.claim("the built-in tools")
    for spec in args.tools:
        for factory in load_tools(spec):
            sources.add(factory, f"--tools {spec}")
    audit = JsonlAuditSink.open(args.audit) if args.audit else None
    executor = ToolExecutor(
        sources.registry, workspace=workspace, sinks=[audit] if audit is not None else []
    )
    caps = Capabilities(args.allow or ["*"], [_grant(g) for g in args.grant])
    supervisor = Supervisor(executor, max_line_bytes=args.max_line_bytes)
    return supervisor, RunnerConfig(args.name, caps), audit, sources.registry


def _describe(args: argparse.Namespace, registry: ToolRegistry, runner: RunnerConfig) -> str:
    """What ``serve --stdio`` serves, to whom, under which grants and approval."""
    names = sorted(registry.names())
    shell = "" if "shell" in names else "; not the shell (--shell serves it)"
    grants = ", ".join(f"{g.path} ({g.mode})" for g in runner.capabilities.paths) or (
        "none (--grant PATH[:rw] grants one)"
    )
    patterns = ", ".join(runner.capabilities.tools)
    return (
        f"toolexec serve --stdio: serving {len(names)} tool(s) to runner {runner.name!r}: "
        f"{', '.join(names)}{shell}\n"
        f"toolexec serve --stdio: policy: the runner may call tools matching {patterns} "
        f"(--allow) and use workspace paths: {grants}; workspace {Path(args.workspace).resolve()}\n"
        "toolexec serve --stdio: approval: none: nobody is asked; every call the grants "
        "allow runs\n"
    )


def serve(args: argparse.Namespace, stderr: TextIO | None = None) -> int:
    """Run ``serve --stdio``; return the runner's exit status (128+N for signal N).

    What is served, and how, is written to ``stderr`` (``sys.stderr`` by
    default) before the runner starts.

    Raises:
        UsageError: an option is wrong (exit code 2).
    """
    command = _command(args)
    try:
        supervisor, runner, audit, registry = _supervisor(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    stream = sys.stderr if stderr is None else stderr
    stream.write(display_lines(_describe(args, registry, runner)))
    stream.flush()
    try:
        status = trio.run(supervisor.run_process, command, runner)
    except OSError as exc:
        raise UsageError(f"cannot start the runner {command[0]!r}: {exc.strerror or exc}") from None
    finally:
        if audit is not None:
            audit.close()
    return 128 - status if status < 0 else status
