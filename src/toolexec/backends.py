"""Where calls run: the backend seam, and the backends that come with toolexec.

A policy's grant names a sandbox (``ExecutionGrant(sandbox="box")``); the
executor hands each admitted call to the ``Backend`` it was given under that
name (``ToolExecutor(..., backends={"box": MyBackend()})``), or runs it on
the host. Admission, order, deadlines and the one-result rule stay with the
executor, whatever the backend. ``RayBackend`` (the ``ray`` extra) runs
calls as tasks on a Ray cluster (docs/scale-out.md).

``RemoteBackend`` sends calls over HTTP to a worker serving the same tools
(``toolexec serve --http HOST:PORT``, or ``serve_worker`` in a trio
program); both need the ``remote`` extra (``pip install 'toolexec[remote]'``).

Example::

    from toolexec.backends import Backend

    class Recorded:
        async def run(self, tool, arguments, ctx):
            print("running", ctx.tool_name, "in", ctx.grant.sandbox)
            return await tool.execute(arguments, ctx)

    assert isinstance(Recorded(), Backend)

``SubprocessBackend`` runs calls in a child process, isolated by bubblewrap,
``unshare`` or resource limits alone, whichever is the best the machine
offers (docs/sandbox.md); with ``warm=N`` it keeps sandboxes between calls,
and ``SandboxByDefault`` wraps a policy so that the shell and importable
function tools run there by default. ``WasmBackend`` (the ``wasm`` extra) runs the
``python`` tool (``PythonTool``) and pure-Python function tools in CPython
compiled to WebAssembly, under wasmtime; ``MicroVMBackend`` is the micro-VM
kind's place, which refuses every call until it is built, saying what the
machine lacks (``probe_microvm``).
"""

from __future__ import annotations

from ._backends._microvm import MicroVMBackend, MicroVMProbe, probe_microvm
from ._backends._ray import RayBackend
from ._backends._remote import RemoteBackend
from ._backends._remote_worker import serve_worker
from ._backends._sandbox import SubprocessBackend
from ._backends._sandbox_default import SandboxByDefault
from ._backends._sandbox_launch import Detection
from ._backends._sandbox_limits import SandboxLimits
from ._backends._wasm import WASM_LIMIT_KEYS, PythonTool, WasmBackend, WasmLimits
from ._core._backend import Backend, HostBackend
from ._core._public import fixup_module_metadata as _fixup_module_metadata

__all__ = [
    "Backend",
    "Detection",
    "HostBackend",
    "MicroVMBackend",
    "MicroVMProbe",
    "PythonTool",
    "RayBackend",
    "RemoteBackend",
    "SandboxByDefault",
    "SandboxLimits",
    "SubprocessBackend",
    "WASM_LIMIT_KEYS",
    "WasmBackend",
    "WasmLimits",
    "probe_microvm",
    "serve_worker",
]

_fixup_module_metadata(__name__, __all__)
