"""``WasmBackend``: calls run in a CPython interpreter compiled to WebAssembly,
under wasmtime (docs/sandbox.md, "The Wasm sandbox").

The guest (``_wasm_guest``) is checked against its pinned SHA-256, compiled
once and cached; each instance (``_wasm_instance``) is an interpreter on a
thread of its own that serves calls one after another. This module holds
the backend: it reads a grant's limits (``WasmLimits``), keeps idle
instances warm per set of limits and workspace (an instance serves one call
at a time, so each concurrent call, each worker, has its own), starts a
fresh one when asked, and turns what the guest answered into the call's
result. It also holds the ``python`` tool, which runs model-written code
here and nowhere else.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import weakref
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._core._errors import ToolError
from .._core._types import ErrorClass, SideEffects, ToolDefinition, ToolOutput
from .._tools._file_tools import tool_schema
from .._tools._function import FunctionTool
from ._sandbox_codec import context_to_json, locate
from ._wasm_instance import GUEST_ROOT, GuestInstance

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core._tool_protocol import Tool, ToolContext

__all__ = ["WASM_LIMIT_KEYS", "PythonTool", "WasmBackend", "WasmLimits"]

_log = logging.getLogger("toolexec.sandbox")

#: The keys of a grant's ``limits`` the Wasm sandbox reads, and what each holds.
WASM_LIMIT_KEYS = {
    "fuel": "the guest's CPU budget for one call, in wasmtime fuel units (about one per "
    "WebAssembly instruction)",
    "wall_seconds": "the call's wall time, in seconds (the epoch deadline)",
    "memory_bytes": "the guest's linear memory, in bytes: allocations past it fail",
    "output_bytes": "what the call may print or return, in bytes per stream",
    "workspace": "'ro' (default) or 'rw': whether the call may write the workspace",
    "fresh": "true to run the call in a new guest instead of a warm one",
}


def _positive(value: Any, kind: type) -> bool:
    return type(value) in (kind, int) and value > 0 and value == value


@attrs.frozen
class WasmLimits:
    """A grant's ``limits`` as the Wasm sandbox reads them (see ``WASM_LIMIT_KEYS``).

    Build it with ``WasmLimits.parse(mapping)``: an unknown key or a bad
    value is an error naming it, so a misspelt limit never goes unenforced.
    """

    fuel: int = 20_000_000_000
    wall_seconds: float = 60.0
    memory_bytes: int = 256 * 1024 * 1024
    output_bytes: int = 1024 * 1024
    workspace: str = "ro"
    fresh: bool = False

    @classmethod
    def parse(cls, limits: Mapping[str, Any], where: str = "limits") -> WasmLimits:
        """Read and check ``limits``.

        Raises:
            ValueError: naming the key, what it holds, and the keys allowed.
        """
        values: dict[str, Any] = {}
        for key, value in dict(limits).items():
            if key not in WASM_LIMIT_KEYS:
                raise ValueError(
                    f"{where}: unknown limit {key!r} for the wasm sandbox; "
                    f"the limits are: {', '.join(WASM_LIMIT_KEYS)}"
                )
            bad = _bad_value(key, value)
            if bad:
                raise ValueError(f"{where}.{key}: {bad}, got {value!r}")
            values[key] = value
        return cls(**values)


def _bad_value(key: str, value: Any) -> str | None:
    if key == "wall_seconds":
        return None if _positive(value, float) else "a positive number"
    if key == "workspace":
        return None if value in ("ro", "rw") else "'ro' or 'rw'"
    if key == "fresh":
        return None if type(value) is bool else "true or false"
    return None if _positive(value, int) and type(value) is int else "a positive whole number"


PYTHON = ToolDefinition(
    name="python",
    description=(
        "Run Python 3.12 code in a sandbox and return what it prints. Only the standard "
        "library is there; the working directory is the workspace; there is no network."
    ),
    input_schema=tool_schema(
        {"code": {"type": "string", "description": "The Python code to run."}}, "code"
    ),
    side_effects=SideEffects.EXECUTE,
)


@attrs.define(eq=False)
class PythonTool:
    """``python``: run model-written code in the Wasm sandbox, and nowhere else.

    Route it to a ``WasmBackend`` with a grant (``ExecutionGrant(sandbox="wasm")``);
    anywhere else, a call gets an error result and nothing runs.
    """

    definition: ToolDefinition = attrs.field(default=PYTHON, init=False)

    def __call__(self) -> PythonTool:
        """Act as its own factory: it keeps no per-call state."""
        return self

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Refuse: the code runs only in the Wasm sandbox."""
        raise ToolError(
            f"Tool 'python' was not run: it runs model-written code only in the wasm "
            f"sandbox, and this call was routed to {ctx.grant.sandbox!r}; route it with "
            "ExecutionGrant(sandbox='wasm') to a WasmBackend."
        )


@functools.lru_cache(maxsize=256)
def _module_source(module: str) -> str:
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        raise ToolError(
            f"its module {module!r} is not pure Python source ({path or 'no file'}), "
            "which the wasm sandbox needs"
        )
    with open(path, encoding="utf-8") as f:
        return f.read()


def _function_target(tool: FunctionTool) -> tuple[str, str, str, str | None]:
    """The module, its source, the qualified name and the context parameter of a function tool."""
    name = tool.definition.name
    try:
        module, qualname = locate(tool)
        if inspect.iscoroutinefunction(tool.fn):
            raise ToolError("it is an async function, and the guest has no event loop")
        source = _module_source(module)
    except ToolError as exc:
        why = exc.message.replace("subprocess sandbox", "wasm sandbox")
        raise ToolError(f"Tool '{name}' cannot run in the wasm sandbox: {why}") from None
    parameters = inspect.signature(tool.fn).parameters
    ctx_param = next((p for p in parameters if tool.reads_context and _is_ctx(tool, p)), None)
    return module, source, qualname, ctx_param


_targets: weakref.WeakKeyDictionary[Any, tuple[str, str, str, str | None]] = (
    weakref.WeakKeyDictionary()
)


def _target(tool: FunctionTool) -> tuple[str, str, str, str | None]:
    """``_function_target``, once per function."""
    found = _targets.get(tool.fn)
    if found is None:
        found = _targets[tool.fn] = _function_target(tool)
    return found


def _function_request(tool: Tool, ctx: ToolContext, guest: GuestInstance) -> dict[str, Any]:
    """What the guest needs to run a function tool: its module's source (the first
    time that guest runs it) and its name."""
    assert isinstance(tool, FunctionTool)
    module, source, qualname, ctx_param = _target(tool)
    request: dict[str, Any] = {
        "kind": "function",
        "module": module,
        "source": None if module in guest.modules else source,
        "qualname": qualname,
        "ctx_param": ctx_param,
    }
    if ctx_param is not None:
        context = context_to_json(ctx)
        context["workspace"] = GUEST_ROOT if context["workspace"] is not None else None
        context["limits"] = context.pop("grant")["limits"]
        request["context"] = context
    return request


def _is_ctx(tool: FunctionTool, parameter: str) -> bool:
    return parameter not in tool.definition.input_schema.get("properties", {})


@attrs.define(eq=False)
class WasmBackend:
    """Runs calls in a CPython interpreter compiled to WebAssembly, under wasmtime.

    Register it under the sandbox name ``wasm`` and route calls to it with a
    grant::

        ToolExecutor(registry, policy=policy, backends={"wasm": WasmBackend()})
        # in the policy: Allow(ExecutionGrant(sandbox="wasm", limits={...}))

    It runs the ``python`` tool (``PythonTool``: model-written code) and
    pure-Python function tools importable by name, whose module imports only
    the standard library and ``toolexec``'s tool-writing names. Only the
    workspace is visible to the guest, at ``/workspace``, read-only unless
    the grant's ``workspace`` limit is ``"rw"``; there is no network and no
    process. ``fuel``, ``wall_seconds``, ``memory_bytes`` and
    ``output_bytes`` limit each call (``WASM_LIMIT_KEYS``); a call that runs
    out of fuel or time is ended and gets an error result.

    An instance serves one call at a time and stays warm for the next
    (``max_idle`` of them per workspace and set of limits); calls running
    at once each have their own. ``warm=False``, or a grant's ``fresh``
    limit, gives a call a new instance that ends with it. Close the backend
    (``await backend.aclose()``, or ``async with``) to end the warm ones.
    Needs the ``wasm`` extra (``pip install 'toolexec[wasm]'``).

    Args:
        limits: default limits, under each grant's.
        warm: whether instances are kept for later calls.
        max_idle: how many idle instances are kept per workspace and limits.

    Raises:
        ValueError: a limit that is not allowed.
    """

    limits: Mapping[str, Any] = attrs.field(factory=dict)
    warm: bool = True
    max_idle: int = 4
    _idle: dict[tuple[Any, ...], list[GuestInstance]] = attrs.field(
        factory=dict, init=False, repr=False
    )
    _closed: bool = attrs.field(default=False, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        WasmLimits.parse(self.limits)

    async def __aenter__(self) -> WasmBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the warm instances; a call still running ends its own when it is done."""
        self._closed = True
        idle = [g for group in self._idle.values() for g in group]
        self._idle.clear()
        with trio.CancelScope(shield=True):
            for guest in idle:
                await trio.to_thread.run_sync(guest.kill, "closed")

    def idle_count(self) -> int:
        """How many warm instances wait for a call."""
        return sum(len(group) for group in self._idle.values())

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the call in a guest; see the class docstring."""
        name = ctx.tool_name
        try:
            limits = WasmLimits.parse({**self.limits, **ctx.grant.limits}, "grant limits")
        except ValueError as exc:
            raise ToolError(f"Tool '{name}' was not run: {exc}.") from None
        if not isinstance(tool, (PythonTool, FunctionTool)):
            raise ToolError(
                f"Tool '{name}' cannot run in the wasm sandbox: it runs the 'python' tool and "
                f"pure-Python function tools, and this is a {type(tool).__name__}."
            )
        if isinstance(tool, FunctionTool):
            _target(tool)  # a tool the guest cannot run is refused before one starts
        root = getattr(ctx.workspace, "root", None)
        workspace = None if root is None else str(root)
        fresh = limits.fresh or not self.warm
        info = {"fresh": fresh, "workspace": limits.workspace if workspace else None}
        _log.info("call %r (%s) runs in the wasm sandbox", ctx.call_id, name)
        key = (workspace, limits.workspace, limits.memory_bytes, limits.output_bytes)
        guest = None if fresh else self._take(key)
        if guest is None:
            guest = await trio.to_thread.run_sync(
                GuestInstance.open,
                workspace,
                limits.workspace == "rw",
                limits.memory_bytes,
                8 * limits.output_bytes + 65536,  # two streams of characters, and a value
            )
        if isinstance(tool, FunctionTool):
            request = _function_request(tool, ctx, guest)
            request["arguments"] = dict(arguments)
        else:
            request = {"kind": "python", "code": str(arguments["code"])}
        request["output_bytes"] = limits.output_bytes
        try:
            done = await guest.call(request, limits.fuel, limits.wall_seconds)
            if done.reply is not None and done.reply.get("op") != "crash":
                guest.modules.add(request.get("module", ""))
        finally:
            kept = self._idle.setdefault(key, [])
            if not (fresh or self._closed) and guest.alive and len(kept) < self.max_idle:
                kept.append(guest)
            else:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(guest.kill, "done")
        for message in (done.reply or {}).get("progress") or ():
            ctx.report_progress(str(message))
        return _output(tool, name, done.reply, done.failure, limits, {"wasm": info})

    def _take(self, key: tuple[Any, ...]) -> GuestInstance | None:
        group = self._idle.get(key, [])
        while group:
            guest = group.pop()
            if guest.alive:
                return guest
        return None


def _output(
    tool: Tool,
    name: str,
    reply: dict[str, Any] | None,
    failure: str | None,
    limits: WasmLimits,
    details: dict[str, Any],
) -> ToolOutput:
    """The call's output from the guest's reply, or the error that says why there is none."""
    details["sandbox"] = "wasm"
    if reply is None:
        if failure == "fuel":
            why = f"used up its CPU budget ({limits.fuel} units of fuel)"
        elif failure == "wall":
            why = f"ran past its wall-time limit ({limits.wall_seconds} s)"
        else:
            why = f"ended without a result: {failure}"
        raise ToolError(
            f"Tool '{name}' {why} in the wasm sandbox; it was stopped.", details=details
        )
    for stream in ("stdout", "stderr"):
        if reply.get(stream):
            details["wasm"][stream] = reply[stream]
    op = reply.get("op")
    if op == "error":
        try:
            error_class = ErrorClass(reply.get("error_class"))
        except ValueError:
            error_class = ErrorClass.EXECUTION_ERROR
        raise ToolError(
            str(reply.get("message")),
            error_class=error_class,
            details={**dict(reply.get("details") or {}), **details},
        )
    if op == "crash":
        details["traceback"] = str(reply.get("traceback", ""))
        raise ToolError(f"Tool '{name}' failed: {reply.get('message')}", details=details)
    if isinstance(tool, FunctionTool):
        output = tool.output(reply.get("value"))
    else:
        text = str(reply.get("stdout", "")) + str(reply.get("stderr", ""))
        output = ToolOutput.text(text or "(no output)")
    return attrs.evolve(output, details={**output.details, **details})
