"""Local ``$ref``s: JSON Pointers (RFC 6901) in a URI fragment, resolved in one document.

A local reference is ``#`` followed by a pointer: the fragment is
percent-decoded first (``#/a%20b`` names the key ``a b``), then split at
``/``; in each token ``~1`` stands for ``/`` and ``~0`` for ``~``; a token
steps into an object by key, or into an array by a decimal index without
leading zeros (``#/components/schemas/A/allOf/0``). ``-`` (one past the end
of an array) points to nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

__all__ = ["is_local", "resolve", "tokens"]

_INDEX = re.compile(r"0|[1-9][0-9]*")


def is_local(ref: object) -> bool:
    """Whether ``ref`` is a reference into the document it is in (``#`` or ``#/...``)."""
    return isinstance(ref, str) and (ref == "#" or ref.startswith("#/"))


def tokens(ref: str) -> list[str]:
    """The reference tokens of a local reference (``#/a~1b/0`` -> ``["a/b", "0"]``)."""
    if not is_local(ref):
        raise LookupError(f"{ref!r} is not a local reference")
    if ref == "#":
        return []
    return [raw.replace("~1", "/").replace("~0", "~") for raw in unquote(ref[2:]).split("/")]


def resolve(document: Any, ref: str) -> Any:
    """What the local reference ``ref`` points to in ``document``; ``LookupError`` if nothing."""
    node = document
    for token in tokens(ref):
        if isinstance(node, Mapping):
            if token not in node:
                raise LookupError(ref)
            node = node[token]
        elif isinstance(node, list) and _INDEX.fullmatch(token) and int(token) < len(node):
            node = node[int(token)]
        else:
            raise LookupError(ref)
    return node
