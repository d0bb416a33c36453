"""Resource keys for paths in a workspace: what a file tool's call touches.

The user-facing story: docs/resources.md.

Theory of operation. A path argument becomes the key ``("file", <parts of
the real absolute path>)``, found by resolving the path exactly as the
workspace resolves it (links inside the root followed, ``..`` applied on
the directories really walked), so ``a/../b``, ``./b`` and a link to ``b``
are one key. Keys are hierarchical, so a directory's key covers everything
below it: listing or searching ``src`` conflicts with writing ``src/x``.

Paths that do not resolve get a wider key, never a narrower one:

* a path through a directory that does not exist yet (``new/dir/f``): the
  key of the first missing directory, since writing the path creates it and
  reading it reports it missing. When that cannot be told safely (the path
  has ``..`` or is absolute, or the missing name is a dangling link), the
  whole workspace;
* any other refusal (outside the root, a file where a directory should be,
  too many links): the whole workspace.

Keys are computed when the call's keyed run starts (in a worker thread).
The file tools never create or remove links or directories other than
missing parents, so the keys stay true while the run lasts; a shell command
may, which is why it declares everything (see ``_resources``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._core._resource_keys import Resource
from .._core._workspace_errors import WorkspaceError, WorkspaceErrorKind

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._core._types import SideEffects
    from ._workspace import Workspace

__all__ = ["everything_for", "path_key", "path_resources"]


def _parts(relative: str) -> tuple[str, ...]:
    return tuple(p for p in relative.split("/") if p not in ("", "."))


def _root_key(workspace: Workspace) -> tuple[str, ...]:
    real = os.path.realpath(workspace.root)
    return ("file", *(p for p in real.split(os.sep) if p))


def path_key(workspace: Workspace, path: object) -> tuple[str, ...]:
    """The key of ``path`` in ``workspace`` (blocking: call it in a worker thread)."""
    root = _root_key(workspace)
    if not isinstance(path, str):
        return root
    try:
        return root + _parts(workspace.resolve_sync(path))
    except WorkspaceError as exc:
        if exc.kind is WorkspaceErrorKind.NOT_FOUND:
            missing = _first_missing(workspace, path)
            if missing is not None:
                return root + missing
        return root


def _first_missing(workspace: Workspace, path: str) -> tuple[str, ...] | None:
    """The workspace-relative parts of the first missing directory of ``path``.

    ``None`` when that cannot be told from the names alone (``..`` or an
    absolute path), or the missing name is a link that leads elsewhere.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts:
        return None
    for k in range(len(parts) - 1, -1, -1):
        prefix = "/".join(parts[:k]) or "."
        try:
            os.close(workspace.open_dir(prefix))
        except WorkspaceError:
            continue
        try:
            here = _parts(workspace.resolve_sync(prefix))
            missing = _parts(workspace.resolve_sync(f"{prefix}/{parts[k]}"))
        except WorkspaceError:
            return None
        return missing if missing == (*here, parts[k]) else None
    return None


def path_resources(
    path_arguments: Mapping[str, str], workspace: Workspace
) -> Callable[[Mapping[str, Any]], list[Resource]]:
    """A tool's ``resources``: each path argument, read (``"r"``) or written (``"w"``).

    An absent path argument (``list_dir`` without ``path``) is keyed as the
    whole workspace.
    """
    modes = tuple((name, "w" in mode) for name, mode in path_arguments.items())

    def resources(arguments: Mapping[str, Any]) -> list[Resource]:
        return [
            Resource(
                path_key(workspace, arguments[name]) if name in arguments else _root_key(workspace),
                write,
            )
            for name, write in modes
        ]

    return resources


def everything_for(
    classifier: Callable[[Mapping[str, Any]], SideEffects] | None,
) -> Callable[[Mapping[str, Any]], list[Resource]]:
    """A shell's ``resources``: everything, read only when the classifier says so."""

    def resources(arguments: Mapping[str, Any]) -> list[Resource]:
        reads = False
        if classifier is not None:
            try:
                reads = classifier(arguments).is_read_only
            except Exception:
                reads = False
        return [Resource.everything(write=not reads)]

    return resources
