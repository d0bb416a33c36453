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

Lazy names. ``import toolexec`` must stay cheap (``benchmarks/bench_startup.py``),
so the root imports its light values at once and the rest (the executor,
agents, tools, which need trio) the first time one is used: ``lazy_names``
builds the module's ``__getattr__`` (PEP 562) and ``__dir__`` from a map of
name to private module, and the root's tiers (``toolexec.policy``...) are
imported on first use the same way. A lazy name is bound and fixed up when
its private module is loaded and then either it is used or any public module
finishes importing (``bind_loaded``, run by ``fixup_module_metadata``), so a
root object loaded by way of another public module still names ``toolexec``.
A tier's own names take their public module when the tier is imported.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from types import ModuleType

__all__ = ["bind_loaded", "fixup_module_metadata", "lazy_names"]

# Public module -> {name: private module} of its lazy names not bound yet.
_PENDING: dict[str, dict[str, str]] = {}


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
    bind_loaded()


def lazy_names(
    module_name: str, names: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for public module ``module_name``.

    Args:
        module_name: the public module (its ``__name__``).
        names: each lazy name, mapped to the absolute name of the private
            module defining it (``"toolexec._core._executor"``).
        submodules: public submodules reached as attributes, imported on
            first use (``toolexec.policy``).
    """
    _PENDING[module_name] = dict(names)
    modules = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        if name in modules:
            return importlib.import_module(f"{module_name}.{name}")  # binds the attribute
        if name not in names:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        private = importlib.import_module(names[name])
        bind_loaded()
        return getattr(private, name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module_name]), *names, *modules})

    return __getattr__, __dir__


def bind_loaded() -> None:
    """Bind and fix up every lazy name whose private module is loaded."""
    for public, pending in _PENDING.items():
        namespace = vars(sys.modules[public])
        for name, private in list(pending.items()):
            module = sys.modules.get(private)
            if module is None or _initializing(module) or name not in vars(module):
                continue
            namespace[name] = vars(module)[name]
            _fix(namespace[name], public)
            del pending[name]


def _initializing(module: ModuleType) -> bool:
    """Whether ``module`` is still running its body (imported in a cycle)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


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
