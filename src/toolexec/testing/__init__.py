"""Helpers for testing code built on toolexec: a deterministic, scripted model.

``ScriptedModel`` answers from a list of steps, one per model call, so an
agent loop (or a whole tree of them) runs the same way every time without an
LLM::

    from toolexec.testing import ScriptedModel, tool_call

    model = ScriptedModel([
        [tool_call("search", {"query": "trio"})],          # turn 1: one call
        lambda messages: f"Found: {messages[-1].tool_results[0].text}",  # turn 2
    ])

When the script runs out, ``respond`` raises ``ScriptExhaustedError`` naming
the conversation's last message, so a loop that runs longer than the test
expected fails loudly instead of hanging or inventing answers.
"""

from __future__ import annotations

from .._public import fixup_module_metadata as _fixup_module_metadata
from ._scripted import ScriptedModel, ScriptedRequest, ScriptExhaustedError, Step, tool_call

__all__ = ["ScriptExhaustedError", "ScriptedModel", "ScriptedRequest", "Step", "tool_call"]

_fixup_module_metadata(__name__, __all__)
