"""Tools that come with toolexec, and the factory type a registry takes.

``toolexec.register_builtin_tools(registry, workspace)`` registers them:
``read_file``, ``write_file``, ``edit_file``, ``list_dir`` and
``search_files`` over a ``Workspace``, and ``echo``; with ``shell=True``
also ``shell`` (bash in the workspace, its own process group, an
allow-listed environment). To tune
one, register its class yourself. ``classify_shell_command`` is the
read-only test ``ShellTool`` routes by; ``DirEntry`` is what
``Workspace.list_dir`` returns. Every class here is a ``ToolFactory``: a
zero-argument callable returning a ``Tool``, which is what
``ToolRegistry.register`` takes.

Example::

    from toolexec import register_builtin_tools
    from toolexec.tools import ShellTool

    register_builtin_tools(registry, workspace)  # no shell unless shell=True
    registry.register(ShellTool(workspace, default_timeout=30))
"""

from __future__ import annotations

from ._core._public import fixup_module_metadata as _fixup_module_metadata
from ._core._tool_protocol import ToolFactory
from ._tools._builtins import EchoTool
from ._tools._file_tools import EditFileTool, ListDirTool, ReadFileTool, WriteFileTool
from ._tools._search import SearchFilesTool
from ._tools._shell import ShellTool
from ._tools._shell_classify import classify_shell_command
from ._tools._tree import DirEntry

__all__ = [
    "DirEntry",
    "EchoTool",
    "EditFileTool",
    "ListDirTool",
    "ReadFileTool",
    "SearchFilesTool",
    "ShellTool",
    "ToolFactory",
    "WriteFileTool",
    "classify_shell_command",
]

_fixup_module_metadata(__name__, __all__)
