"""The ``toolexec`` command: run a provider response's tool calls against a workspace.

``toolexec exec RESPONSE.json --workspace DIR`` reads an LLM response in the
OpenAI Chat Completions, OpenAI Responses or Anthropic Messages format, runs
its tool calls through a ``ToolExecutor`` with the built-in tools (plus the
user's own, ``--tools``, and those of MCP servers, ``--mcp-config``: see
``_sources``), and prints
the provider-format result messages as JSON on stdout. The plan of runs,
live progress and approval prompts go to stderr, so stdout stays a clean
JSON document to pipe on.

Exit codes: 0 the batch ran (even if some results are errors: those are for
the model); 1 an unexpected failure (a bug: please report it); 2 a usage
error (bad arguments, an unreadable or malformed file, a missing
workspace, tools that do not load, a required MCP server that does not
open); 130 interrupted.

Startup. ``toolexec --help`` is answered from the parser alone: this module
imports only what the arguments need, and each command imports its
machinery when it runs (``_commands`` for ``exec`` and ``tools``, ``_ipc``
and ``_remote`` for ``serve``). ``tests/test_startup.py`` keeps it so.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import TYPE_CHECKING, NoReturn, TextIO

from .._adapters._formats import FORMATS
from .._backends._remote_wire import TOKEN_ENV
from .._core._display import display_json, display_lines
from .._gate._policy import HOST
from ._questions import COMMANDS as QUESTION_COMMANDS
from ._questions import add_parsers as add_question_parsers
from ._sources import UsageError
from ._ui import add_parser as add_ui_parser

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


# -- arguments --------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolexec",
        description="Run the tool calls of an LLM response through the toolexec executor.",
        epilog="Run 'toolexec COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"toolexec {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "exec",
        help="run the tool calls of a provider response file and print the result messages",
        description=(
            "Read a provider response (OpenAI Chat Completions, OpenAI Responses or "
            "Anthropic Messages), run its tool calls against a workspace with the built-in "
            "tools (read_file, write_file, edit_file, list_dir, search_files, echo; shell "
            "only with --shell), your own (--tools) and those of MCP servers (--mcp-config), "
            "and print the "
            "result messages in the same format as JSON on stdout. The plan, "
            "progress and approval prompts go to stderr. Reads run without asking; writes "
            "and commands ask for approval on the terminal unless --yes is given."
        ),
        epilog=(
            "exit codes: 0 the batch ran (error results included), 1 unexpected failure, "
            "2 usage error (bad file, missing workspace), 130 interrupted"
        ),
    )
    run.add_argument("response", metavar="RESPONSE.json", help="the provider response, as JSON")
    run.add_argument(
        "--workspace", "-w", required=True, metavar="DIR", help="the directory tools work in"
    )
    run.add_argument(
        "--format",
        "-f",
        choices=FORMATS,
        help="the response format (default: detected from the file)",
    )
    run.add_argument(
        "--yes", "-y", action="store_true", help="approve every call that would ask for approval"
    )
    run.add_argument(
        "--policy",
        metavar="FILE",
        help="a .toml or .json policy: allow/deny/ask rules and approval modes (see docs/cli.md)",
    )
    run.add_argument(
        "--trace", metavar="FILE", help="write a Chrome trace-event timeline (opens in Perfetto)"
    )
    _shell_options(run, "also offer the shell tool (it asks for approval unless --yes)")
    run.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help=(
            "also offer your tools: a ToolRegistry, a list of tools or one tool, imported "
            "from MODULE (the current directory first); repeatable"
        ),
    )
    run.add_argument(
        "--mcp-config",
        metavar="FILE",
        help=(
            'open the MCP servers of a JSON config ({"mcpServers": ...} or VS Code\'s '
            '{"servers": ...}) for the run and offer their tools'
        ),
    )
    run.add_argument(
        "--quiet", "-q", action="store_true", help="print no plan or progress on stderr"
    )
    run.add_argument(
        "--backend",
        choices=(HOST, "ray"),
        default=HOST,
        help=(
            "where allowed calls run: host (this process, the default) or ray (every call "
            "the policy grants to the host runs on the Ray cluster of --ray-address instead)"
        ),
    )
    run.add_argument(
        "--sandbox",
        choices=("auto", "none", "bwrap", "unshare", "rlimits"),
        default="auto",
        help=(
            "where the shell and importable --tools functions run: auto (the default) in a "
            "warm subprocess sandbox at the best isolation level the machine has (bwrap, "
            "unshare, rlimits), the workspace writable, no network; a level: at that level "
            "or stronger, else an error result; none: on the host (docs/sandbox.md)"
        ),
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDR",
        help=(
            "the Ray cluster to connect to ('auto', HOST:PORT, ray://HOST:PORT); it also "
            "offers the 'ray' sandbox to calls a policy sends there (needs toolexec[ray])"
        ),
    )
    tools = commands.add_parser(
        "tools",
        help="print the built-in tools as a provider's 'tools' request parameter",
        description="Print the built-in tool definitions in a provider's tool schema, as JSON.",
    )
    tools.add_argument("--format", "-f", choices=FORMATS, default="openai-chat")
    _shell_options(tools, "print the shell tool too")
    serve = commands.add_parser(
        "serve",
        help="serve tool calls to an agent process (--stdio) or to toolexec hosts (--http)",
        description=(
            "With --stdio, start a runner command and execute the tool calls it sends over "
            "its stdin and stdout (see docs/ipc.md). With --http, serve the given tools to "
            "RemoteBackend hosts over HTTP until interrupted (see docs/scale-out.md)."
        ),
    )
    transport = serve.add_mutually_exclusive_group(required=True)
    transport.add_argument(
        "--stdio", action="store_true", help="start the runner command; talk over its stdin/stdout"
    )
    transport.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="listen for RemoteBackend calls on HOST:PORT (port 0: a free port, printed)",
    )
    _serve_options(serve)
    _stdio_options(serve)
    add_question_parsers(commands)
    add_ui_parser(commands)
    return parser


def _shell_options(parser: argparse.ArgumentParser, shell_help: str) -> None:
    """``--shell``, and ``--no-shell`` (the default, still accepted): the built-in tools
    include the shell only when asked, as ``register_builtin_tools`` does."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--shell",
        action="store_true",
        help=f"{shell_help}; the shell runs any command, as your user, and is off by default",
    )
    group.add_argument(
        "--no-shell", action="store_true", help="leave the shell tool out (the default)"
    )


def _version() -> str:
    from .._core._version import VERSION

    return VERSION


def _serve_options(serve: argparse.ArgumentParser) -> None:
    """The options of ``toolexec serve`` besides the transport; those of ``--stdio``
    alone are ``_stdio_options``."""
    serve.add_argument(
        "--workspace",
        "-w",
        metavar="DIR",
        help="the built-in tools work in DIR (--stdio: default '.'; --http: without it, "
        "no built-in tools are offered)",
    )
    _shell_options(
        serve, "serve the shell tool with the built-in ones (no one is asked to approve a call)"
    )
    serve.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="offer your tools, as for 'toolexec exec'; repeatable",
    )
    serve.add_argument(
        "--mcp-config", metavar="FILE", help="--http: offer the tools of MCP servers"
    )
    serve.add_argument(
        "--policy",
        metavar="FILE",
        help="--http: the worker's own allow/deny rules (.toml or .json); it never asks",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"--http: read the shared token from FILE (default: the {TOKEN_ENV} "
        "environment variable)",
    )


def _stdio_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``serve --stdio`` besides those it shares with ``--http``
    (``--workspace``, ``--shell``, ``--tools``: ``_serve_options``)."""
    parser.add_argument(
        "--name", default="runner", help="--stdio: the runner's name (its agent path is root/NAME)"
    )
    parser.add_argument(
        "--allow",
        action="append",
        metavar="PATTERN",
        help="--stdio: a tool the runner may call ('*' matches any characters); repeatable; "
        "default: all",
    )
    parser.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="PATH[:rw]",
        help="--stdio: a workspace path the runner's calls may read (':rw' also write); repeatable",
    )
    parser.add_argument("--audit", metavar="FILE", help="--stdio: append the audit log here")
    parser.add_argument(
        "--max-line-bytes",
        type=int,
        default=None,  # _ipc._protocol.DEFAULT_MAX_LINE_BYTES, set by the command
        metavar="N",
        help="--stdio: the longest line read from the runner (default: 16 MiB)",
    )
    parser.add_argument(
        "runner", nargs=argparse.REMAINDER, help="-- then the runner command and its arguments"
    )


# -- running ----------------------------------------------------------------------


def _fail(stderr: TextIO, message: str, code: int) -> NoReturn:
    stderr.write(f"toolexec: error: {display_lines(message)}\n")
    raise SystemExit(code)


_STDIO_ONLY = {
    "runner": "a runner command",
    "allow": "--allow",
    "grant": "--grant",
    "audit": "--audit",
}
_HTTP_ONLY = {"mcp_config": "--mcp-config", "policy": "--policy", "token_file": "--token-file"}


def _serve(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``serve``: refuse the other transport's options, then serve."""
    mode, other = ("--stdio", _HTTP_ONLY) if args.stdio else ("--http", _STDIO_ONLY)
    given = [flag for dest, flag in other.items() if getattr(args, dest)]
    if given:
        raise UsageError(f"{', '.join(given)} cannot be used with serve {mode}")
    if args.stdio:
        from ._ipc import serve

        return serve(args, stderr)
    from ._commands import load_policy
    from ._remote import serve_command

    return serve_command(args, load_policy(args.policy)[0], stdout, stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``toolexec`` command line; return the exit code.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).
    """
    stdin, stdout, stderr = sys.stdin, sys.stdout, sys.stderr
    args = _parser().parse_args(argv)  # exits 2 on a usage error, 0 on --help
    try:
        if args.command == "serve":
            return _serve(args, stdout, stderr)
        if args.command == "ui":  # docs/ui.md
            from ._ui import ui_command

            return ui_command(args, stdout)
        if args.command in QUESTION_COMMANDS:  # docs/durable.md
            from ._questions import questions_command

            return questions_command(args, stdout)
        from . import _commands  # the machinery, once the arguments are known

        if args.command == "tools":
            output = _commands.tools_command(args)
        else:
            output = _commands.exec_command(args, stdin, stderr)
    except UsageError as exc:
        _fail(stderr, str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        _fail(stderr, "interrupted", EXIT_INTERRUPTED)
    except Exception:
        traceback.print_exc(file=stderr)
        _fail(stderr, "unexpected failure (this is a bug in toolexec; please report it)", 1)
    stdout.write(display_json(json.dumps(output, indent=2, ensure_ascii=False)) + "\n")
    stdout.flush()
    return EXIT_OK
