"""``toolexec serve --stdio -- COMMAND``: a supervisor for one runner process.

The runner is started with the channel on its stdin and stdout; it may use
the built-in tools of ``--workspace`` (and ``--tools``), limited to the
``--allow`` patterns and the ``--grant`` paths. Every decision goes to the
``--audit`` file. The exit status is the runner's. The options are
``_main``'s (``_stdio_options``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import trio

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


def _supervisor(args: argparse.Namespace) -> tuple[Supervisor, RunnerConfig, JsonlAuditSink | None]:
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
    register_builtin_tools(sources.registry, workspace, shell=not args.no_shell)
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
    return supervisor, RunnerConfig(args.name, caps), audit


def serve(args: argparse.Namespace) -> int:
    """Run ``serve --stdio``; return the runner's exit status (128+N for signal N).

    Raises:
        UsageError: an option is wrong (exit code 2).
    """
    command = _command(args)
    try:
        supervisor, runner, audit = _supervisor(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        status = trio.run(supervisor.run_process, command, runner)
    except OSError as exc:
        raise UsageError(f"cannot start the runner {command[0]!r}: {exc.strerror or exc}") from None
    finally:
        if audit is not None:
            audit.close()
    return 128 - status if status < 0 else status
