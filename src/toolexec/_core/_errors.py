"""Exceptions toolexec raises, and the one a tool raises to fail a call.

The tree::

    ToolexecError                      root of everything toolexec raises
    +-- RegistrationError (ValueError) a bad tool definition or schema; raised
    |                                  when you register, never per call
    +-- InternalError                  a bug in toolexec: please report it
    ToolError                          raised by a tool to fail its own call
    +-- WorkspaceError                 a path refused by a Workspace (names the
                                       workspace-relative path and why; its
                                       ``kind`` says why as a value)

Nothing raises out of ``ToolExecutor`` for bad model input or a failing
tool: those become error results. Only misuse by the host (a bad
registration, a bad config) raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._types import ErrorClass

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["InternalError", "RegistrationError", "ToolError", "ToolexecError", "bare_interrupt"]


class ToolexecError(Exception):
    """Root of the exceptions toolexec raises."""


class RegistrationError(ToolexecError, ValueError):
    """A tool cannot be registered: the message says what and where."""


class InternalError(ToolexecError):
    """toolexec broke one of its own invariants. Please report it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} (this is a bug in toolexec; please report it)")


class ToolError(Exception):
    """Raised by a tool to fail its call with a message the model should read.

    The message is shown to the model verbatim; ``error_class`` defaults to
    ``execution_error``; ``details`` become the result's details, for the
    host (a shell command that timed out still reports its partial byte
    counts). Any other exception a tool raises also becomes an
    ``execution_error`` result, with the exception type and message.
    """

    def __init__(
        self,
        message: str,
        *,
        error_class: ErrorClass = ErrorClass.EXECUTION_ERROR,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_class = error_class
        self.details: Mapping[str, Any] = {} if details is None else details


def bare_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` inside ``exc`` (itself, or in a group), if any.

    The executor re-raises it bare, so a host's ``except KeyboardInterrupt``
    sees it whatever the size of the batch that was running.
    """
    if isinstance(exc, KeyboardInterrupt):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = bare_interrupt(inner)
            if found is not None:
                return found
    return None
