"""Helpers for testing code built on toolexec: a scripted model, and ordering checks.

``ScriptedModel`` answers from a list of steps, one per model call, so an
agent loop (or a whole tree of them) runs the same way every time without an
LLM::

    from toolexec.testing import ScriptedModel, tool_call

    model = ScriptedModel([
        [tool_call("search", {"query": "trio"})],          # turn 1: one call
        lambda messages: f"Found: {messages[-1].tool_results[0].text}",  # turn 2
    ])

``check_ordering`` runs random batches over your own tools through your
executor's configuration and checks the executor's promises against an
in-order reference (one result per call in order, caps, what reads see,
serial mutators alone, nothing left over); ``OrderingMachine`` does the
same for batches one after another on one executor; ``check_batch`` checks
one batch you wrote; ``tool_calls`` and ``tool_arguments`` are the
hypothesis strategies underneath (see ``docs/testing.md``).

Theory of operation. Hypothesis is a test dependency, not a dependency of
toolexec: ``ScriptedModel``, ``tool_call``, ``check_batch`` and
``OrderingError`` are imported with this module, while ``check_ordering``,
``OrderingMachine``, ``tool_calls`` and ``tool_arguments`` load their
private modules (which import hypothesis) the first time one of them is
used, through the module ``__getattr__``. Without hypothesis installed,
importing this module works and only those four names raise
``ImportError``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._core._public import fixup_module_metadata as _fixup_module_metadata
from ._batchcheck import OrderingError, check_batch
from ._checks import Expected
from ._scripted import ScriptedModel, ScriptedRequest, ScriptExhaustedError, Step, tool_call

if TYPE_CHECKING:
    from ._checker import check_ordering
    from ._machine import OrderingMachine
    from ._schemas import tool_arguments
    from ._strategies import tool_calls

__all__ = [
    "Expected",
    "OrderingError",
    "OrderingMachine",
    "ScriptExhaustedError",
    "ScriptedModel",
    "ScriptedRequest",
    "Step",
    "check_batch",
    "check_ordering",
    "tool_arguments",
    "tool_call",
    "tool_calls",
]

# The names that need hypothesis, and the private module holding each.
_LAZY = {
    "check_ordering": "._checker",
    "OrderingMachine": "._machine",
    "tool_arguments": "._schemas",
    "tool_calls": "._strategies",
}


def __getattr__(name: str) -> Any:
    """Load a name that needs hypothesis the first time it is used."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(_LAZY[name], __name__)
    except ImportError as exc:
        raise ImportError(
            f"toolexec.testing.{name} needs hypothesis: pip install hypothesis (or toolexec[test])"
        ) from exc
    value = getattr(module, name)
    globals()[name] = value
    _fixup_module_metadata(__name__, [name])
    return value


_fixup_module_metadata(__name__, [n for n in __all__ if n not in _LAZY])
