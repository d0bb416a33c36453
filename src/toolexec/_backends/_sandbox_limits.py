"""What a call in the subprocess sandbox may be limited to: the isolation
levels and a grant's ``limits`` (docs/sandbox.md, "Limits").

``SandboxLimits.parse`` reads a grant's mapping and refuses an unknown key
or a bad value with a message naming the key and what it holds, so a
misspelt limit never goes unenforced. The backend (``_sandbox``) merges its
own defaults under each grant's before parsing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["ISOLATION_LEVELS", "LIMIT_KEYS", "RANK", "SandboxLimits"]

#: The isolation levels, strongest first.
ISOLATION_LEVELS = ("bwrap", "unshare", "rlimits")
#: Each level's strength: a call may run at its required level or a higher one.
RANK = {"rlimits": 0, "unshare": 1, "bwrap": 2}
#: A level above every subprocess level: only the ``microvm`` sandbox gives it
#: (``_microvm``), so a grant that requires it of this sandbox is refused.
MICROVM = "microvm"

#: The keys of a grant's ``limits`` the subprocess sandbox reads, and what each holds.
LIMIT_KEYS = {
    "cpu_seconds": "CPU time in seconds (RLIMIT_CPU): SIGXCPU, then SIGKILL a second later",
    "memory_bytes": "address space in bytes (RLIMIT_AS): allocations beyond it fail",
    "open_files": "open file descriptors per process (RLIMIT_NOFILE)",
    "file_size_bytes": "the largest file a process may write, in bytes (RLIMIT_FSIZE)",
    "processes": "processes in the sandbox besides toolexec's own (RLIMIT_NPROC)",
    "network": "true to let the call reach the network (default false)",
    "workspace": "'ro' (default) or 'rw': whether the call may write the workspace",
    "min_isolation": (
        "the weakest level the call may run at: 'bwrap', 'unshare' or 'rlimits' "
        "('microvm' is refused here, with what the machine lacks for it)"
    ),
    "env_allow": "the host environment variables passed in, replacing the backend's list",
}
_INT_KEYS = ("cpu_seconds", "memory_bytes", "open_files", "file_size_bytes", "processes")


def _allowed_names() -> str:
    return ", ".join(LIMIT_KEYS)


@attrs.frozen
class SandboxLimits:
    """A grant's ``limits`` as the subprocess sandbox reads them (see ``LIMIT_KEYS``).

    Build it with ``SandboxLimits.parse(mapping)``, which says what is wrong
    with a bad key or value; unknown keys are errors, so a misspelt limit
    never goes unenforced.
    """

    cpu_seconds: int | None = None
    memory_bytes: int | None = None
    open_files: int | None = None
    file_size_bytes: int | None = None
    processes: int | None = None
    network: bool = False
    workspace: str = "ro"
    min_isolation: str | None = None
    env_allow: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, limits: Mapping[str, Any], where: str = "limits") -> SandboxLimits:
        """Read and check ``limits``.

        Raises:
            ValueError: naming the key, what it holds, and the keys allowed.
        """
        if not hasattr(limits, "items"):
            raise ValueError(f"{where}: a mapping of limit names to values, got {limits!r}")
        values: dict[str, Any] = {}
        for key, value in limits.items():
            if key not in LIMIT_KEYS:
                raise ValueError(
                    f"{where}: unknown limit {key!r} for the subprocess sandbox; "
                    f"the limits are: {_allowed_names()}"
                )
            bad = _bad_value(key, value)
            if bad:
                raise ValueError(f"{where}.{key}: {bad}, got {value!r}")
            values[key] = tuple(value) if key == "env_allow" else value
        return cls(**values)

    def rlimits(self) -> dict[str, int]:
        """The resource limits that are set, by key."""
        return {k: getattr(self, k) for k in _INT_KEYS if getattr(self, k) is not None}


def _bad_value(key: str, value: Any) -> str | None:
    if key in _INT_KEYS:
        if type(value) is not int or value <= 0:
            return "a positive whole number"
    elif key == "network":
        if type(value) is not bool:
            return "true or false"
    elif key == "workspace":
        if value not in ("ro", "rw"):
            return "'ro' or 'rw'"
    elif key == "min_isolation":
        if value not in ISOLATION_LEVELS and value != MICROVM:
            return f"one of {', '.join((MICROVM, *ISOLATION_LEVELS))}"
    elif isinstance(value, str) or not all(
        isinstance(v, str) and v and "=" not in v for v in _iterable(value)
    ):
        return "a list of environment variable names"
    return None


def _iterable(value: Any) -> Sequence[Any]:
    try:
        return list(value)
    except TypeError:
        return [None]
