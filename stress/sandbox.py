"""A read-only sandbox that runs shell commands and reports what they tried to change or run.

Theory of operation. ``unshare`` gives the sandbox private mount, PID,
network, IPC and UTS namespaces; inside, every mount is remounted
read-only, so any write fails with ``EROFS``, and a deliberate write to the
scratch tree, ``/tmp``, ``/dev/shm`` and ``/`` must be refused before
anything runs. The commands then run without capabilities (``setpriv``), so
they cannot remount anything, under ``strace -f``, which records every
``execve``, every open and every call that changes a file or flushes a file
system, whatever its result.

One sandbox lives for many batches: a bash runner inside reads
``directory NUL command NUL`` records from its stdin and runs each command
as ``bash -c COMMAND`` from that directory, stdin from ``/dev/null``,
output discarded; an empty record ends a batch, and the runner marks the end
in the trace by opening a file whose name holds a random token and the
batch's number. The trace is read up to that mark and judged line by line:

- a line that reports ``EROFS``, or a call that changes a file (``unlink``,
  ``rename``, ``utimensat``, ``mkdir``, ``sync``, ...) is a write, tried or
  done;
- an open with ``O_WRONLY``, ``O_RDWR``, ``O_CREAT``, ``O_TRUNC`` or
  ``O_APPEND`` is a write (bash's own open of ``/dev/tty`` excepted);
- an ``execve`` is allowed only for bash running one of the batch's
  commands, or for a program on ``READ_ONLY_PROGRAMS`` found in a ``PATH``
  directory; any other, even one that failed, is a program off the list.

Lines are charged to the command whose ``bash -c`` started last: the runner
runs one command at a time and a read-only command leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs
import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from pathlib import Path

PATH = "/usr/local/bin:/usr/bin:/bin"
_PATH_DIRS = frozenset(PATH.encode().split(b":"))

#: The programs toolexec's documentation promises only read (docs/tools.md),
#: written out here so that the oracle does not trust the classifier's table.
READ_ONLY_PROGRAMS = frozenset(
    {
        "basename", "cat", "cmp", "cut", "df", "diff", "dirname", "du", "echo", "egrep",
        "false", "fgrep", "file", "find", "grep", "head", "id", "ls", "md5sum", "nl", "od",
        "printf", "pwd", "readlink", "realpath", "rg", "sha1sum", "sha256sum", "sha512sum",
        "stat", "tail", "tr", "true", "uname", "wc", "which", "whoami",
    }
)  # fmt: skip
_PROGRAM_NAMES = frozenset(name.encode() for name in READ_ONLY_PROGRAMS)

_WRITES = frozenset(
    {
        "creat", "truncate", "ftruncate", "fallocate", "mkdir", "mkdirat", "mknod", "mknodat",
        "unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat",
        "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown",
        "lchown", "fchownat", "utime", "utimes", "utimensat", "futimesat", "setxattr",
        "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "sync",
        "syncfs", "fsync", "fdatasync", "sync_file_range", "mount", "umount2", "pivot_root",
        "chroot", "swapon", "swapoff", "sethostname", "setdomainname", "acct",
    }
)  # fmt: skip
_OPENS = frozenset({"open", "openat", "openat2"})
_EXECS = frozenset({"execve", "execveat"})
_TRACE = ",".join("?" + name for name in sorted(_WRITES | _OPENS | _EXECS))
_WRITE_FLAGS = re.compile(r"O_(?:WRONLY|RDWR|CREAT|TRUNC|APPEND)\b")
_LINE = re.compile(r"(\d+) +(?:<\.\.\. (\w+) resumed>|(\w+)\()")
_STRING = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')

_SETUP = r"""
scratch=$1 token=$2 runner=$3 trace=$4
exec 3>&1 1>/dev/null 2>/dev/null 4<&0 </dev/null
mount --make-rprivate / || { echo "sandbox: cannot make mounts private" >&3; exit 90; }
awk '{print $5}' /proc/self/mountinfo | sort -u | while IFS= read -r mount; do
    mount -o remount,bind,ro "$mount"
done
for directory in "$scratch" /tmp /dev/shm /; do
    probe="${directory%/}/.probe-$token"
    if (: > "$probe"); then
        rm -f "$probe"
        echo "sandbox: $probe is writable" >&3
        exit 91
    fi
done
cd "$scratch" || exit 92
echo "sandbox: ready" >&3
exec setpriv --inh-caps=-all --bounding-set=-all \
    strace -f -qq -xx -s 65536 --seccomp-bpf -e signal=none -e trace="$trace" -o /dev/fd/3 \
    bash --norc --noprofile -c "$runner" runner "$scratch" "$token"
"""
_RUNNER = r"""
exec 3>&-
batch=0
while IFS= read -r -d '' -u 4 directory && IFS= read -r -d '' -u 4 command; do
    if [ -z "$directory" ]; then
        batch=$((batch + 1))
        : < "/.end-$2-$batch"
        continue
    fi
    cd -- "$1/$directory" && bash -c "$command" 4<&-
done
"""


def unavailable() -> str | None:
    """Why the sandbox cannot run on this machine, or ``None`` if it can."""
    for tool in ("unshare", "strace", "setpriv", "mount", "bash", "awk"):
        if shutil.which(tool, path=PATH) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "--net", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"unshare cannot make namespaces here: {probe.stderr.strip()}"
    return None


@attrs.frozen
class Violation:
    """Something a command tried that a read-only command never does."""

    command: str
    what: str
    line: str

    def __str__(self) -> str:
        return f"{self.command!r}: {self.what}\n    {self.line}"


class SandboxError(Exception):
    """The sandbox itself failed: it would not start, or a batch did not end."""


def _strings(line: str) -> list[bytes]:
    return [bytes.fromhex(text.replace("\\x", "")) for text in _STRING.findall(line)]


def _hex(text: str) -> str:
    return "".join(f"\\x{byte:02x}" for byte in text.encode())


def _judge_exec(strings: list[bytes], commands: frozenset[bytes]) -> str | None:
    """Why this ``execve`` is not allowed, or ``None`` if it is."""
    if not strings:
        return "runs a program it does not name"
    path, argv = strings[0], strings[1:]
    directory, name = os.path.split(path)
    if directory not in _PATH_DIRS:
        return f"runs {path.decode(errors='replace')}"
    if name == b"bash" and argv[:2] == [b"bash", b"-c"] and argv[2:] and argv[2] in commands:
        return None
    if name in _PROGRAM_NAMES:
        return None
    return f"runs {path.decode(errors='replace')}"


def _judge(name: str, line: str, commands: frozenset[bytes]) -> str | None:
    """Why this trace line is a write or a forbidden program, or ``None``."""
    if "EROFS" in line:
        return "a write, refused by the read-only mount"
    if name in _WRITES:
        return f"{name}, which changes files"
    strings = _strings(line)
    if name in _OPENS:
        flags = set(_WRITE_FLAGS.findall(line))
        if not flags or (strings[:1] == [b"/dev/tty"] and flags == {"O_RDWR"}):
            return None
        return f"an open for writing ({'|'.join(sorted(flags))})"
    if name == "execveat":
        return "execveat"
    if name == "execve" and "resumed>" not in line:
        return _judge_exec(strings, commands)
    return None


@attrs.define(eq=False)
class Sandbox:
    """One long-lived read-only sandbox; see the module docstring."""

    scratch: Path
    batch_timeout: float = 60.0
    _process: trio.Process | None = None
    _token: str = ""
    _batches: int = 0
    _runner_pid: str = ""
    _started: int = -1  # the batch's command that started last
    _pending: bytearray = attrs.field(factory=bytearray)

    async def _start(self) -> trio.Process:
        self._token = secrets.token_hex(8)
        self._batches = 0
        self._pending.clear()
        argv = [
            "unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--net",
            "--ipc", "--uts", "sh", "-c", _SETUP, "setup", str(self.scratch), self._token,
            _RUNNER, _TRACE,
        ]  # fmt: skip
        env = {"PATH": PATH, "LC_ALL": "C", "HOME": str(self.scratch)}
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self._process = process
        ready = await self._line()
        if ready != "sandbox: ready":
            raise SandboxError(f"the sandbox did not start: {ready!r}")
        first = await self._line()  # the runner's own execve
        match = _LINE.match(first)
        if match is None or match.group(3) != "execve":
            raise SandboxError(f"the runner did not start under strace: {first!r}")
        self._runner_pid = match.group(1)
        return process

    async def _line(self) -> str:
        process = self._process
        assert process is not None
        assert process.stdout is not None
        while b"\n" not in self._pending:
            chunk = await process.stdout.receive_some(1 << 16)
            if not chunk:
                code = await process.wait()
                raise SandboxError(f"the sandbox exited ({code}) in the middle of a batch")
            self._pending += chunk
        line, _, rest = bytes(self._pending).partition(b"\n")
        self._pending[:] = rest
        return line.decode("ascii", errors="replace")

    async def run(self, commands: Sequence[tuple[str, str]]) -> list[Violation]:
        """Run ``(directory, command)`` pairs; return what they tried that only-reading never does.

        Raises:
            SandboxError: the sandbox failed, or the batch did not end within
                ``batch_timeout`` (a command waited forever); the sandbox is
                stopped, and the next batch starts a new one.
        """
        self._started = -1
        try:
            with trio.fail_after(self.batch_timeout):
                return await self._run(commands)
        except trio.TooSlowError:
            await self.aclose()
            waiting = self._command(commands)
            raise SandboxError(
                f"the batch did not end within {self.batch_timeout:g} s; the last command"
                f" started, which may wait forever: {waiting!r}"
            ) from None
        except BaseException:
            await self.aclose()
            raise

    async def _run(self, commands: Sequence[tuple[str, str]]) -> list[Violation]:
        process = self._process or await self._start()
        assert process.stdin is not None
        records = [f"{d}\0{c}\0".encode() for d, c in commands]
        await process.stdin.send_all(b"".join(records) + b"\0\0")
        self._batches += 1
        end = _hex(f"/.end-{self._token}-{self._batches}")
        texts = [c.encode() for _, c in commands]
        known = frozenset(texts)
        violations = []
        while True:
            line = await self._line()
            match = _LINE.match(line)
            if match is None:
                raise SandboxError(f"a line strace did not write: {line!r}")
            pid, name = match.group(1), match.group(2) or match.group(3)
            if pid == self._runner_pid and f'"{end}"' in line:
                break
            following = texts[self._started + 1 : self._started + 2]
            if name == "execve" and _strings(line)[1:4] == [b"bash", b"-c", *following[:1]]:
                self._started += 1
            what = _judge(name, line, known)
            if what is not None:
                violations.append(Violation(self._command(commands), what, _decoded(line)))
        if self._started + 1 != len(commands):
            raise SandboxError(f"{self._started + 1} of {len(commands)} commands started")
        return violations

    def _command(self, commands: Sequence[tuple[str, str]]) -> str:
        return commands[self._started][1] if self._started >= 0 else "(before the first command)"

    async def aclose(self) -> None:
        """Stop the sandbox (the runner ends when its input does)."""
        process, self._process = self._process, None
        if process is None:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(5):
                if process.stdin is not None:
                    await process.stdin.aclose()
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()


def _decoded(line: str) -> str:
    """The trace line with its hex strings shown as text."""
    return _STRING.sub(
        lambda m: repr(bytes.fromhex(m.group(1).replace("\\x", "")).decode(errors="replace")),
        line,
    )


@asynccontextmanager
async def open_sandboxes(
    scratch: Path, count: int, batch_timeout: float = 60.0
) -> AsyncIterator[list[Sandbox]]:
    """``count`` sandboxes over ``scratch``, stopped on exit."""
    sandboxes = [Sandbox(scratch, batch_timeout) for _ in range(count)]
    try:
        yield sandboxes
    finally:
        for sandbox in sandboxes:
            await sandbox.aclose()
