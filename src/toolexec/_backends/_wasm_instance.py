"""One running Wasm guest: a CPython interpreter serving calls, on a thread of its own.

Theory of operation.

* *Its own engine and store.* Each instance has a wasmtime engine of its
  own (loading the cached compiled guest into it maps a file: about a
  millisecond), so that its epoch is its alone: the store's epoch deadline
  is one tick away from the start, and ``kill`` moves the epoch on, which
  traps the guest at its next loop head or function entry, whatever other
  instances are doing. Fuel is set for each call when the guest receives
  it; running out traps the guest. The store's memory limit makes
  ``memory.grow`` fail past it, which CPython reports as ``MemoryError``.
* *Its thread.* The guest's ``_start`` runs, for the instance's whole life,
  on a thread of its own (the guest's stack is that thread's). Between calls
  it waits in a read of its standard input, outside any call.
* *The host calls it may make.* Standard input and ``poll_oneoff`` are this
  module's own functions, shadowing WASI's: ``fd_pread`` of standard input
  gets the next request (it waits only between calls; ``fd_read`` of
  standard input, wasmtime's, is always at its end), and a sleep
  (``poll_oneoff`` on clocks) waits on an event that ``kill`` sets, so no
  deadline waits for a sleeping guest; ``clock_time_get`` is this process's
  clocks, so the two agree. Standard output carries the reply (its length,
  then JSON) through a pipe to ``_on_stdout``, which a thread of ours
  reads (``_pump``), and standard error the same way; more than the output
  limit kills the guest. (Not wasmtime's ``stdout_custom``: it calls Python
  from a tokio thread of wasmtime's, which then panics when the process
  exits, and may abort it before it has written what it had to.)
  The other WASI calls are wasmtime's: the files of the one preopened
  directory, clocks, random bytes. Only one of them can wait for an outside
  party: opening a named pipe (FIFO) in the workspace waits for its other
  end, so ``kill`` opens the workspace's pipes itself when the guest's
  thread does not end at once. There is no socket and no process.
* *Talking to trio.* ``call`` queues the request and waits for an event that
  the guest thread sets through the caller's trio token. On cancellation or
  when the wall-time limit passes, it kills the guest and waits for its
  thread to end; a killed or trapped instance never serves again.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import stat
import struct
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._wasm_guest import compiled_guest, engine

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["GUEST_ROOT", "Call", "GuestInstance"]

#: Where the workspace is in the guest.
GUEST_ROOT = "/workspace"
#: Fuel for the interpreter's start-up, before its first call.
_STARTUP_FUEL = 2_000_000_000
#: How long ``kill`` waits for the guest thread to end.
_JOIN_SECONDS = 5.0
_EFAULT = 21
_EIO = 29
_ENOTSUP = 58
_SUB_SIZE = 48
_EVENT_SIZE = 32
_STDERR_KEPT = 4096

with open(__file__.replace("_wasm_instance.py", "_wasm_guest_main.py"), encoding="utf-8") as _f:
    _GUEST_MAIN = _f.read()


@attrs.define(eq=False)
class Call:
    """One request on its way through a guest, and what came back."""

    payload: bytes
    fuel: int
    notify: Callable[[], None]
    reply: dict[str, Any] | None = None
    failure: str | None = None


@attrs.define(eq=False)
class GuestInstance:
    """A guest interpreter serving calls; see the module docstring.

    Build it with ``GuestInstance.open(...)`` (blocking: from a worker thread).
    """

    workspace: str | None
    memory_bytes: int
    output_bytes: int
    _engine: Any
    _store: Any
    _memory: Any = None
    _requests: queue.SimpleQueue[Call | None] = attrs.Factory(queue.SimpleQueue)
    _current: Call | None = None
    _pending: bytes = b""
    _out: bytearray = attrs.Factory(bytearray)
    _stderr: bytearray = attrs.Factory(bytearray)
    _killed: threading.Event = attrs.Factory(threading.Event)
    _ended: threading.Event = attrs.Factory(threading.Event)
    _why: str | None = None
    _thread: threading.Thread | None = None
    # The threads reading the guest's standard output and error (``_pump``).
    _pumps: list[_Pump] = attrs.Factory(list)
    calls: int = 0
    #: The function tools' modules this guest has loaded (their source is sent once).
    modules: set[str] = attrs.Factory(set)

    @classmethod
    def open(
        cls, workspace: str | None, writable: bool, memory_bytes: int, output_bytes: int
    ) -> GuestInstance:
        """Start a guest with ``workspace`` (if any) preopened at ``GUEST_ROOT``.

        Raises:
            ToolError: wasmtime or the guest is missing, or the guest is not the pinned one.
        """
        path = compiled_guest()
        import wasmtime

        eng = engine()
        module = wasmtime.Module.deserialize_file(eng, str(path))
        store = wasmtime.Store(eng)
        self = cls(workspace, memory_bytes, output_bytes, eng, store)
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["python", "-I", "-S", "-c", _GUEST_MAIN, *([GUEST_ROOT] if workspace else [])]
        wasi.env = [("PYTHONHASHSEED", "0"), ("PYTHONDONTWRITEBYTECODE", "1")]
        self._pumps = [_pipe_to(wasi, "stdout", self._on_stdout)]
        self._pumps.append(_pipe_to(wasi, "stderr", self._on_stderr))
        if workspace is not None:
            wasi.preopen_dir(workspace, GUEST_ROOT, writable)
        store.set_wasi(wasi)
        store.set_limits(memory_size=memory_bytes)
        store.set_fuel(_STARTUP_FUEL)
        store.set_epoch_deadline(1)
        linker = self._linker(wasmtime, eng, store)
        instance = linker.instantiate(store, module)
        exports = instance.exports(store)
        self._memory = exports["memory"]
        start = exports["_start"]
        self._thread = threading.Thread(
            target=self._run, args=(start,), name="toolexec-wasm-guest", daemon=True
        )
        self._thread.start()
        return self

    def _linker(self, wasmtime: Any, eng: Any, store: Any) -> Any:
        linker = wasmtime.Linker(eng)
        linker.define_wasi()
        linker.allow_shadowing = True
        i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
        mine = {
            "fd_pread": ([i32, i32, i32, i64, i32], _weak(self._fd_pread, _EIO)),
            "poll_oneoff": ([i32] * 4, _weak(self._poll, _EIO)),
            "clock_time_get": ([i32, i64, i32], _weak(self._clock, _EIO)),
        }
        for name, (params, fn) in mine.items():
            ty = wasmtime.FuncType(params, [i32])
            linker.define_func("wasi_snapshot_preview1", name, ty, fn, True)
        return linker

    # -- the trio side ------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether it can serve another call."""
        return not self._killed.is_set() and not self._ended.is_set()

    async def call(self, request: dict[str, Any], fuel: int, wall: float) -> Call:
        """Run ``request`` in the guest; the ``Call`` with its reply or failure.

        Past ``wall`` seconds, or on cancellation, the guest is killed (and
        the call has the failure ``"wall"``, or ``Cancelled`` is raised).
        """
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def notify() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        call = Call(json.dumps(request).encode(), fuel, notify)
        payload = len(call.payload).to_bytes(8, "big") + call.payload
        call.payload = payload
        self.calls += 1
        if not self.alive:
            call.failure = self._why or "the guest had ended"
            return call
        self._requests.put(call)
        try:
            with trio.move_on_after(wall) as scope:
                await done.wait()
        finally:
            if not done.is_set():
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self.kill, "cancelled")
        if scope.cancelled_caught:
            call.failure = "wall"
        return call

    def kill(self, why: str) -> None:
        """End the guest now (blocking until its thread ends, a few seconds at most)."""
        if self._why is None:
            self._why = why
        self._killed.set()
        self._engine.increment_epoch()
        self._requests.put(None)
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        thread.join(_JOIN_SECONDS / 10)
        if thread.is_alive() and self.workspace is not None:
            # The one host call that can wait for an outside party: opening a
            # named pipe of the workspace, which waits for its other end.
            _open_pipes(self.workspace)
        thread.join(_JOIN_SECONDS)

    # -- the guest thread ---------------------------------------------------------------

    def _run(self, start: Any) -> None:
        import wasmtime

        why = None
        try:
            start(self._store)
            why = "the guest returned"
        except wasmtime.ExitTrap as exc:
            why = f"the guest exited with code {exc.code}"
        except wasmtime.Trap as exc:
            self._pumps[-1].caught_up()  # what it wrote before it trapped
            why = _trap(exc, self._stderr)
        except wasmtime.WasmtimeError as exc:
            why = f"the guest failed: {exc}"
        finally:
            self._store = None  # the guest's memory goes now, whoever still holds this
            self._ended.set()
            if self._why is None:
                self._why = why
            call, self._current = self._current, None
            if call is not None and call.reply is None:
                call.failure = self._why
                call.notify()
            # A call queued after the end gets the same answer.
            while True:
                try:
                    queued = self._requests.get_nowait()
                except queue.Empty:
                    break
                if queued is not None:
                    queued.failure = self._why
                    queued.notify()

    def _fd_pread(self, caller: Any, fd: int, iovs: int, count: int, _at: int, nread: int) -> int:
        if fd != 0:
            return _ENOTSUP  # no other use here: files are read with fd_read
        try:
            return self._read_request(caller, iovs, count, nread)
        except Exception:  # a wrong pointer from the guest: its read fails
            return _EIO

    def _read_request(self, caller: Any, iovs: int, count: int, nread: int) -> int:
        if not self._pending and self._current is not None:
            self._pumps[0].caught_up()  # the reply it has just written is read first
        if not self._pending and self._current is None:
            call = self._requests.get()  # between calls only: the guest is idle
            if call is None or self._killed.is_set():
                return self._put_u32(caller, nread, 0)
            import wasmtime

            wasmtime.Store.set_fuel(caller, call.fuel)
            self._current = call
            self._pending = call.payload
        memory = self._memory
        vectors = memory.read(caller, iovs, iovs + 8 * count)
        total = 0
        for i in range(count):
            if not self._pending:
                break
            base, size = struct.unpack_from("<II", vectors, 8 * i)
            chunk = self._pending[:size]
            if chunk:
                memory.write(caller, chunk, base)
            self._pending = self._pending[len(chunk) :]
            total += len(chunk)
        return self._put_u32(caller, nread, total)

    def _put_u32(self, caller: Any, address: int, value: int) -> int:
        self._memory.write(caller, struct.pack("<I", value), address)
        return 0

    def _clock(self, caller: Any, clock: int, _precision: int, out: int) -> int:
        """``clock_time_get`` from this process's clocks, so that ``_sleep`` agrees with it."""
        if clock == 0:
            now = time.time_ns()
        elif clock == 1:
            now = time.monotonic_ns()
        else:  # the process's and the thread's CPU time: the guest's thread
            now = time.thread_time_ns()
        try:
            self._memory.write(caller, struct.pack("<Q", now), out)
        except Exception:
            return _EFAULT
        return 0

    def _poll(self, caller: Any, subs: int, events: int, count: int, nevents: int) -> int:
        try:
            return self._sleep(caller, subs, events, count, nevents)
        except Exception:
            return _EFAULT

    def _sleep(self, caller: Any, subs: int, events: int, count: int, nevents: int) -> int:
        """``poll_oneoff`` for clocks alone: a wait on ``_killed``, which ``kill`` ends."""
        memory = self._memory
        raw = memory.read(caller, subs, subs + _SUB_SIZE * count)
        if count == 0 or any(raw[_SUB_SIZE * i + 8] != 0 for i in range(count)):
            return _ENOTSUP  # waiting for a file: nothing here is ever not ready
        waits = []
        for i in range(count):
            base = _SUB_SIZE * i
            (userdata,) = struct.unpack_from("<Q", raw, base)
            (timeout,) = struct.unpack_from("<Q", raw, base + 24)
            (flags,) = struct.unpack_from("<H", raw, base + 40)
            if flags & 1:  # an absolute time on that clock
                clock = struct.unpack_from("<I", raw, base + 16)[0]
                now = time.time_ns() if clock == 0 else time.monotonic_ns()
                timeout = max(0, timeout - now)
            waits.append((timeout, userdata))
        shortest = min(w for w, _ in waits)
        self._killed.wait(shortest / 1e9)
        fired = [u for w, u in waits if w <= shortest]
        out = b"".join(struct.pack("<QHBx4xQH6x", u, 0, 0, 0, 0) for u in fired)
        memory.write(caller, out, events)
        return self._put_u32(caller, nevents, len(fired))

    def _on_stdout(self, data: bytes) -> None:
        call = self._current
        if call is None or self._killed.is_set():
            return  # nothing is asked of it: dropped
        self._out += data
        if len(self._out) >= 8:
            size = int.from_bytes(self._out[:8], "big")
            if size > self.output_bytes or len(self._out) > 8 + self.output_bytes:
                self._why = f"its reply passed the output limit ({self.output_bytes} bytes)"
                self._killed.set()
                self._engine.increment_epoch()
                return
            if len(self._out) >= 8 + size:
                body, self._out = bytes(self._out[8 : 8 + size]), bytearray()
                self._current = None
                try:
                    call.reply = json.loads(body)
                except ValueError as exc:
                    call.failure = f"it sent a malformed reply ({exc})"
                    self._why = call.failure
                    self._killed.set()
                    self._engine.increment_epoch()
                call.notify()

    def _on_stderr(self, data: bytes) -> None:
        self._stderr += data
        del self._stderr[:-_STDERR_KEPT]


def _weak(method: Callable[..., Any], dead: Any) -> Callable[..., Any]:
    """``method``, called through a weak reference to its instance.

    wasmtime keeps the functions it calls back in tables of its own until
    the store that uses them is dropped; a bound method there would keep the
    instance, and so the store and the guest's memory, alive for good. When
    the instance is gone, the call answers ``dead``.
    """
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        live = ref()
        return dead if live is None else live(*args)

    return call


def _open_pipes(root: str, most: int = 10_000) -> None:
    """Open and close every named pipe under ``root`` (both ends at once), which
    ends a guest's wait in opening one; at most ``most`` entries are looked at."""
    seen = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            seen += 1
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                if stat.S_ISFIFO(os.lstat(path).st_mode):
                    os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        if seen >= most:
            return


def _trap(exc: Any, stderr: bytearray) -> str:
    import wasmtime

    code = exc.trap_code
    if code is wasmtime.TrapCode.OUT_OF_FUEL:
        return "fuel"
    if code is wasmtime.TrapCode.INTERRUPT:
        return "interrupted"
    tail = stderr.decode("utf-8", "replace").strip()[-600:]
    said = f"; its stderr ends:\n{tail}" if tail else ""
    return f"the guest trapped ({exc.message.splitlines()[0]}){said}"


@attrs.define(eq=False)
class _Pump:
    """A thread that hands what the guest writes to one stream to a method of ours."""

    fd: int
    lock: threading.Lock = attrs.Factory(threading.Lock)

    def caught_up(self, limit: float = 1.0) -> None:
        """Wait (``limit`` seconds at most) until what was written so far has been handed over."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                pending = select.select([self.fd], [], [], 0)[0]
            except (OSError, ValueError):  # closed: everything was handed over
                return
            if not pending:
                break
            time.sleep(0.001)
        with self.lock:  # a read in hand is handed over before this returns
            pass


def _pipe_to(wasi: Any, stream: str, method: Callable[[bytes], None]) -> _Pump:
    """Point the guest's ``stream`` at a pipe whose reading end a thread of ours drains
    into ``method`` (through a weak reference, as ``_weak``), until the guest's end closes."""
    read, write = os.pipe()
    try:
        setattr(wasi, f"{stream}_file", f"/proc/self/fd/{write}")  # wasmtime opens its own
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    pump = _Pump(read)
    handle = _weak(method, None)
    threading.Thread(
        target=_pump, args=(pump, handle), name=f"toolexec-wasm-{stream}", daemon=True
    ).start()
    return pump


def _pump(pump: _Pump, handle: Callable[[bytes], None]) -> None:
    try:
        while True:
            select.select([pump.fd], [], [])  # wait outside the lock: ``caught_up`` takes it
            with pump.lock:
                data = os.read(pump.fd, 65536)
                if not data:
                    return
                handle(data)
    finally:
        os.close(pump.fd)
