"""The ``shell`` tool: bash in the workspace; nothing it starts outlives the call.

Theory of operation. The command runs as ``bash -c COMMAND`` with the
workspace root as its working directory, stdin from ``/dev/null``, an
environment built from an allow-list (never the parent's environment minus
some secrets), in a session and process group of its own. The calling task
reads stdout and stderr through one selector into bounded buffers that keep
the first and last bytes (``_process``).

On Linux the command runs under a reaper (``_reaper``): a worker process,
a child subreaper, starts it and is told when to end it, so every process
it starts stays below the worker whatever sessions and groups it makes
(``setsid``, ``set -m``, ``nohup``, a double fork). When the command
exits, the worker ends everything it left (SIGTERM, the grace period,
SIGKILL) while output is still read, and reports how many it ended; the
pipes get a short bounded drain and the result is built. On timeout the
worker is told to end the command and all below it the same way, again
while output is read. On cancellation that runs shielded, so it completes
even while the call is being cancelled, and ``trio.Cancelled`` then
propagates as usual.

Where there is no reaper (not Linux) the process group is the boundary, as
``_process`` handles it: what the shell leaves in its group is ended the
same way, and what left the group is out of reach.

The result's ``details`` say how many processes were ended besides the
command (``descendants_killed``; ``None`` under a process group, which
does not count them), and the model reads "background processes stopped:
N" after a command that exited and left N running: it should not believe
a server it started in the background is still up.

A command that is one simple command made of plain words (letters, digits
and ``_ . / : , + @ % = -``, no quotes, expansions or operators), naming a
program found on ``PATH`` that is not a bash builtin or keyword, is
started directly instead of through ``bash -c``. That is exactly what bash
itself does with such a command (it execs it without forking), so the
program sees the same argv and environment (``PWD``, ``SHLVL`` and ``_``
set as bash sets them); only bash's start-up is saved. Anything else, a
command that is not found included, goes through bash.

Whether a call only reads is decided by ``_shell_classify`` (a pure
scanner), before the call runs.
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core._errors import ToolError
from .._core._types import ErrorClass, SideEffects, ToolDefinition, ToolOutput
from .._proc._process import OutputCapture, PipeCollector, open_group_process, reap, supervise
from .._proc._reaper import Attempt, encode_env, open_reaped, supervise_reaped
from ._path_keys import everything_for
from ._shell_classify import classify_arguments

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._core._tool_protocol import ToolContext
    from ._workspace import Workspace

__all__ = ["DEFAULT_ENV_ALLOW", "CommandEnd", "ShellTool", "shell_output", "update_listener"]

#: Variables copied from the host environment when present.
DEFAULT_ENV_ALLOW = (
    "HOME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "TMPDIR",
    "TZ",
    "USER",
)
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_PLAIN_COMMAND = re.compile(
    r"[ \t]*[A-Za-z0-9_][A-Za-z0-9_.+-]*([ \t]+[A-Za-z0-9_./:,+@%=-]+)*[ \t]*"
)
#: Bash builtins and keywords: a command naming one always goes through bash.
_BASH_WORDS = frozenset(
    {
        ".", ":", "[", "[[", "]]", "{", "}", "!", "alias", "bg", "bind", "break", "builtin",
        "caller", "case", "cd", "command", "compgen", "complete", "compopt", "continue",
        "coproc", "declare", "dirs", "disown", "do", "done", "echo", "elif", "else", "enable",
        "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi", "for", "function",
        "getopts", "hash", "help", "history", "if", "in", "jobs", "kill", "let", "local",
        "logout", "mapfile", "popd", "printf", "pushd", "pwd", "read", "readarray", "readonly",
        "return", "select", "set", "shift", "shopt", "source", "suspend", "test", "then",
        "time", "times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias",
        "unset", "until", "wait", "while",
    }
)  # fmt: skip
#: Builtins that behave exactly like the program of the same name when given no arguments.
_SAME_WITHOUT_ARGS = frozenset({"true", "false"})


def update_listener(ctx: ToolContext) -> Callable[[str, bytes], None]:
    """Send each piece of output to the host as a ``CallUpdate``, decoded as it arrives.

    A UTF-8 sequence split across two reads is decoded whole; each stream
    has its own decoder.
    """
    decoders = {
        name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")
    }

    def listen(stream: str, chunk: bytes) -> None:
        text = decoders[stream].decode(chunk, final=not chunk)
        if text:
            ctx.update(ToolOutput.text(text, stream=stream))

    return listen


def _mtimes(directories: tuple[str, ...]) -> tuple[int, ...]:
    stamp = []
    for directory in directories:
        try:
            stamp.append(os.stat(directory).st_mtime_ns)
        except OSError:
            stamp.append(-1)
    return tuple(stamp)


# -- the tool ---------------------------------------------------------------


def _allowed_env(allow: tuple[str, ...], extra: Mapping[str, str]) -> dict[str, str]:
    env = {name: os.environ[name] for name in allow if name in os.environ}
    env.setdefault("PATH", _DEFAULT_PATH)
    env.update(extra)
    return env


@attrs.frozen
class CommandEnd:
    """How a command ended, and what was ended with it."""

    code: int | None
    timed_out: bool
    #: Descendants stopped (other than the command); ``None`` under a process group.
    killed: int | None = None
    #: Descendants that could not be stopped.
    left: int | None = None
    #: The reaper's worker ended without reporting: the exit status is unknown.
    lost: bool = False


def _describe_end(ended: CommandEnd, limit: float) -> str:
    timed_out = f"timed out after {limit:g} s; " if ended.timed_out else ""
    if ended.lost:
        return f"{timed_out}exit status unknown: the process watching it was stopped or killed"
    if not ended.timed_out:
        return _describe_exit(ended.code)
    if ended.killed is None:
        return f"{timed_out}the process group was terminated"
    return f"{timed_out}it and every process it started were terminated"


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _definition(default_timeout: float, max_timeout: float, safe_path: bool) -> ToolDefinition:
    """The ``shell`` definition; the read-only classifier only with an absolute ``PATH``."""
    return ToolDefinition(
        name="shell",
        description=(
            "Run a bash command in the workspace directory and return its exit code, "
            "stdout and stderr (long output keeps its beginning and end). stdin is "
            "empty; the environment is minimal; background processes are stopped "
            "when the command exits. Use it for builds, tests and tools that have no "
            "dedicated tool; prefer read_file/write_file/edit_file for files."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The bash command line to run.",
                },
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": max_timeout,
                    "description": (
                        f"Seconds before the command is stopped (default "
                        f"{default_timeout:g}, at most {max_timeout:g})."
                    ),
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.EXECUTE,
        timeout=max_timeout + 60,
        classifier=classify_arguments if safe_path else None,
        resources=everything_for(classify_arguments if safe_path else None),
    )


@attrs.define(eq=False)
class ShellTool:
    """Run a bash command in the workspace (side effects: ``EXECUTE``).

    Each call runs ``bash -c COMMAND`` in the workspace root, in a new
    session, with stdin from ``/dev/null`` and an environment built only
    from ``env_allow`` (names copied from the host when set) plus ``env``.
    Output is captured per stream with a cap (the first and last
    ``max_output_bytes / 2`` bytes are kept). When the shell exits, the
    processes it left running are terminated; on timeout or cancellation
    the shell and everything it started get SIGTERM, the grace period, then
    SIGKILL. A non-zero exit status makes an error result; a timeout makes a
    ``timeout`` result carrying the partial output.

    On Linux every descendant is held, whatever session or group it makes
    (a per-call reaper, see ``docs/security.md``); elsewhere the process
    group is the boundary, and a command that starts a session of its own
    (``setsid``) leaves it. Processes another service starts for the
    command (``systemd-run``, a running ``tmux`` server) are not its
    descendants; only a sandbox backend holds those. The shell is not
    confined to the workspace; it is ``EXECUTE``.

    Args:
        workspace: the working directory's owner.
        default_timeout: seconds a command may run when the call names none.
        max_timeout: the largest ``timeout`` a call may ask for.
        max_output_bytes: bytes kept per stream.
        env: variables set for every command (after the allow-list); one
            holding a NUL byte is refused with ``ValueError``.
        env_allow: host variables passed through when set.
        shell: the shell binary (``bash`` from ``PATH`` by default, else ``sh``).
    """

    workspace: Workspace
    default_timeout: float = 120.0
    max_timeout: float = 600.0
    max_output_bytes: int = 64 * 1024
    env: Mapping[str, str] = attrs.field(factory=dict)
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    shell: str = attrs.field(factory=lambda: shutil.which("bash") or "/bin/sh")
    definition: ToolDefinition = attrs.field(init=False)
    _env: dict[str, str] = attrs.field(init=False, repr=False)
    _direct_env: dict[str, str] = attrs.field(init=False, repr=False)
    _env_bytes: dict[bytes, bytes] = attrs.field(init=False, repr=False)
    _direct_env_bytes: dict[bytes, bytes] = attrs.field(init=False, repr=False)
    _path_dirs: tuple[str, ...] = attrs.field(init=False, repr=False)
    # name -> (where PATH finds it, mtimes of the PATH directories that decide that)
    _found: dict[str, tuple[str | None, tuple[int, ...]]] = attrs.field(
        factory=dict, init=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        self._env = _allowed_env(self.env_allow, self.env)
        shlvl = self._env.get("SHLVL", "0")
        self._direct_env = {
            **self._env,
            "PWD": str(self.workspace.root),
            "SHLVL": shlvl if shlvl.isdigit() else "0",
        }
        self._env_bytes = encode_env(self._env)
        self._direct_env_bytes = encode_env(self._direct_env)
        self._path_dirs = tuple(dict.fromkeys(self._env["PATH"].split(":")))
        safe_path = all(p.startswith("/") for p in self._path_dirs)
        self.definition = _definition(self.default_timeout, self.max_timeout, safe_path)

    def __call__(self) -> ShellTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the command; see the class docstring."""
        command = str(arguments["command"])
        limit = float(arguments.get("timeout", self.default_timeout))
        start = trio.current_time()
        out = OutputCapture(self.max_output_bytes)
        err = OutputCapture(self.max_output_bytes)
        try:
            collector = PipeCollector(out, err, update_listener(ctx) if ctx.observed else None)
        except OSError as exc:
            raise ToolError(f"Could not create the pipes for the output: {exc}") from None
        try:
            ended = await self._run(command, collector, limit, ctx.grace_period)
        finally:
            collector.close()
        duration = trio.current_time() - start
        return shell_output(command, ended, out, err, duration, limit)

    async def _run(
        self, command: str, collector: PipeCollector, limit: float, grace: float
    ) -> CommandEnd:
        """Run under a reaper where there is one, else in a process group."""
        try:
            attempts = self._attempts(command)
        except ValueError:  # a NUL byte, or characters no argument can hold
            raise ToolError(
                "The command contains a NUL byte or characters that cannot be encoded.",
                error_class=ErrorClass.INVALID_ARGUMENTS,
            ) from None
        stdout, stderr = collector.write_ends
        try:
            process = await open_reaped(attempts, str(self.workspace.root), stdout, stderr, grace)
        except OSError as exc:
            raise ToolError(f"Could not start the shell {self.shell!r}: {exc}") from None
        if process is None:
            return await self._run_in_group(command, collector, limit, grace)
        collector.close_write_ends()
        try:
            timed_out = await supervise_reaped(process, collector, limit, grace)
        finally:
            await process.aclose(grace)
        if process.error is not None:
            raise ToolError(f"Could not start the shell {self.shell!r}: {process.error}")
        if process.failed_attempts and len(attempts) > 1:  # the direct exec failed
            self._found.pop(os.fsdecode(attempts[0].argv[0]), None)
        return CommandEnd(
            process.returncode,
            timed_out,
            process.descendants_killed,
            process.descendants_left,
            process.lost,
        )

    def _attempts(self, command: str) -> list[Attempt]:
        """How to start ``command``: directly when bash would exec it, then through bash."""
        bash = Attempt.of(self.shell, [self.shell, "-c", command], self._env_bytes)
        direct = self._direct(command)
        if direct is None:
            return [bash]
        argv, path = direct
        env = {**self._direct_env_bytes, b"_": os.fsencode(path)}
        return [Attempt.of(path, argv, env), bash]

    async def _run_in_group(
        self, command: str, collector: PipeCollector, limit: float, grace: float
    ) -> CommandEnd:
        """Where there is no reaper: the command's process group is the boundary."""
        try:
            process = await self._spawn(command, *collector.write_ends)
        except ValueError:  # characters the platform cannot encode
            raise ToolError(
                "The command contains a NUL byte or characters that cannot be encoded.",
                error_class=ErrorClass.INVALID_ARGUMENTS,
            ) from None
        except OSError as exc:
            raise ToolError(f"Could not start the shell {self.shell!r}: {exc}") from None
        finally:
            collector.close_write_ends()
        try:
            timed_out = await supervise(process, collector, limit, grace)
        finally:
            await reap(process, grace)
        return CommandEnd(process.returncode, timed_out)

    async def _spawn(self, command: str, stdout: int, stderr: int) -> trio.Process:
        direct = self._direct(command)
        if direct is not None:
            argv, path = direct
            try:
                return await self._open(argv, path, {**self._direct_env, "_": path}, stdout, stderr)
            except OSError:  # removed or made non-executable since the look-up: ask bash
                self._found.pop(argv[0], None)
        return await self._open([self.shell, "-c", command], self.shell, self._env, stdout, stderr)

    async def _open(
        self, argv: list[str], executable: str, env: dict[str, str], stdout: int, stderr: int
    ) -> trio.Process:
        return await open_group_process(
            argv,
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            cwd=str(self.workspace.root),
            env=env,
        )

    def plain_command(self, command: str) -> tuple[list[str], str] | None:
        """The argv and program bash would exec for ``command`` without forking, or
        ``None``: a plain simple command is started directly (see the module
        docstring); the subprocess sandbox starts it the same way."""
        return self._direct(command)

    def _direct(self, command: str) -> tuple[list[str], str] | None:
        """The argv and program bash would exec for a plain simple command, or ``None``."""
        if os.path.basename(self.shell) != "bash" or not _PLAIN_COMMAND.fullmatch(command):
            return None
        words = command.split()
        name = words[0]
        if name in _BASH_WORDS and not (name in _SAME_WITHOUT_ARGS and len(words) == 1):
            return None
        path = self._which(name)
        if path is None or not os.path.isabs(path):
            return None
        return words, path

    def _which(self, name: str) -> str | None:
        """Where bash's PATH search finds ``name``, remembered while that cannot have changed.

        Only the PATH directories up to the one holding the program (all of
        them when it is not found) decide the answer, so only their
        modification times are compared. A directory changed in the last two
        seconds is not trusted (its time may not have ticked since).
        """
        dirs = self._path_dirs
        cached = self._found.get(name)
        if cached is not None and _mtimes(dirs[: len(cached[1])]) == cached[1]:
            return cached[0]
        stamp = _mtimes(dirs)  # before the look-up, so a change during it is seen next time
        path = shutil.which(name, path=os.pathsep.join(dirs))
        depth = len(dirs)
        if path is not None:
            depth = next(
                (i + 1 for i, d in enumerate(dirs) if os.path.join(d, name) == path), depth
            )
        if max(stamp[:depth]) < time.time_ns() - 2_000_000_000:
            self._found[name] = (path, stamp[:depth])
        else:
            self._found.pop(name, None)
        return path


def shell_output(
    command: str,
    ended: CommandEnd,
    out: OutputCapture,
    err: OutputCapture,
    duration: float,
    limit: float,
) -> ToolOutput:
    """The shell tool's result for a command that ended (the subprocess sandbox's too).

    Raises:
        ToolError: a ``timeout`` error carrying the partial output.
    """
    truncated = out.truncated or err.truncated
    parts = [
        _describe_end(ended, limit),
        f"duration {duration:.3f} s",
        f"output truncated: {'yes' if truncated else 'no'}",
    ]
    if ended.killed and not ended.timed_out:
        parts.append(f"background processes stopped: {ended.killed}")
    if ended.left:
        parts.append(f"processes that could not be stopped: {ended.left}")
    lines = ["; ".join(parts)]
    for label, capture in (("stdout", out), ("stderr", err)):
        if capture.total:
            note = f" ({capture.total} bytes, kept {capture.kept})" if capture.truncated else ""
            lines.append(f"{label}{note}:\n{capture.text().rstrip(chr(10))}")
    if not out.total and not err.total:
        lines.append("(no output)")
    text = "\n".join(lines)
    details = {
        "command": command,
        "exit_code": ended.code,
        "duration": duration,
        "timed_out": ended.timed_out,
        "truncated": truncated,
        "stdout_bytes": out.total,
        "stderr_bytes": err.total,
        "descendants_killed": ended.killed,
        "descendants_left": ended.left,
    }
    if ended.timed_out:
        raise ToolError(text, error_class=ErrorClass.TIMEOUT, details=details)
    return ToolOutput.text(text, is_error=ended.code != 0, **details)
