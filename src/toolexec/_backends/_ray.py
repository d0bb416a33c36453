"""Calls on a Ray cluster: ``RayBackend`` (the ``ray`` extra; docs/scale-out.md).

Theory of operation. The executor plans, admits and times every call as
it would on the host; only the admitted call's work crosses to Ray. For
each call the backend submits one Ray *task* (not an actor: a task can be
force-killed, an actor task cannot) running ``_execute_remotely`` with the
tool object and the validated arguments, pickled by Ray. On the worker, a
sync function tool without a context runs directly in the worker's main
thread (where ``ray.cancel`` interrupts it); any other tool runs under its
own ``trio.run``. The worker returns a tagged tuple, never raises for the
tool's failure, so a result is mapped exactly once: ``ok`` with the
output, ``tool_error`` with a ``ToolError``'s parts, ``raised`` with any
other exception (made picklable). Ray's own failures (a worker that died,
a task cancelled by someone else) become ``ToolError`` s naming Ray.

Tasks are submitted with ``max_retries=0``: Ray would otherwise re-run a
task whose worker died, and a mutating tool would run twice. A call runs
at most once; a lost worker gives an error result.

The host waits on the task's ``ObjectRef.future()`` (completed by Ray's
own thread, which wakes the trio task through its token), so a waiting
call holds no thread. When the call is cancelled (a deadline, a host
cancel, a sibling's failure), the backend asks Ray to interrupt the task
(``ray.cancel``: a ``KeyboardInterrupt`` in the worker), waits up to the
grace period for it to end, then kills the worker (``force=True``) and
waits (up to ``KILL_PATIENCE``) for Ray to report the task ended; then the
cancellation goes on. Ray itself is imported only in this module, and only when a
backend is used.

Why the ref's end is proof enough. Ray reports a started task over only
when the worker's function has returned or raised, or when the worker is
gone. So a task that ends soon after the interrupt has stopped running the
tool: the interrupt landed where the tool does not catch it (a tool that
ignores interrupts may not have reached the code that does), the task
raised, and the worker went back to Ray's pool, alive and idle. There is
nothing to kill then, and killing it would only cost a worker restart.
When the kill is needed, Ray ends the worker's child processes with it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import threading
import traceback
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core._errors import ToolError
from .._core._tool_protocol import ToolContext
from .._core._types import RESOURCE_HINTS, ErrorClass, ToolOutput, describe, resource_problem
from .._gate._policy import ExecutionGrant
from .._tools._function import FunctionTool

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core._tool_protocol import Tool

__all__ = ["RayBackend"]

_log = logging.getLogger("toolexec.ray")

KILL_PATIENCE = 10.0
"""Seconds to wait for Ray to report a force-killed task's end before giving up on it."""

INSTALL_HINT = "install it with: pip install 'toolexec[ray]'"


def _ray() -> Any:
    """The ``ray`` module (imported on first use)."""
    import ray  # the optional extra: imported on first use only

    return ray


# -- the worker side -----------------------------------------------------------


def _portable(exc: Exception) -> Exception:
    """``exc``, or a ``RuntimeError`` saying the same if it cannot be pickled."""
    text = "".join(traceback.format_exception(exc))
    try:
        _ray().cloudpickle.dumps(exc)
    except Exception:
        exc = RuntimeError(f"{type(exc).__qualname__}: {exc}")
    exc.add_note(f"raised on a Ray worker:\n{text}")
    return exc


def _execute_remotely(
    tool: Tool, arguments: dict[str, Any], info: dict[str, Any]
) -> tuple[Any, ...]:
    """Run one call on a Ray worker; return ``(tag, ...)``, never raise for the tool."""
    try:
        if isinstance(tool, FunctionTool) and tool.callable_here:
            output = tool.call_here(arguments)
        else:
            output = trio.run(tool.execute, arguments, ToolContext(**info))
    except ToolError as exc:
        details: Mapping[str, Any] = exc.details
        try:
            _ray().cloudpickle.dumps(details)
        except Exception:
            details = {"details": repr(details)}
        return ("tool_error", exc.message, exc.error_class.value, details)
    except Exception as exc:
        return ("raised", _portable(exc))
    return ("ok", output)


_REMOTE: list[Any] = []
_REMOTE_LOCK = threading.Lock()


def _remote_function() -> Any:
    """``_execute_remotely`` as a Ray remote function (made once per process)."""
    with _REMOTE_LOCK:
        if not _REMOTE:
            _REMOTE.append(_ray().remote(max_retries=0)(_execute_remotely))
        return _REMOTE[0]


# -- the host side -------------------------------------------------------------


def _check_hints(_inst: object, _attr: object, value: Mapping[str, float]) -> None:
    problem = resource_problem(value)
    if problem is not None:
        raise ValueError(f"RayBackend resource_hints {problem}")


def _check_address(_inst: object, _attr: object, value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(
            f"RayBackend address must be a Ray address ('auto', 'ray://host:10001', "
            f"'host:6379') or None, got {value!r}"
        )


def _info(ctx: ToolContext) -> dict[str, Any]:
    """What the worker's ``ToolContext`` holds: ids and the grant, no host objects."""
    return {
        "call_id": ctx.call_id,
        "tool_name": ctx.tool_name,
        "agent_path": ctx.agent_path,
        "session_id": ctx.session_id,
        "grant": ExecutionGrant(
            ctx.grant.sandbox, ctx.grant.timeout, ctx.grant.max_output_chars, dict(ctx.grant.limits)
        ),
        "grace_period": ctx.grace_period,
        "batch_id": ctx.batch_id,
    }


@attrs.frozen(eq=False)
class RayBackend:
    """Runs calls as Ray tasks on a Ray cluster (the ``ray`` extra).

    Register it under a sandbox name and have the policy's grant name it::

        import ray
        ray.init(address="auto")          # yours: the cluster to use
        executor = ToolExecutor(
            registry,
            policy=...,                   # grants ExecutionGrant(sandbox="ray")
            backends={"ray": RayBackend()},
        )

    Admission, order, deadlines and the one-result rule stay with the
    executor: a tree-wide serial pool stays serial however many nodes the
    cluster has. Each call is one Ray task, run at most once (no retries).
    A cancelled call's task is interrupted (``ray.cancel``), and its worker
    killed if it has not ended within the grace period.

    What crosses to the worker: the tool object and its validated
    arguments (pickled by Ray, so the tool and what it returns must
    pickle), the call's ids and grant. The workspace, the services and
    progress reporting stay on the host: a tool run on Ray sees
    ``ctx.workspace`` as ``None`` and its progress reports are dropped.

    Args:
        address: where to connect if Ray is not initialized in this
            process when the first call arrives (``ray.init(address=...,
            log_to_driver=False)``, once). ``None``: the process must call
            ``ray.init`` itself, and a call made before gets an error result
            saying so.
        resource_hints: default hints for every call (``num_cpus``, ``num_gpus``,
            ``memory`` in bytes). A tool's ``ToolDefinition.resource_hints``
            overrides them, and the grant's limits with the same keys
            override both.

    Raises:
        ImportError: Ray is not installed.
        ValueError: a bad address or resource hint (the message says which).
    """

    address: str | None = attrs.field(default=None, validator=_check_address)
    resource_hints: Mapping[str, float] = attrs.field(factory=dict, validator=_check_hints)
    _init_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if importlib.util.find_spec("ray") is None:
            raise ImportError(f"RayBackend needs Ray, which is not installed; {INSTALL_HINT}")

    def options(self, tool: Tool, grant: ExecutionGrant) -> dict[str, Any]:
        """The Ray task options for one call of ``tool`` under ``grant``.

        Raises:
            ToolError: the grant's limits hold a bad resource hint.
        """
        from_grant = {k: v for k, v in grant.limits.items() if k in RESOURCE_HINTS}
        problem = resource_problem(from_grant)
        if problem is not None:
            raise ToolError(
                f"Tool '{tool.definition.name}' cannot run on Ray: the grant's limits: {problem}"
            )
        hints = {**self.resource_hints, **tool.definition.resource_hints, **from_grant}
        return {"max_retries": 0, "name": f"toolexec:{tool.definition.name}", **hints}

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the call as a Ray task; return its output or raise its failure."""
        options = self.options(tool, ctx.grant)
        await self._ensure_connected(ctx.tool_name)
        try:
            ref = _remote_function().options(**options).remote(tool, dict(arguments), _info(ctx))
        except Exception as exc:  # the tool or its arguments do not pickle, say
            raise ToolError(
                f"Tool '{ctx.tool_name}' could not be sent to Ray: {type(exc).__name__}: {exc}"
            ) from None
        outcome = await _wait(ref, ctx.grace_period, ctx.tool_name)
        return _decode(outcome, ctx.tool_name)

    async def _ensure_connected(self, tool_name: str) -> None:
        ray = _ray()
        if ray.is_initialized():
            return
        if self.address is None:
            raise ToolError(
                f"Tool '{tool_name}' cannot run on Ray: Ray is not initialized in this process. "
                "Call ray.init(address=...) first, or give RayBackend(address=...)."
            )
        try:
            # Abandoned on cancel: an unreachable address makes ray.init block for
            # minutes, and the call's deadline must still end the call.
            await trio.to_thread.run_sync(self._connect, abandon_on_cancel=True)
        except Exception as exc:
            raise ToolError(
                f"Tool '{tool_name}' cannot run on Ray: connecting to the cluster at "
                f"{self.address!r} failed: {type(exc).__name__}: {exc}"
            ) from None

    def _connect(self) -> None:
        ray = _ray()
        with self._init_lock:
            if not ray.is_initialized():
                ray.init(address=self.address, log_to_driver=False)


async def _wait(ref: Any, grace: float, tool_name: str) -> tuple[Any, ...]:
    """The task's outcome; on cancellation, stop the task before passing it on."""
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    future = ref.future()

    def wake(_future: object) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(done.set)

    future.add_done_callback(wake)
    try:
        await done.wait()
    except BaseException:  # Cancelled or KeyboardInterrupt: stop the task, then go on
        with trio.CancelScope(shield=True):
            await _stop(ref, done, grace, tool_name)
        raise
    try:
        outcome = future.result()
    except Exception as exc:
        raise _ray_failure(exc, tool_name) from None
    if not isinstance(outcome, tuple):  # pragma: no cover - only our worker function answers
        raise ToolError(f"Tool '{tool_name}': Ray returned {describe(outcome)}, not an outcome")
    return outcome


async def _stop(ref: Any, done: trio.Event, grace: float, tool_name: str) -> None:
    """Interrupt the task; kill its worker if it has not ended within ``grace``."""
    ray = _ray()
    for force, patience in ((False, grace), (True, KILL_PATIENCE)):
        try:
            ray.cancel(ref, force=force)
        except Exception as exc:  # the cluster went away: nothing left to stop
            _log.warning("could not cancel the Ray task of %r: %s", tool_name, exc)
            return
        with trio.move_on_after(patience):
            await done.wait()
            _log.debug(
                "the Ray task of %r ended after %s",
                tool_name,
                "its worker was killed" if force else "the interrupt",
            )
            return
    _log.warning(
        "the Ray task of %r did not end within %.0fs of its worker being killed",
        tool_name,
        KILL_PATIENCE,
    )


def _ray_failure(exc: Exception, tool_name: str) -> ToolError:
    """A Ray error (not the tool's) as the call's failure."""
    exceptions = _ray().exceptions
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, exceptions.TaskCancelledError):
        return ToolError(
            f"Tool '{tool_name}' was cancelled on the Ray cluster before it finished.",
            error_class=ErrorClass.CANCELLED,
            details={"ray_error": type(exc).__name__},
        )
    return ToolError(
        f"Tool '{tool_name}' failed on the Ray cluster: {type(exc).__name__}: {first}",
        details={"ray_error": type(exc).__name__, "message": str(exc)},
    )


def _decode(outcome: tuple[Any, ...], tool_name: str) -> ToolOutput:
    """The worker's tagged outcome as the tool's output or its failure."""
    tag = outcome[0]
    if tag == "ok":
        output = outcome[1]
        if not isinstance(output, ToolOutput):  # pragma: no cover - call_here/execute make one
            raise ToolError(f"Tool '{tool_name}' returned {describe(output)} on Ray")
        return output
    if tag == "tool_error":
        _, message, error_class, details = outcome
        raise ToolError(message, error_class=ErrorClass(error_class), details=details)
    raise outcome[1]
