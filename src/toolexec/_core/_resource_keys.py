"""The value a tool declares what a call touches with: ``Resource``.

Pure values, no I/O; the scheduling lives in ``_resources`` (docs/resources.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

import attrs

__all__ = ["Declare", "Resource"]


def _key(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(
            f"Resource key must be a tuple of strings, got the string {value!r}; "
            f"use Resource.reads({value!r}) or key=({value!r},)"
        )
    if not isinstance(value, Iterable):
        raise TypeError(f"Resource key must be a tuple of strings, got {value!r}")
    key: tuple[object, ...] = tuple(value)
    for i, part in enumerate(key):
        if not isinstance(part, str) or not part:
            raise TypeError(
                f"Resource key parts must be non-empty strings; part {i} of {key!r} is {part!r}"
            )
    return key  # type: ignore[return-value]  # checked: every part is a str


def _flag(_inst: object, attr: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"Resource.{attr.name} must be a bool, got {value!r}")


@attrs.frozen
class Resource:
    """One thing a call touches, and whether it writes it.

    A key is a path in one hierarchy of resources: it covers itself and
    every key it is a prefix of, and the empty key is everything. Two
    accesses conflict when one key covers the other and at least one of them
    writes. Build them with ``Resource.reads(...)``, ``Resource.writes(...)``
    and ``Resource.everything()``::

        Resource.writes("db", "users")  # conflicts with Resource.reads("db") ...
        Resource.reads("db", "orders")  # ... but not with this

    The file tools use keys ``("file", <the real absolute path's parts>)``.
    """

    key: tuple[str, ...] = attrs.field(converter=_key)
    write: bool = attrs.field(default=False, validator=_flag)

    @classmethod
    def reads(cls, *key: str) -> Resource:
        """Reading ``key`` (and everything below it)."""
        return cls(key, False)

    @classmethod
    def writes(cls, *key: str) -> Resource:
        """Writing ``key`` (and everything below it)."""
        return cls(key, True)

    @classmethod
    def everything(cls, *, write: bool = True) -> Resource:
        """Everything: what a shell command may touch."""
        return cls((), write)

    def conflicts_with(self, other: Resource) -> bool:
        """Whether this access and ``other`` must not overlap (or be reordered)."""
        if not (self.write or other.write):
            return False
        a, b = self.key, other.key
        return a == b[: len(a)] or b == a[: len(b)]


#: What a tool declares: ``(arguments) -> the resources the call touches``. It
#: is called in a worker thread when the call's keyed run starts, so it may
#: block briefly (resolving paths on disk, say).
Declare: TypeAlias = Callable[[Mapping[str, Any]], Iterable[Resource]]
