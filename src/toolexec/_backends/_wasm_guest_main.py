"""The program the Wasm sandbox's guest runs (CPython 3.12 for WASI), never the host.

``_wasm_instance`` starts the guest as ``python -I -S -c <this file's
source>``. It serves calls one after another, for as long as the instance
lives:

* it reads a request from standard input: its length (8 bytes, big-endian),
  then a JSON object. End of input means the host is closing the instance,
  and the program exits;
* it runs the request: ``{"kind": "python", "code"}`` runs model-written
  code; ``{"kind": "function", "module", "source", "qualname", "arguments",
  "ctx_param", "context"}`` runs a function tool from its module's source
  (``source`` is null when this instance has it already);
* it writes one response to standard output, framed the same way: ``{"op":
  "result", "value", "stdout", "stderr", "progress"}``, ``{"op": "error",
  "message", "error_class", "details"}`` (a ``ToolError``), or ``{"op":
  "crash", "message", "traceback"}`` (any other exception).

What the call prints is captured, up to ``output_bytes`` per stream. Only
this file's standard library is here: a tool module imports ``toolexec``
for its decorator and its errors, and finds the small stand-in below.
Imported (not run) on the host, it defines its parts and nothing else, so
tests/test_wasm_parts.py checks them there too.
"""

from __future__ import annotations

import enum
import io
import json
import os
import sys
import traceback
import types
from typing import Any


def _read(count: int) -> bytes:
    # os.pread on standard input: the host answers it with the next request
    # (a read of standard input itself is at its end, as a call sees it).
    data = b""
    while len(data) < count:
        chunk = os.pread(0, count - len(data), 0)
        if not chunk:
            raise SystemExit(0)
        data += chunk
    return data


def _send(message: dict[str, Any]) -> None:
    try:
        body = json.dumps(message).encode()
    except (TypeError, ValueError) as exc:
        body = json.dumps(
            {"op": "crash", "message": f"its value is not JSON: {exc}", "traceback": ""}
        ).encode()
    data = len(body).to_bytes(8, "big") + body
    while data:
        data = data[os.write(1, data) :]


# -- the stand-in for ``toolexec`` ---------------------------------------------------


class ToolError(Exception):
    """A failure the model should read (as toolexec's ``ToolError``)."""

    def __init__(
        self, message: str, *, error_class: Any = "execution_error", details: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_class = getattr(error_class, "value", error_class)
        self.details = dict(details or {})


class SideEffects(enum.Enum):
    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    NETWORK = "network"


class ErrorClass(enum.Enum):
    NOT_FOUND = "not_found"
    INVALID_ARGUMENTS = "invalid_arguments"
    PERMISSION_DENIED = "permission_denied"
    TIMEOUT = "timeout"
    EXECUTION_ERROR = "execution_error"


def function_tool(fn: Any = None, /, **_options: Any) -> Any:
    """Leave the function as it is: the host made the tool already."""
    if fn is None:
        return lambda f: f
    return fn


class Workspace:
    def __init__(self, root: str) -> None:
        import pathlib

        self.root = pathlib.Path(root)


class ToolContext:
    """What a function tool sees of its call in the guest."""

    def __init__(self, data: dict[str, Any], progress: list[str]) -> None:
        self.call_id = data["call_id"]
        self.tool_name = data["tool_name"]
        self.agent_path = tuple(data["agent_path"])
        self.session_id = data["session_id"]
        self.batch_id = data["batch_id"]
        self.workspace = None if data["workspace"] is None else Workspace(data["workspace"])
        self.limits = data["limits"]
        self._progress = progress

    def report_progress(self, message: str) -> None:
        self._progress.append(str(message))


# -- running calls -------------------------------------------------------------------


class _Capped(io.StringIO):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.total = 0

    def write(self, text: str) -> int:
        self.total += len(text)
        room = self.limit - self.tell()
        if room > 0:
            super().write(text[:room])
        return len(text)

    def text(self) -> str:
        value = self.getvalue()
        if self.total > len(value):
            value += f"\n[... {self.total - len(value)} more characters dropped]"
        return value


_MODULES: dict[str, tuple[types.ModuleType, str]] = {}


def _module(name: str, source: str | None) -> types.ModuleType:
    module: types.ModuleType | None
    module, loaded = _MODULES.get(name, (None, None))
    if source is not None and loaded != source:
        module = types.ModuleType(name)
        module.__file__ = f"<{name}>"
        sys.modules[name] = module
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
        _MODULES[name] = module, source
    if module is None:
        raise ImportError(f"no source for module {name!r}")
    return module


def _function(request: dict[str, Any], progress: list[str]) -> Any:
    obj: Any = _module(request["module"], request["source"])
    for part in request["qualname"].split("."):
        obj = getattr(obj, part)
    fn = getattr(obj, "fn", obj)
    kwargs = dict(request["arguments"])
    if request["ctx_param"] is not None:
        kwargs[request["ctx_param"]] = ToolContext(request["context"], progress)
    return fn(**kwargs)


def _python(request: dict[str, Any], _progress: list[str]) -> None:
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(request["code"], "<python>", "exec"), namespace)


def _serve(request: dict[str, Any]) -> dict[str, Any]:
    limit = request["output_bytes"]
    out, err = _Capped(limit), _Capped(limit)
    progress: list[str] = []
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        run = _python if request["kind"] == "python" else _function
        value = run(request, progress)
        reply = {"op": "result", "value": value}
    except ToolError as exc:
        reply = {
            "op": "error",
            "message": exc.message,
            "error_class": exc.error_class,
            "details": exc.details,
        }
    except MemoryError:
        reply = {"op": "crash", "message": "MemoryError (its memory limit)", "traceback": ""}
    except BaseException as exc:  # the call's failure, the model's to read
        reply = {
            "op": "crash",
            "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    finally:
        sys.stdout, sys.stderr = saved
    reply.update(stdout=out.text(), stderr=err.text(), progress=progress)
    return reply


def _install_shim() -> None:
    """Make ``import toolexec`` in a tool's module find the stand-in."""
    shim = types.ModuleType("toolexec")
    for name in (
        "ErrorClass",
        "SideEffects",
        "ToolContext",
        "ToolError",
        "Workspace",
        "function_tool",
    ):
        setattr(shim, name, globals()[name])
    sys.modules["toolexec"] = shim


def main() -> None:
    _install_shim()
    if len(sys.argv) > 1:
        os.chdir(sys.argv[1])
    while True:
        size = int.from_bytes(_read(8), "big")
        _send(_serve(json.loads(_read(size))))


if __name__ == "__main__":  # as the guest runs it: python -c <this source>
    main()
