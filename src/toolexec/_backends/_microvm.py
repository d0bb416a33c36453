"""The micro-VM sandbox: its probe, and a backend that refuses until it is built
(docs/sandbox.md, "The micro-VM sandbox").

A micro-VM needs hardware virtualisation: Intel VT-x or AMD-V in the CPU
(the ``vmx`` or ``svm`` flag) and KVM driving it (``kvm_intel`` or
``kvm_amd``). Opening ``/dev/kvm`` is not proof of that: a machine may be
served by a KVM module that emulates guests without it (``kvm_pvm``, which
runs only guest kernels built for it), where ``/dev/kvm`` opens, its API
answers and a VM is even created, but a stock kernel does not boot. The
probe checks each part and says which is missing.

``MicroVMBackend`` is where the micro-VM kind will run; the backend itself
is designed (docs/sandbox.md), not built. Until then every call routed to it
gets an error result naming what this machine lacks (or, on a machine that
has everything, that the backend is not built), and nothing runs.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .._core._errors import ToolError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core._tool_protocol import Tool, ToolContext
    from .._core._types import ToolOutput

__all__ = ["MicroVMBackend", "MicroVMProbe", "probe_microvm"]

_KVM_GET_API_VERSION = 0xAE00
_KVM_CREATE_VM = 0xAE01
_KVM_API_VERSION = 12
_HARDWARE_KVM = ("kvm_intel", "kvm_amd")


@attrs.frozen
class MicroVMProbe:
    """What ``probe_microvm`` found.

    Attributes:
        usable: whether this machine can run micro-VMs (hardware virtualisation
            through KVM).
        lacks: what is missing, one phrase each (empty when ``usable``).
        found: what was seen on the way (the CPU flags, the KVM module, ...).
    """

    usable: bool
    lacks: tuple[str, ...]
    found: tuple[str, ...]

    def why_not(self) -> str:
        """The missing parts, as one sentence's worth."""
        return "; ".join(self.lacks) or "nothing"


def _cpu_flags(cpuinfo: Path) -> set[str]:
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def _kvm_modules(modules: Path) -> list[str]:
    try:
        return sorted(p.name for p in modules.iterdir() if p.name.startswith("kvm"))
    except OSError:
        return []


def _open_kvm(device: str, lacks: list[str], found: list[str]) -> None:
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        lacks.append(f"{device} cannot be opened ({exc.strerror or exc})")
        return
    try:
        version = fcntl.ioctl(fd, _KVM_GET_API_VERSION, 0)
        found.append(f"{device} opens; KVM API version {version}")
        if version != _KVM_API_VERSION:
            lacks.append(f"the KVM API version {_KVM_API_VERSION} ({device} answers {version})")
            return
        vm = fcntl.ioctl(fd, _KVM_CREATE_VM, 0)
        os.close(vm)
        found.append("KVM_CREATE_VM succeeds")
    except OSError as exc:
        lacks.append(f"a working KVM ({device}: {exc.strerror or exc})")
    finally:
        os.close(fd)


def probe_microvm(
    *,
    device: str = "/dev/kvm",
    cpuinfo: str = "/proc/cpuinfo",
    modules: str = "/sys/module",
) -> MicroVMProbe:
    """Check whether this machine can run micro-VMs; say what it lacks if not.

    It reads the CPU flags (``vmx``/``svm``), which KVM module is loaded,
    and opens ``device`` to ask its API version and create (and close) a VM.
    Blocking, but quick (no VM is started).

    Example::

        probe = probe_microvm()
        if not probe.usable:
            print("no micro-VMs here:", probe.why_not())
    """
    lacks: list[str] = []
    found: list[str] = []
    flags = _cpu_flags(Path(cpuinfo))
    virt = sorted(flags & {"vmx", "svm"})
    found.append(f"CPU flags: {', '.join(virt) or 'no vmx or svm'}")
    if "hypervisor" in flags:
        found.append("this machine is itself a virtual machine")
    if not virt:
        lacks.append(
            "hardware virtualisation (the CPU shows neither the vmx (Intel VT-x) nor the "
            "svm (AMD-V) flag)"
        )
    loaded = _kvm_modules(Path(modules))
    found.append(f"KVM modules: {', '.join(loaded) or 'none'}")
    if not any(m in loaded for m in _HARDWARE_KVM):
        emulated = [m for m in loaded if m not in ("kvm", *_HARDWARE_KVM)]
        lacks.append(
            "a hardware KVM module (kvm_intel or kvm_amd)"
            + (f"; KVM here is {', '.join(emulated)}, without hardware support" if emulated else "")
        )
    _open_kvm(device, lacks, found)
    return MicroVMProbe(not lacks, tuple(lacks), tuple(found))


@attrs.define(eq=False)
class MicroVMBackend:
    """The micro-VM sandbox's place: every call gets an error result, and nothing runs.

    The micro-VM backend is designed (docs/sandbox.md, "The micro-VM
    sandbox") but not built: register it under ``microvm`` so that a policy
    that asks for that level is refused, with what the machine lacks,
    instead of running weaker. The probe runs once, on the first call.

    Args:
        probe: what to check with (``probe_microvm`` by default).
    """

    probe: Any = probe_microvm
    _found: MicroVMProbe | None = attrs.field(default=None, init=False, repr=False)

    def detect(self) -> MicroVMProbe:
        """Probe the machine (once; later calls return the first answer)."""
        if self._found is None:
            self._found = self.probe()
        return self._found

    async def run(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Refuse the call, naming what is missing."""
        found = self.detect()
        details = {"sandbox": "microvm", "microvm": {"lacks": list(found.lacks)}}
        if not found.usable:
            raise ToolError(
                f"Tool '{ctx.tool_name}' was not run: it requires a micro-VM, and this "
                f"machine lacks {found.why_not()}.",
                details=details,
            )
        raise ToolError(
            f"Tool '{ctx.tool_name}' was not run: it requires a micro-VM; this machine has "
            "hardware virtualisation, but toolexec's micro-VM backend is not built yet "
            "(docs/sandbox.md).",
            details=details,
        )
