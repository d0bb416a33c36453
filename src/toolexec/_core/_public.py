"""Make every public object name its public home, as trio does.

Theory of operation. Objects are defined in private modules
(``toolexec._core._types``) and re-exported by public ones (``toolexec``,
``toolexec.policy``...). Each public module ends with
``fixup_module_metadata(__name__, names)``, which sets ``__module__`` of
each named class and function, and of the methods a class defines, to that
public module. Tracebacks, reprs of type aliases, ``help()`` and the API
page then show ``toolexec.ToolCall`` rather than ``toolexec._core._types.ToolCall``,
and pickle finds classes (enum members, frozen values) where users import
them from.

Only objects still naming a private module are touched, so a module that
re-exports names another public module already claimed must leave them out
of ``names``. Type aliases (unions, ``Callable[...]``) have no module of
their own and are left alone.

``typing.get_type_hints`` resolves a class's string annotations (this
package uses ``from __future__ import annotations``) in the namespace of
``sys.modules[cls.__module__]``. Before the module is rewritten, each
annotation that evaluates in the defining module is replaced by its value,
so hints that resolved before still resolve; names imported only under
``TYPE_CHECKING`` stay strings, as unresolvable as they were.

The price, as in trio: ``inspect.getsource`` and ``inspect.getfile`` find a
class through its module, so for a public class they look in the public
module and fail. Functions and methods keep their code objects' file, and
tracebacks are unaffected.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType

__all__ = ["fixup_module_metadata"]


def _is_private(module: str) -> bool:
    """``toolexec._core._types`` and ``toolexec.mcp._server`` are private;
    ``toolexec.mcp`` is not."""
    head, *rest = module.split(".")
    return head == "toolexec" and any(part.startswith("_") for part in rest)


def fixup_module_metadata(module_name: str, names: Iterable[str]) -> None:
    """Set ``__module__`` of ``names`` in module ``module_name`` to that module."""
    namespace = vars(sys.modules[module_name])
    for name in names:
        _fix(namespace[name], module_name)


def _fix(obj: object, public: str) -> None:
    private = getattr(obj, "__module__", None)
    if not isinstance(private, str) or not _is_private(private):
        return
    if isinstance(obj, type):
        _resolve_annotations(obj, sys.modules[private])
    obj.__module__ = public
    if isinstance(obj, type):
        for member in vars(obj).values():
            for function in _functions_of(member):
                if getattr(function, "__module__", None) == private:
                    _fix(function, public)


def _functions_of(member: object) -> tuple[object, ...]:
    """The functions (or nested classes) behind one class attribute."""
    if isinstance(member, property):
        return tuple(f for f in (member.fget, member.fset, member.fdel) if f is not None)
    if isinstance(member, staticmethod | classmethod):
        return (member.__func__,)
    if isinstance(member, functools.cached_property):
        return (member.func,)
    if callable(member):
        return (member,)
    return ()


def _resolve_annotations(cls: type, module: ModuleType) -> None:
    annotations = inspect.get_annotations(cls)  # the class's own, as a copy
    if not annotations:
        return
    namespace = {**vars(cls), **vars(module)}  # the module wins, as in get_type_hints
    cls.__annotations__ = {key: _evaluated(value, namespace) for key, value in annotations.items()}


def _evaluated(annotation: Any, namespace: dict[str, Any]) -> Any:
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, namespace)
    except Exception:
        return annotation  # a name only imported for type checkers
