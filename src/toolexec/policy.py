"""Policy: the gate every call passes before it runs.

A ``ToolPolicy`` decides per call: ``Allow`` (carrying an ``ExecutionGrant``:
which backend runs the call, and its limits), ``Deny(reason)`` or ``Ask``;
``Decision`` is their union. Built in:

- ``RulePolicy``: ordered ``Rule`` values matching a tool name and its
  arguments (``Equals``, ``Prefix``, ``Regex``, ``PathGlob``,
  ``CommandPrefix``, or any ``Matcher``); the first match decides.
- ``CapabilityPolicy``: per agent, the tools and the workspace paths
  (``PathGrant``) it may use, as ``Capabilities``.
- ``ComposedPolicy``: several policies at once; any deny wins.

Hooks sit at the same gate: a ``CallHook`` sees each call before it is
routed and may ``Skip`` it or ``Rewrite`` its arguments (``HookDecision``),
and sees every result after.

``ToolPolicy``, ``AllowAll``, ``Allow``, ``Deny`` and ``Ask`` are also
exported by ``toolexec``; they are the same objects, listed here so a
policy author finds everything in one place.

Example::

    from toolexec.policy import CommandPrefix, Rule, RulePolicy

    policy = RulePolicy(
        [Rule("allow", "shell", {"command": CommandPrefix("git status")})],
        default="ask",
    )
"""

from __future__ import annotations

from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._gate._hooks import CallHook, HookDecision, Rewrite, Skip
from ._gate._policy import Allow, AllowAll, Ask, Decision, Deny, ExecutionGrant, ToolPolicy
from ._gate._rules import (
    Capabilities,
    CapabilityPolicy,
    CommandPrefix,
    ComposedPolicy,
    Equals,
    Matcher,
    PathGlob,
    PathGrant,
    Prefix,
    Regex,
    Rule,
    RulePolicy,
)

__all__ = [
    "Allow",
    "AllowAll",
    "Ask",
    "CallHook",
    "Capabilities",
    "CapabilityPolicy",
    "CommandPrefix",
    "ComposedPolicy",
    "Decision",
    "Deny",
    "Equals",
    "ExecutionGrant",
    "HookDecision",
    "Matcher",
    "PathGlob",
    "PathGrant",
    "Prefix",
    "Regex",
    "Rewrite",
    "Rule",
    "RulePolicy",
    "Skip",
    "ToolPolicy",
]

# Exported by ``toolexec`` too, their home (and their ``__module__``).
_ROOT_NAMES = frozenset({"Allow", "AllowAll", "Ask", "Deny", "ToolPolicy"})

_fixup_module_metadata(__name__, [name for name in __all__ if name not in _ROOT_NAMES])
