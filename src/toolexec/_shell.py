"""The ``shell`` tool: bash in the workspace, in its own process group.

Theory of operation. The command runs as ``bash -c COMMAND`` with the
workspace root as its working directory, stdin from ``/dev/null``, an
environment built from an allow-list (never the parent's environment minus
some secrets), and ``start_new_session=True`` so the shell and everything it
starts share one process group. The calling task reads stdout and stderr
through one selector that also watches a pidfd for the shell's exit (where
there are no pidfds, a second task waits for the exit instead), into
bounded buffers that keep the first and last bytes and count the rest, so
memory stays bounded whatever the command prints.

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

The per-call classifier (``classify_shell_command``) marks a command
read-only only when a small scanner understands all of it: plain words
and quotes, ``;``, ``&&``, ``||`` and ``|`` between commands from a fixed
list of read-only programs, and none of their writing options. Anything
else (expansions, redirections, subshells, unknown programs) keeps the
declared ``EXECUTE``.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._errors import ToolError
from ._types import ErrorClass, SideEffects, ToolDefinition, ToolOutput

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._tool import ToolContext
    from ._workspace import Workspace

__all__ = ["ShellTool", "classify_shell_command"]

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
_DRAIN_SECONDS = 2.0
_READ_CHUNK = 1 << 16


# -- output capture ---------------------------------------------------------


@attrs.define(eq=False)
class OutputCapture:
    """Keep the first and last bytes of a stream, count the rest.

    Memory is bounded by ``limit`` (half head, half tail) whatever the
    stream's size.
    """

    limit: int
    head: bytearray = attrs.Factory(bytearray)
    tail: bytearray = attrs.Factory(bytearray)
    total: int = 0

    def add(self, chunk: bytes | bytearray) -> None:
        """Take a chunk of output."""
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            keep = self.limit - self.limit // 2
            if len(self.tail) > keep:
                del self.tail[: len(self.tail) - keep]

    @property
    def kept(self) -> int:
        """How many bytes are held."""
        return len(self.head) + len(self.tail)

    @property
    def truncated(self) -> bool:
        """Whether bytes were dropped."""
        return self.total > self.kept

    def text(self) -> str:
        """The kept bytes, decoded with replacement, marking any gap."""
        if not self.truncated:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        return f"{head}\n[... {self.total - self.kept} bytes omitted ...]\n{tail}"


class _Collector:
    """The command's stdout and stderr pipes, read by one task through one selector.

    ``listener``, when given, sees every chunk as it is read (and ``b""`` at
    EOF), with the stream's name. One task and a selector (epoll, kqueue)
    instead of a pump task per pipe:
    a call that prints little costs no tasks and no nursery. Each wake-up
    reads at most one chunk per pipe and then waits again, so a flood of
    output cannot starve other tasks. The collector owns every descriptor it
    opens; ``close`` closes whatever is still open. Trio itself only ever
    waits on the selector's descriptor, and never while it is being closed,
    so nothing needs ``notify_closing``.
    """

    def __init__(
        self,
        stdout: OutputCapture,
        stderr: OutputCapture,
        listener: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self._open: list[int] = []
        self._pipes: dict[int, OutputCapture] = {}
        self._names: dict[int, str] = {}
        self._listener = listener
        self.write_ends: list[int] = []
        self._selector = selectors.DefaultSelector()
        try:
            for name, capture in (("stdout", stdout), ("stderr", stderr)):
                read_end, write_end = os.pipe()
                self._open += (read_end, write_end)
                self.write_ends.append(write_end)
                os.set_blocking(read_end, False)
                self._selector.register(read_end, selectors.EVENT_READ)
                self._pipes[read_end] = capture
                self._names[read_end] = name
        except BaseException:
            self.close()
            raise

    def close_write_ends(self) -> None:
        """Close the parent's copies of the write ends (the child holds its own)."""
        self._close(self.write_ends)

    def close(self) -> None:
        """Close the selector and every pipe end still open."""
        self._selector.close()
        self._close(list(self._open))

    def _close(self, fds: list[int]) -> None:
        for fd in fds:
            if fd in self._open:
                self._open.remove(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)

    @property
    def done(self) -> bool:
        """Whether both pipes reached EOF."""
        return not self._pipes

    async def until_exit(self, exit_fd: int) -> None:
        """Collect output until ``exit_fd`` (a pidfd) is readable: the shell has exited."""
        selector = self._selector
        selector.register(exit_fd, selectors.EVENT_READ)
        try:
            while True:
                await trio.lowlevel.wait_readable(selector.fileno())
                for key, _ in selector.select(0):
                    if key.fd == exit_fd:
                        return
                    self._read(key.fd)
        finally:
            selector.unregister(exit_fd)

    async def drain(self) -> None:
        """Collect output until both pipes reach EOF."""
        while True:
            for fd in list(self._pipes):
                self._read(fd)
            if not self._pipes:
                return
            await trio.lowlevel.wait_readable(self._selector.fileno())

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # a read error ends the output like EOF does
        if chunk:
            self._pipes[fd].add(chunk)
        else:
            self._selector.unregister(fd)
            del self._pipes[fd]
        if self._listener is not None:
            self._listener(self._names[fd], chunk)  # b"" at EOF


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


def _pidfd(process: trio.Process) -> int | None:
    """A descriptor that becomes readable when ``process`` exits, where the OS has one."""
    if _pidfd_open is None:
        return None
    try:
        return _pidfd_open(process.pid)
    except OSError:  # a kernel without pidfds
        return None


_pidfd_open: Callable[[int], int] | None = getattr(os, "pidfd_open", None)


# -- process groups -----------------------------------------------------------


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _live_member_in_proc(pgid)


def _live_member_in_proc(pgid: int) -> bool:
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return True  # no /proc: trust killpg
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def terminate_group(process: trio.Process, grace: float) -> None:
    """End every process in ``process``'s group: SIGTERM, up to ``grace`` s, SIGKILL.

    The group leader is reaped as soon as it exits so that it does not
    count as alive. SIGKILL is sent even if this is cancelled mid-wait;
    after it, the group gets up to a second to disappear.
    """
    pgid = process.pid
    process.poll()
    if not group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    _signal_group(pgid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once resumed
    try:
        await _wait_gone(process, grace)
    finally:
        if group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
    await _wait_gone(process, 1.0)


async def _wait_gone(process: trio.Process, limit: float) -> None:
    with trio.move_on_after(limit):
        delay = 0.001
        while True:
            process.poll()
            if not group_alive(process.pid):
                return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)


async def _reap(process: trio.Process, grace: float) -> None:
    """Terminate the group, reap the leader and close trio's pipes, shielded.

    Returns without a scheduling round trip when the leader is reaped, its
    group is empty and trio made no pipes (the shell's own case).
    """
    process.poll()
    if process.returncode is None or group_alive(process.pid):
        with trio.CancelScope(shield=True):
            await terminate_group(process, grace)
            with trio.move_on_after(5):
                await process.wait()
    streams = [s for s in (process.stdin, process.stdout, process.stderr) if s is not None]
    if streams:
        with trio.CancelScope(shield=True):
            for stream in streams:
                await stream.aclose()


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
        self.definition = ToolDefinition(
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
                        "maximum": self.max_timeout,
                        "description": (
                            f"Seconds before the command is stopped (default "
                            f"{self.default_timeout:g}, at most {self.max_timeout:g})."
                        ),
                    },
                },
                "required": ["command"],
                "additionalProperties": False,
            },
            side_effects=SideEffects.EXECUTE,
            timeout=self.max_timeout + 60,
            classifier=_classify_arguments if safe_path else None,
        )

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
            collector = _Collector(out, err, _streamer(ctx) if ctx.observed else None)
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
                timed_out = await self._supervise(process, collector, limit, ctx.grace_period)
            finally:
                await _reap(process, ctx.grace_period)
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
        return await trio.lowlevel.open_process(
            argv,
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            cwd=str(self.workspace.root),
            env=env,
            start_new_session=True,
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

    async def _supervise(
        self, process: trio.Process, collector: _Collector, limit: float, grace: float
    ) -> bool:
        """Collect output until the shell exits or ``limit`` passes; end the group; drain.

        Returns whether the limit passed.
        """
        exit_fd = _pidfd(process)
        with trio.move_on_after(limit) as deadline:
            if exit_fd is None:  # no pidfds: a task collects while this one waits
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(collector.drain)
                    await process.wait()
                    nursery.cancel_scope.cancel()
            else:
                try:
                    await collector.until_exit(exit_fd)
                finally:
                    os.close(exit_fd)
        process.poll()
        if process.returncode is None or group_alive(process.pid):
            # Timed out, or background processes are left (they could hold the
            # pipes open): end the group while the output is still collected.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(collector.drain)
                await terminate_group(process, grace)
                nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_SECONDS
        elif not collector.done:
            with trio.move_on_after(_DRAIN_SECONDS):
                await collector.drain()
        return deadline.cancelled_caught

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


# -- the read-only classifier --------------------------------------------------

_READ_ONLY = frozenset(
    {
        "basename", "cat", "cmp", "cut", "df", "diff", "dirname", "du", "echo",
        "egrep", "false", "fgrep", "file", "find", "grep", "head", "id", "ls",
        "md5sum", "nl", "od", "printf", "pwd", "readlink", "realpath", "rg",
        "sha1sum", "sha256sum", "sha512sum", "sort", "stat", "tail", "tr", "true",
        "uname", "wc", "which", "whoami",
    }
)  # fmt: skip
_FIND_WRITERS = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
#: Programs with options that write or run programs: (long options, short letters).
_RISKY_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "sort": (("--output", "--compress-program"), "o"),
    "rg": (("--pre",), ""),
    "file": (("--compile",), "C"),
}
_UNSAFE_UNQUOTED = frozenset("$`\\<>(){}#!")
_GLOB = frozenset("*?[")


def _classify_arguments(arguments: Mapping[str, Any]) -> SideEffects:
    return classify_shell_command(str(arguments.get("command", "")))


def classify_shell_command(command: str) -> SideEffects:
    """Return ``READ`` if ``command`` plainly only reads, else ``EXECUTE``.

    Conservative: ``READ`` only when every part is understood, namely plain
    words and quotes joined by ``;``, ``&&``, ``||`` or ``|``, each command
    from a fixed read-only list (``ls``, ``cat``, ``grep``, ``find``, ...)
    without options that write or run programs (``find -exec``,
    ``sort -o``). Variables, command substitution, redirection, subshells,
    background jobs and unknown programs all give ``EXECUTE``.
    """
    segments = _scan(command)
    if not segments:
        return SideEffects.EXECUTE
    for words in segments:
        if not words or not _read_only_command(words):
            return SideEffects.EXECUTE
    return SideEffects.READ


def _read_only_command(words: list[tuple[str, bool]]) -> bool:
    name = words[0][0]
    if name not in _READ_ONLY or words[0][1]:
        return False
    args = words[1:]
    if name == "find":
        return not any(glob or text in _FIND_WRITERS for text, glob in args)
    if name in _RISKY_OPTIONS:
        longs, letters = _RISKY_OPTIONS[name]
        for text, glob in args:
            if glob:
                return False
            if text.startswith("--"):
                # getopt takes any unambiguous prefix: --outp=F is --output=F.
                option = text.split("=", 1)[0]
                if len(option) > 2 and any(risky.startswith(option) for risky in longs):
                    return False
            elif text.startswith("-") and set(text) & set(letters):
                return False
    return True


def _scan(command: str) -> list[list[tuple[str, bool]]] | None:
    """Split into commands of ``(word, has unquoted glob)``; ``None`` if not understood."""
    if any((ord(c) < 32 and c != "\t") or c == "\x7f" for c in command):
        return None
    segments: list[list[tuple[str, bool]]] = [[]]
    word: list[str] = []
    started = glob = False
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c in " \t;|&":
            if started:
                segments[-1].append(("".join(word), glob))
                word, started, glob = [], False, False
            if c in " \t":
                i += 1
                continue
            op = command[i : i + 2] if command[i : i + 2] in ("&&", "||") else c
            if op in ("&", "|&") or command[i : i + 2] == "|&":
                return None
            segments.append([])
            i += len(op)
            continue
        if c in "'\"":
            end = command.find(c, i + 1)
            if end < 0:
                return None
            inner = command[i + 1 : end]
            if c == '"' and any(ch in inner for ch in "$`\\!"):
                return None
            word.append(inner)
            started = True
            i = end + 1
            continue
        if c in _UNSAFE_UNQUOTED:
            return None
        glob = glob or c in _GLOB
        word.append(c)
        started = True
        i += 1
    if started:
        segments[-1].append(("".join(word), glob))
    return segments
