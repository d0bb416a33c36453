"""``toolexec serve --http HOST:PORT``: run a remote worker from the command line.

The worker serves the tools it is started with, loaded as ``toolexec exec``
loads them (``--tools``, ``--mcp-config``, and the built-in tools on
``--workspace`` when one is given, the shell among them only with
``--shell``, as ``register_builtin_tools`` has it), under its own
``--policy``; it never asks for approval. The shared token comes from
``--token-file`` or the ``TOOLEXEC_WORKER_TOKEN`` environment variable,
never from the command line (which other users of the machine can read).
Before listening it says on stderr which tools it serves, under which
policy, and that it never asks; once listening it prints one line on
stdout, ``toolexec worker listening on http://HOST:PORT``, so a script
starting it with port 0 learns the port; its log (calls started, finished,
cancelled, refused) goes to stderr.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs
import trio

from .._backends._remote_wire import TOKEN_ENV
from .._backends._remote_worker import check_token, serve_worker
from .._core._display import display_lines
from .._tools._builtins import register_builtin_tools
from .._tools._workspace import Workspace
from ._sources import ToolSources, UsageError, load_mcp_config, load_tools, open_mcp_tools

if TYPE_CHECKING:
    import argparse

    from .._core._registry import ToolRegistry
    from .._core._tool_protocol import ToolFactory
    from .._gate._policy import ToolPolicy
    from ..mcp import MCPServerConfig

__all__ = ["parse_address", "serve_command"]


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a host and a port number."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(
            f"--http {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8750 "
            "(port 0 picks a free port; [::1]:8750 for IPv6)"
        )
    return host, int(port)


def _token(path: str | None) -> str:
    if path is not None:
        try:
            token = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the token file {path}: {exc}") from None
        where = f"the token file {path}"
    else:
        token = os.environ.get(TOKEN_ENV, "")
        where = f"the {TOKEN_ENV} environment variable"
        if not token:
            raise UsageError(
                f"the worker needs a shared token: set {TOKEN_ENV} or pass --token-file FILE"
            )
    try:
        return check_token(token)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None


@attrs.frozen
class _Worker:
    host: str
    port: int
    token: str
    policy: ToolPolicy | None
    workspace: Workspace | None
    tools: tuple[tuple[str, tuple[ToolFactory, ...]], ...]
    mcp: tuple[MCPServerConfig, ...]


def _load(args: argparse.Namespace, policy: ToolPolicy | None) -> _Worker:
    host, port = parse_address(args.http)
    token = _token(args.token_file)
    workspace = None
    if args.workspace is not None:
        if not Path(args.workspace).is_dir():
            raise UsageError(f"workspace {args.workspace!r} is not an existing directory")
        workspace = Workspace(args.workspace)
        if policy is not None and attrs.has(type(policy)) and hasattr(policy, "workspace"):
            policy = attrs.evolve(policy, workspace=workspace)  # type: ignore[misc]
    tools = tuple((spec, tuple(load_tools(spec))) for spec in args.tools)
    mcp = load_mcp_config(args.mcp_config) if args.mcp_config else ()
    if workspace is None and not tools and not mcp:
        raise UsageError(
            "the worker has no tools to serve: pass --tools MODULE:ATTR, --mcp-config FILE, "
            "or --workspace DIR for the built-in tools"
        )
    return _Worker(host, port, token, policy, workspace, tools, mcp)


def _describe(worker: _Worker, args: argparse.Namespace, registry: ToolRegistry) -> str:
    """What the worker serves, under which policy, and that it never asks."""
    names = sorted(registry.names())
    if worker.workspace is None:
        builtins = "; no built-in tools (--workspace DIR serves them)"
    elif "shell" not in names:
        builtins = f"; built-in tools on {worker.workspace.root}, not the shell (--shell serves it)"
    else:
        builtins = f"; built-in tools on {worker.workspace.root}, the shell among them"
    rules = getattr(worker.policy, "rules", None)
    if worker.policy is None:
        policy = "none: every call of these tools is allowed (--policy FILE restricts them)"
    elif rules is not None:
        default = getattr(worker.policy, "default", "allow")
        policy = f"the {len(rules)} rule(s) of {args.policy}, default {default}"
    else:
        policy = f"{type(worker.policy).__name__} from {args.policy}"
    return (
        f"toolexec worker: serving {len(names)} tool(s): {', '.join(names)}{builtins}\n"
        f"toolexec worker: policy: {policy}\n"
        "toolexec worker: approval: none: the worker never asks (each host approves before "
        "it sends a call); a rule that says 'ask' refuses\n"
    )


async def _serve(
    worker: _Worker, args: argparse.Namespace, stdout: TextIO, stderr: TextIO | None = None
) -> None:
    sources = ToolSources()
    if worker.workspace is not None:
        register_builtin_tools(sources.registry, worker.workspace, shell=args.shell)
        sources.claim("the built-in tools")
    for spec, factories in worker.tools:
        for factory in factories:
            sources.add(factory, f"--tools {spec}")
    async with contextlib.AsyncExitStack() as stack:
        if worker.mcp:
            await open_mcp_tools(stack, worker.mcp, sources, args.mcp_config)
        log = sys.stderr if stderr is None else stderr
        log.write(display_lines(_describe(worker, args, sources.registry)))
        log.flush()
        failure: OSError | None = None
        async with trio.open_nursery() as nursery:
            try:
                url = await nursery.start(
                    partial(
                        serve_worker,
                        sources.registry,
                        token=worker.token,
                        host=worker.host,
                        port=worker.port,
                        policy=worker.policy,
                        workspace=worker.workspace,
                    )
                )
            except* OSError as group:  # binding failed: nothing was started
                failure = _first_leaf(group)
            else:
                stdout.write(f"toolexec worker listening on {url}\n")
                stdout.flush()
    if failure is not None:
        reason = failure.strerror or failure
        raise UsageError(f"--http {args.http}: cannot listen there: {reason}")


def _first_leaf(group: BaseExceptionGroup[OSError]) -> OSError:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


class _LogHandler(logging.Handler):
    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.INFO)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        from .._core._display import display_lines

        self.stream.write(f"toolexec worker: {display_lines(record.getMessage())}\n")
        self.stream.flush()


def serve_command(
    args: argparse.Namespace, policy: ToolPolicy | None, stdout: TextIO, stderr: TextIO
) -> int:
    """Run ``toolexec serve --http`` until interrupted; ``UsageError`` for bad options."""
    worker = _load(args, policy)
    logger = logging.getLogger("toolexec")
    handler = _LogHandler(stderr)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        trio.run(_serve, worker, args, stdout, stderr)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return 0
