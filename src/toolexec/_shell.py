"""The ``shell`` tool: bash in the workspace, in its own process group.

Theory of operation. The command runs as ``bash -c COMMAND`` with the
workspace root as its working directory, stdin from ``/dev/null``, an
environment built from an allow-list (never the parent's environment minus
some secrets), in a process group of its own. Starting, watching, capturing
and ending the process are ``_process``'s: the calling task reads stdout
and stderr through one selector that also watches a pidfd for the shell's
exit, into bounded buffers that keep the first and last bytes.

When the shell exits, anything it left running in its group is terminated
(that is what keeps a background child from holding the pipes open and
hanging the call) while output is still read, the pipes get a short bounded
drain, and the result is built. On timeout the group gets SIGTERM, a grace
period, then SIGKILL, again while output is read. On cancellation the same
termination runs shielded, so it completes even while the call is being
cancelled, and ``trio.Cancelled`` then propagates as usual.

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

from ._errors import ToolError
from ._process import OutputCapture, PipeCollector, open_group_process, reap, supervise
from ._shell_classify import classify_arguments
from ._types import ErrorClass, SideEffects, ToolDefinition, ToolOutput

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._tool import ToolContext
    from ._workspace import Workspace

__all__ = ["ShellTool"]

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


def _streamer(ctx: ToolContext) -> Callable[[str, bytes], None]:
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
    )


@attrs.define(eq=False)
class ShellTool:
    """Run a bash command in the workspace (side effects: ``EXECUTE``).

    Each call runs ``bash -c COMMAND`` in the workspace root, in a new
    process group, with stdin from ``/dev/null`` and an environment built
    only from ``env_allow`` (names copied from the host when set) plus
    ``env``. Output is captured per stream with a cap (the first and last
    ``max_output_bytes / 2`` bytes are kept). When the shell exits, its
    leftover background processes are terminated; on timeout or
    cancellation the whole group gets SIGTERM, the grace period, then
    SIGKILL. A non-zero exit status makes an error result; a timeout makes a
    ``timeout`` result carrying the partial output.

    The process group is the boundary: a command that starts a new session
    of its own (``setsid``) leaves it, and only a sandbox backend can hold
    it. The shell is not confined to the workspace; it is ``EXECUTE``.

    Args:
        workspace: the working directory's owner.
        default_timeout: seconds a command may run when the call names none.
        max_timeout: the largest ``timeout`` a call may ask for.
        max_output_bytes: bytes kept per stream.
        env: variables set for every command (after the allow-list).
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
            collector = PipeCollector(out, err, _streamer(ctx) if ctx.observed else None)
        except OSError as exc:
            raise ToolError(f"Could not create the pipes for the output: {exc}") from None
        try:
            try:
                process = await self._spawn(command, *collector.write_ends)
            except ValueError:  # a NUL byte, or characters no argument can hold
                raise ToolError(
                    "The command contains a NUL byte or characters that cannot be encoded.",
                    error_class=ErrorClass.INVALID_ARGUMENTS,
                ) from None
            except OSError as exc:
                raise ToolError(f"Could not start the shell {self.shell!r}: {exc}") from None
            finally:
                collector.close_write_ends()
            try:
                timed_out = await supervise(process, collector, limit, ctx.grace_period)
            finally:
                await reap(process, ctx.grace_period)
        finally:
            collector.close()
        duration = trio.current_time() - start
        return self._result(command, process.returncode, out, err, duration, timed_out, limit)

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

    def _result(
        self,
        command: str,
        code: int | None,
        out: OutputCapture,
        err: OutputCapture,
        duration: float,
        timed_out: bool,
        limit: float,
    ) -> ToolOutput:
        truncated = out.truncated or err.truncated
        status = (
            f"timed out after {limit:g} s; the process group was terminated"
            if timed_out
            else _describe_exit(code)
        )
        lines = [
            f"{status}; duration {duration:.3f} s; output truncated: {'yes' if truncated else 'no'}"
        ]
        for label, capture in (("stdout", out), ("stderr", err)):
            if capture.total:
                note = f" ({capture.total} bytes, kept {capture.kept})" if capture.truncated else ""
                lines.append(f"{label}{note}:\n{capture.text().rstrip(chr(10))}")
        if not out.total and not err.total:
            lines.append("(no output)")
        text = "\n".join(lines)
        details = {
            "command": command,
            "exit_code": code,
            "duration": duration,
            "timed_out": timed_out,
            "truncated": truncated,
            "stdout_bytes": out.total,
            "stderr_bytes": err.total,
        }
        if timed_out:
            raise ToolError(text, error_class=ErrorClass.TIMEOUT)
        return ToolOutput.text(text, is_error=code != 0, **details)
