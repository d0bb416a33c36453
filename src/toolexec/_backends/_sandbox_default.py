"""The sandbox by default: ``SandboxByDefault`` (docs/sandbox.md, "The sandbox by default").

A policy wrapper: whatever its inner policy allows (or asks about) on the
host, for a tool the subprocess sandbox can run (the ``shell`` tool, and
function tools importable by name), it sends to the sandbox instead, with
the workspace writable as the host shell's is. What the inner policy sends
elsewhere, denies, and every other tool, it leaves alone. Whether a tool
can run there is decided once per tool, from its registered factory; no
tool is made to decide it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._core._errors import ToolError
from .._core._registry import ToolRegistry
from .._gate._policy import HOST, Allow, AllowAll, Ask
from .._tools._function import FunctionTool
from .._tools._shell import ShellTool
from ._sandbox_codec import locate

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core._types import ToolDefinition
    from .._gate._policy import Decision, ToolPolicy

__all__ = ["SandboxByDefault"]

#: The limits a call sent to the sandbox by default gets, under its grant's own.
DEFAULT_LIMITS = {"workspace": "rw"}


@attrs.define(eq=False)
class SandboxByDefault:
    """A policy that runs the shell and importable function tools in the sandbox.

    Wrap the policy you have; register a ``SubprocessBackend`` under the
    name ``sandbox`` names (``"subprocess"``), warm so that a call costs
    little, and close it when done::

        async with SubprocessBackend(warm=4) as sandbox:
            executor = ToolExecutor(
                registry,
                policy=SandboxByDefault(registry, policy),
                backends={"subprocess": sandbox},
            )

    Each call the inner policy allows (or asks about) on the host, of the
    ``shell`` tool or of a function tool whose function is defined at a
    module's top level, gets the grant's sandbox set to ``sandbox`` and the
    workspace writable (``limits`` under the grant's own): it runs at the
    best isolation level the machine has, reported in
    ``details["sandbox"]``. Other tools, and calls the inner policy sends
    elsewhere or denies, are left as the inner policy decided.

    Args:
        registry: the tools, looked up by name to tell which can run there.
        inner: the policy deciding first (``AllowAll()`` by default).
        sandbox: the backend's name.
        limits: the limits a call gets in the sandbox, under the grant's own.
    """

    registry: ToolRegistry = attrs.field(validator=attrs.validators.instance_of(ToolRegistry))
    inner: ToolPolicy = attrs.field(factory=AllowAll)
    sandbox: str = "subprocess"
    limits: Mapping[str, Any] = attrs.field(factory=lambda: dict(DEFAULT_LIMITS))
    _fits: dict[str, bool] = attrs.field(factory=dict, init=False, repr=False)

    def decide(
        self, definition: ToolDefinition, arguments: Mapping[str, Any], agent_path: str
    ) -> Decision:
        """The inner policy's decision, sent to the sandbox where the tool can run there."""
        decision = self.inner.decide(definition, arguments, agent_path)
        if not isinstance(decision, Allow | Ask) or decision.grant.sandbox != HOST:
            return decision
        if not self.runs_there(definition.name):
            return decision
        grant = attrs.evolve(
            decision.grant,
            sandbox=self.sandbox,
            limits={**self.limits, **decision.grant.limits},
        )
        return attrs.evolve(decision, grant=grant)

    def runs_there(self, name: str) -> bool:
        """Whether the tool registered as ``name`` can run in the sandbox (once per name)."""
        fits = self._fits.get(name)
        if fits is None:
            fits = self._fits[name] = _fits(self.registry, name)
        return fits


def _fits(registry: ToolRegistry, name: str) -> bool:
    entry = registry.lookup(name)
    if entry is None:
        return False
    factory = entry.factory
    if isinstance(factory, ShellTool):
        return True
    if not isinstance(factory, FunctionTool):
        return False
    try:
        locate(factory)
    except ToolError:
        return False
    return True
