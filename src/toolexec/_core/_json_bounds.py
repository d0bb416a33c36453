"""Decode JSON a peer sent, within bounds checked before any value is built.

Theory of operation. ``json.loads`` builds every value of a text before its
caller can look at one: a 16 MiB line of ``[],`` repeated becomes about five
million lists, and only then does a check on the result run. Every reader of
JSON from another process (the IPC supervisor and clients, the remote
backend and worker) therefore decodes through ``loads_bounded`` (or checks
with ``check_bounds`` and decodes with ``DECODER``), which refuses, before
decoding, a text that would build more than ``MAX_JSON_VALUES`` values or
nest deeper than ``MAX_JSON_DEPTH`` levels; and, while decoding, the words
``NaN``, ``Infinity`` and ``-Infinity`` and a number too large for a float
(``1e999``, which ``float`` reads as infinity): JSON has no such numbers.

Counting, in passes over the bytes at C speed (no Python loop per byte):

- values: each array or object opens with ``[`` or ``{``, and each element
  of one after its first follows a ``,``; so the count of those three
  characters outside strings, plus one, bounds the containers and elements
  the text holds (an object's key and value count as one element). A text
  no longer than the bound cannot exceed it; a longer one is counted raw
  first (``bytes.count``), an upper bound, and only when that is over the
  bound are its strings cut out (one regular-expression pass) and the
  characters counted again.
- depth: a text of ``2 * MAX_JSON_DEPTH`` bytes or fewer, or with no more
  brackets than ``MAX_JSON_DEPTH``, cannot nest deeper. Otherwise its
  strings are cut out, everything but brackets deleted (``bytes.translate``),
  and innermost pairs removed ``MAX_JSON_DEPTH`` times (``bytes.replace``,
  one level per pass); a pair still there was nested deeper than that.

So the work before decoding is linear in the text's length, with a factor
of at most ``MAX_JSON_DEPTH`` passes over its brackets alone (which the
value bound keeps under ``MAX_JSON_VALUES``); a typical short line pays a
length comparison.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NoReturn

__all__ = [
    "DECODER",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "JsonBoundsError",
    "check_bounds",
    "loads_bounded",
]

#: The deepest nesting of arrays and objects a peer's JSON may have.
MAX_JSON_DEPTH = 128
#: The most arrays, objects and elements of them a peer's JSON text may build.
MAX_JSON_VALUES = 250_000

# A JSON string, escapes included (an unfinished one does not match: its
# characters are then counted, which only over-counts a text that is not JSON).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


class JsonBoundsError(ValueError):
    """A JSON text over a bound (values or depth); the message says which and the limit."""


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON; numbers must be finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} is too large for a number; numbers must be finite")
    return value


#: The one decoder for peers' JSON: refuses NaN, infinities and ``1e999``.
#: (Built once: ``json.loads`` with any option builds a new decoder per call.)
DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _outside_strings(raw: bytes) -> bytes:
    return _STRING.sub(b"", raw) if b'"' in raw else raw


def _values(raw: bytes) -> int:
    return raw.count(b"[") + raw.count(b"{") + raw.count(b",")


def _too_deep(raw: bytes, max_depth: int) -> bool:
    brackets = _outside_strings(raw).translate(_SQUARE, _NOT_BRACKETS)
    for _ in range(max_depth):
        if b"[]" not in brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return b"[]" in brackets  # unbalanced brackets without a pair: the decoder's to refuse


def check_bounds(
    raw: bytes, *, max_values: int = MAX_JSON_VALUES, max_depth: int = MAX_JSON_DEPTH
) -> None:
    """Refuse a JSON text that would build too many values or nest too deeply.

    Only the text's characters are looked at, not its validity: a text
    within the bounds may still fail to decode.

    Raises:
        JsonBoundsError: over ``max_values`` containers and elements, or
            nested deeper than ``max_depth``; the message gives the limit.
    """
    if len(raw) > max_values and _values(raw) > max_values:
        values = _values(_outside_strings(raw))
        if values > max_values:
            raise JsonBoundsError(
                f"the JSON holds about {values + 1} values (arrays, objects and their "
                f"elements), over the limit of {max_values}; send less at once"
            )
    if (
        len(raw) > 2 * max_depth
        and raw.count(b"[") + raw.count(b"{") > max_depth
        and _too_deep(raw, max_depth)
    ):
        raise JsonBoundsError(
            f"the JSON is nested more than {max_depth} levels deep (the limit); send flatter data"
        )


def loads_bounded(
    text: bytes | str, *, max_values: int = MAX_JSON_VALUES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Decode a peer's JSON text within the bounds (``check_bounds``), finite numbers only.

    Example::

        loads_bounded(b'{"a": [1, 2.5]}')   # {'a': [1, 2.5]}
        loads_bounded("1e999")               # ValueError: ... must be finite

    Raises:
        ValueError: the text is not UTF-8 JSON (``json.JSONDecodeError``,
            ``UnicodeDecodeError``), is over a bound (``JsonBoundsError``),
            holds NaN, an infinity or an integer of more digits than Python
            converts, or nests deeper than the interpreter can decode.
    """
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    check_bounds(raw, max_values=max_values, max_depth=max_depth)
    try:
        return DECODER.decode(text if isinstance(text, str) else text.decode("utf-8"))
    except RecursionError:
        raise JsonBoundsError("the JSON is nested too deeply to decode") from None
