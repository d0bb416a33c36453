"""Where the ``toolexec exec`` command's tools come from, beside the built-ins.

``--tools module:attribute`` imports a user's module (the current directory
first on ``sys.path``, as ``python -m`` has it) and takes a ``ToolRegistry``,
a list or tuple of tools, or one tool from it. ``--mcp-config FILE`` opens
the MCP servers of a configuration file for the run. ``ToolSources``
registers every tool into the command's registry and remembers which
source gave each name, so a clash names both sides.

Everything here fails with ``UsageError``, whose message says what to
change: the command exits 2, as for a bad option.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from .._core._display import display_lines
from .._core._errors import RegistrationError
from .._core._registry import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

    from .._core._tool_protocol import ToolFactory
    from ..mcp import MCPServerConfig

__all__ = [
    "ToolSources",
    "UsageError",
    "load_mcp_config",
    "load_tools",
    "open_mcp_tools",
    "warnings_to",
]


class UsageError(Exception):
    """A problem the user can fix; the message says how. Exit code 2."""


# -- one registry, many sources ---------------------------------------------------


@attrs.define(eq=False)
class ToolSources:
    """A registry filled from several sources, each tool's source remembered."""

    registry: ToolRegistry = attrs.field(factory=ToolRegistry)
    origin: dict[str, str] = attrs.field(factory=dict)

    def claim(self, source: str) -> None:
        """Record ``source`` for the tools registered directly and not yet claimed."""
        for name in self.registry.names():
            self.origin.setdefault(name, source)

    def add(self, factory: ToolFactory, source: str) -> None:
        """Register one tool from ``source``; a name taken already is a ``UsageError``."""
        name = _name_of(factory)
        if name in self.origin:
            raise UsageError(
                f"tool {name!r} from {source} clashes with tool {name!r} from "
                f"{self.origin[name]}; rename one of them"
            )
        try:
            definition = self.registry.register(factory)
        except RegistrationError as exc:
            raise UsageError(f"{source}: {exc}") from None
        self.origin[definition.name] = source


def _name_of(factory: ToolFactory) -> str | None:
    try:
        return factory().definition.name
    except Exception:  # registering it reports the failure
        return None


# -- --tools module:attribute -------------------------------------------------------


def load_tools(spec: str) -> list[ToolFactory]:
    """Import ``module:attribute`` and return the tools it names, as factories.

    The attribute may be a ``ToolRegistry``, a list or tuple of tools, or one
    tool: a ``function_tool``, a ``Tool`` class, or a ``Tool`` instance.

    Raises:
        UsageError: a malformed spec, a module that does not import, a
            missing attribute, or a value that is not tools.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"--tools {spec!r}: expected MODULE:ATTRIBUTE, e.g. --tools mytools:TOOLS")
    value = _attribute(_import(module_name, spec), attribute, spec)
    if isinstance(value, ToolRegistry):
        return [entry.factory for entry in map(value.lookup, value.names()) if entry]
    if isinstance(value, list | tuple):
        return [_factory(item, f"{spec}[{i}]") for i, item in enumerate(value)]
    return [_factory(value, spec)]


def _import(name: str, spec: str) -> ModuleType:
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    importlib.invalidate_caches()  # a module written since the last import is found
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name + ".").startswith(exc.name + "."):
            raise UsageError(
                f"--tools {spec}: no module named {exc.name!r} in the current directory "
                f"({here}) or the installed packages; run toolexec from the directory "
                "that holds it, or install it"
            ) from None
        raise UsageError(f"--tools {spec}: importing {name!r} failed: {exc}") from None
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise UsageError(
            f"--tools {spec}: importing {name!r} raised {type(exc).__name__}: {exc} "
            f"({where.filename}, line {where.lineno})"
        ) from None


def _attribute(module: ModuleType, attribute: str, spec: str) -> Any:
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            found = sorted(n for n, v in vars(module).items() if _is_tools(n, v))
            offer = f"; it has: {', '.join(found)}" if found else ""
            raise UsageError(
                f"--tools {spec}: module {module.__name__!r} has no attribute {attribute!r}{offer}"
            )
        value = getattr(value, part)
    return value


def _is_tools(name: str, value: object) -> bool:
    """Whether a module attribute is worth offering after a misspelt one."""
    if name.startswith("_") or inspect.ismodule(value):
        return False
    if isinstance(value, list | tuple):
        return bool(value) and all(map(_is_tool, value))
    return isinstance(value, ToolRegistry) or _is_tool(value)


def _is_tool(value: object) -> bool:
    return _is_function_tool(value) or _tool_class(value) or _tool_instance(value)


def _is_function_tool(value: object) -> bool:
    # Imported here: ``_main`` imports this module for ``UsageError``, and
    # ``toolexec --help`` needs no tool machinery.
    from .._tools._function import FunctionTool

    return isinstance(value, FunctionTool)


def _tool_class(value: object) -> bool:
    return isinstance(value, type) and callable(getattr(value, "execute", None))


def _tool_instance(value: object) -> bool:
    return hasattr(value, "definition") and callable(getattr(value, "execute", None))


def _factory(value: object, where: str) -> ToolFactory:
    """``value`` as a registry factory, or a ``UsageError`` saying what it is instead."""
    if _is_function_tool(value) or _tool_class(value):
        return value  # type: ignore[return-value]
    if inspect.isfunction(value) or inspect.ismethod(value):
        raise UsageError(
            f"--tools {where}: {value.__qualname__} is a plain function, not a tool; "
            "decorate it with @function_tool"
        )
    if _tool_instance(value):
        return lambda: value  # type: ignore[return-value]
    raise UsageError(
        f"--tools {where}: expected a ToolRegistry, a list or tuple of tools, or a tool "
        f"(a function_tool, a Tool class or instance), got {type(value).__name__}"
    )


# -- --mcp-config FILE ---------------------------------------------------------------


def load_mcp_config(path: str) -> tuple[MCPServerConfig, ...]:
    """Read an MCP configuration file (JSON, either layout) into server configs.

    Raises:
        UsageError: the file is unreadable, not JSON, or not a configuration;
            or the ``mcp`` extra is not installed.
    """
    try:
        from ..mcp import parse_mcp_servers
    except ImportError as exc:
        raise UsageError(
            f"--mcp-config needs the MCP extra ({exc}); install it: pip install 'toolexec[mcp]'"
        ) from None
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read MCP config {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"MCP config {path} is not JSON: {exc}") from None
    try:
        return parse_mcp_servers(document)
    except ValueError as exc:
        raise UsageError(f"MCP config {path}: {exc}") from None


async def open_mcp_tools(
    stack: contextlib.AsyncExitStack,
    configs: tuple[MCPServerConfig, ...],
    sources: ToolSources,
    path: str,
) -> None:
    """Open the servers for the life of ``stack`` and add their tools to ``sources``.

    Raises:
        UsageError: a required server could not be opened.
    """
    from ..mcp import MCPConnectionError, open_mcp_servers

    registry = ToolRegistry()
    try:
        servers = await stack.enter_async_context(open_mcp_servers(registry, configs))
    except (MCPConnectionError, RegistrationError) as exc:
        hint = 'fix it, or mark it optional with "required": false'
        raise UsageError(f"MCP config {path}: {exc}\n({hint})") from None
    for server in servers.values():
        for name in server.tools:
            entry = registry.lookup(name)
            assert entry is not None
            sources.add(entry.factory, f"MCP server {server.name!r} ({path})")


class _StreamHandler(logging.Handler):
    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.WARNING)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        # Server names and stderr lines come from configuration and servers: escaped.
        self.stream.write(f"toolexec: warning: {display_lines(record.getMessage())}\n")
        self.stream.flush()


@contextlib.contextmanager
def warnings_to(stream: TextIO) -> Iterator[None]:
    """Print toolexec's warnings (a skipped MCP server or tool) on ``stream`` meanwhile."""
    logger = logging.getLogger("toolexec")
    handler = _StreamHandler(stream)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
