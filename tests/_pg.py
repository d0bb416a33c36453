"""A throwaway PostgreSQL cluster for the tests, started and stopped by them.

Theory of operation: ``initdb`` makes a cluster in a fresh temporary folder
and ``postgres`` serves it on a unix socket in that folder, listening on no
TCP port, as a child of this process. Both refuse to run as root, and the
suite runs as root in CI; so, when this process is root, they run as the
unprivileged ``nobody``, who owns the folder (``subprocess``'s ``user=``,
nothing to install). The server binaries are found on ``PATH`` or in Debian's
``/usr/lib/postgresql/<version>/bin``; where there are none,
:func:`missing` says what is missing and the tests skip with that reason.

The cluster is a test fixture, not a production one: ``fsync`` is off
(a test kills hosts, never the server), and it is stopped at once
(``SIGQUIT``, immediate shutdown) and its folder removed when the session
ends, or when this process dies (``_KEEPER``). One cluster per test process
(per xdist worker), one database per test.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterator

_PROGRAMS = ("initdb", "postgres")
_USER = "nobody"
_STARTUP_GUARD = 120.0  # seconds: a hang guard, far above the second a start takes

# The server runs under a small shell that holds the read end of a pipe whose
# write end only this process has: when it closes (the cluster is stopped, or
# this process dies, however), the shell stops the server at once (SIGQUIT is
# PostgreSQL's immediate shutdown). So a killed test run leaves no server.
_KEEPER = """
exec 3<&0
"$0" "$@" 3<&- &
pg=$!
{ read -r _ <&3; kill -QUIT "$pg" 2>/dev/null; } &
wait "$pg"
"""


def server_bin() -> Path | None:
    """Find the folder holding ``initdb`` and ``postgres``, or None."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    debian.sort(key=lambda p: [int(n) for n in re.findall(r"\d+", p)], reverse=True)
    candidates += [Path(p) for p in debian]
    for folder in candidates:
        if all((folder / name).is_file() for name in _PROGRAMS):
            return folder
    return None


def missing() -> str | None:
    """Say what this machine lacks for the PostgreSQL tests, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'toolexec[postgres]')"
    if server_bin() is None:
        return (
            "no PostgreSQL server binaries (initdb, postgres) on PATH or in "
            "/usr/lib/postgresql/*/bin (Debian: apt-get install postgresql)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_USER)
        except KeyError:
            return f"running as root and there is no user {_USER!r} to run PostgreSQL as"
    return None


@attrs.define(eq=False)
class Cluster:
    """A running throwaway cluster: its socket folder, and databases made on demand."""

    folder: Path
    process: subprocess.Popen[bytes]
    _names: Iterator[int] = attrs.field(factory=itertools.count)

    def dsn(self, dbname: str = "postgres") -> str:
        """The connection string of a database in this cluster."""
        return f"host={self.folder} user=postgres dbname={dbname}"

    def create_database(self) -> str:
        """Make a fresh empty database and return its connection string."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")  # a name made here, not input
        return self.dsn(name)


def _as_server_user() -> dict[str, Any]:
    """Keyword arguments for ``subprocess`` that drop root to the server's user."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(_USER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _wait_ready(folder: Path, process: subprocess.Popen[bytes]) -> None:
    """Wait until the postmaster says it accepts connections (as ``pg_ctl -w`` does)."""
    pid_file = folder / "data" / "postmaster.pid"
    deadline = time.monotonic() + _STARTUP_GUARD
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (folder / "log").read_text(errors="replace")
            raise RuntimeError(f"postgres exited with {process.returncode}:\n{log}")
        with contextlib.suppress(FileNotFoundError):
            lines = pid_file.read_text().splitlines()
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return
        time.sleep(0.02)  # polling a file the server writes, not ordering events
    raise RuntimeError(f"postgres did not become ready in {_STARTUP_GUARD} s")


@contextlib.contextmanager
def running_cluster(*, fsync: bool = False) -> Iterator[Cluster]:
    """Start a cluster in a temporary folder; stop it and remove the folder on exit."""
    bin_dir = server_bin()
    if bin_dir is None:
        raise RuntimeError(missing() or "no PostgreSQL server binaries")
    folder = Path(tempfile.mkdtemp(prefix="toolexec-pg-"))
    drop = _as_server_user()
    try:
        if drop:
            os.chown(folder, drop["user"], drop["group"])
        subprocess.run(
            [
                bin_dir / "initdb",
                "-D",
                folder / "data",
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            **drop,
        )
        settings = {
            "listen_addresses": "",
            "unix_socket_directories": str(folder),
            "fsync": "on" if fsync else "off",
            "full_page_writes": "on" if fsync else "off",
            "max_connections": "200",
        }
        args = ["/bin/sh", "-c", _KEEPER, str(bin_dir / "postgres"), "-D", str(folder / "data")]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        with (folder / "log").open("wb") as log:
            process = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True, **drop
            )
        try:
            _wait_ready(folder, process)
            yield Cluster(folder, process)
        finally:
            _stop(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Immediate shutdown (the keeper's pipe closed), SIGKILL to its group if it lingers."""
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(timeout=_STARTUP_GUARD)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
