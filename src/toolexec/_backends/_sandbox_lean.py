"""A fresh ``bwrap`` sandbox for a shell command, with no launcher (docs/sandbox.md).

Where the call has no resource limit to set (the one thing bwrap cannot do
itself), the command runs under bwrap directly, with the namespaces and
mounts a launched call gets: bwrap's own first process reaps orphans and ends
the namespace when the command exits, ``--chdir`` sets the working directory,
``--cap-drop ALL`` drops every capability, and without the network the same
seccomp filter that refuses unix sockets is passed as descriptor 3
(``--seccomp 3``). bwrap is started by the shell tool's reaper
(``_proc._reaper``): if toolexec dies, the reaper's worker ends it, which
ends the namespace; on timeout or cancellation the worker ends it and
everything in it the same way.

What differs from a launched call: a command killed by a signal ends with
exit code 128 + the signal's number (as bwrap passes it on); and bwrap's
own failure to set up (``bwrap: ...`` on stderr, exit code 1) is told apart
from the command's by that message.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._core._errors import ToolError
from .._proc._process import PipeCollector
from .._proc._reaper import Attempt, encode_env, open_reaped, supervise_reaped
from .._tools._shell import CommandEnd
from ._sandbox_child import unix_socket_filter
from ._sandbox_launch import bwrap_command

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._proc._process import OutputCapture
    from ._sandbox_launch import Detection
    from ._sandbox_limits import SandboxLimits

__all__ = ["run_in_bwrap"]

_FILTER: list[bytes] = []


def _filter_pipe() -> int:
    """A pipe's read end holding the seccomp filter, whole (it fits the pipe's buffer)."""
    if not _FILTER:
        _FILTER.append(unix_socket_filter())
    read, write = os.pipe()
    try:
        os.write(write, _FILTER[0])
    finally:
        os.close(write)
    return read


async def run_in_bwrap(
    found: Detection,
    limits: SandboxLimits,
    workspace: str,
    attempt: tuple[str, list[str], dict[str, str] | None],
    output: tuple[OutputCapture, OutputCapture, Callable[[str, bytes], None] | None],
    limit: float,
    grace: float,
    env: dict[str, str],
) -> CommandEnd | str | None:
    """Run the command of ``attempt`` (its program, argv and environment;
    ``None``: ``env``) under bwrap; how it ended, or why the sandbox could
    not be set up, or ``None`` where this way is not open (no reaper here,
    or the program lives where the sandbox hides it)."""
    path, argv, attempt_env = attempt
    command = bwrap_command(found, limits, workspace, path, argv)
    if command is None:
        return None
    out, err, listener = output
    try:
        collector = PipeCollector(out, err, listener)
    except OSError as exc:
        raise ToolError(f"Could not create the pipes for the sandbox: {exc}") from None
    seccomp = None if limits.network else _filter_pipe()
    try:
        stdout, stderr = collector.write_ends
        start = Attempt.of(command[0], command, encode_env(attempt_env or env))
        try:
            process = await open_reaped([start], workspace, stdout, stderr, grace, seccomp)
        except OSError as exc:
            return f"cannot start bwrap: {exc.strerror or exc}"
        finally:
            if seccomp is not None:
                os.close(seccomp)
        if process is None:
            return None
        collector.close_write_ends()
        try:
            timed_out = await supervise_reaped(process, collector, limit, grace)
        finally:
            await process.aclose(grace)
    finally:
        collector.close()
    if process.error is not None:
        return f"cannot start bwrap: {process.error}"
    code = process.returncode
    said = err.text()
    if code == 1 and said.startswith("bwrap: ") and not out.total:
        return said.strip()
    return CommandEnd(code, timed_out, None, None, process.lost)
