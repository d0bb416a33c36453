"""JSON from peers is decoded within bounds: values, depth, finite numbers.

``_core._json_bounds`` itself, then every reader that decodes a peer's JSON
through it: the IPC supervisor's and clients' lines, the remote host's
response lines and refusals, and the remote worker's request bodies. Each
hostile text is refused by each of them with the reader's own error.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolexec._backends._remote import parse_error
from toolexec._backends._remote_wire import WireError, encode_line, parse_line, parse_request
from toolexec._core._json_bounds import (
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    JsonBoundsError,
    check_bounds,
    loads_bounded,
)
from toolexec._ipc._client import parse_answer
from toolexec.ipc import ProtocolError, decode_message

if TYPE_CHECKING:
    from collections.abc import Callable

#: 16 MiB of ``[],``: about five million lists, were it decoded.
LIST_BOMB = b"[" + b"[]," * ((16 << 20) // 3) + b"[]]"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# -- the bounds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (b'{"a": [1, 2.5, "x"]}', {"a": [1, 2.5, "x"]}),
        ("1.7976931348623157e308", 1.7976931348623157e308),  # the largest float is finite
        (b"-0.0", -0.0),
        (b'"NaN"', "NaN"),  # a string, not the constant
        (nested(MAX_JSON_DEPTH), json.loads(nested(MAX_JSON_DEPTH))),
        (b"[" + b"0," * (MAX_JSON_VALUES - 2) + b"0]", [0] * (MAX_JSON_VALUES - 1)),
        # brackets and commas inside strings are not values
        (json.dumps(["[{," * MAX_JSON_VALUES]).encode(), ["[{," * MAX_JSON_VALUES]),
        (json.dumps({"k": '\\"[' * 500}).encode(), {"k": '\\"[' * 500}),
    ],
)
def test_texts_within_the_bounds_decode(text: bytes | str, value: Any) -> None:
    assert loads_bounded(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"1e999", "numbers must be finite"),
        (b"-1e999", "numbers must be finite"),
        (b'{"x": [0.5, 1E+400]}', "numbers must be finite"),
        (b"NaN", "NaN is not JSON"),
        (b"[Infinity]", "Infinity is not JSON"),
        (b"-Infinity", "-Infinity is not JSON"),
        (nested(MAX_JSON_DEPTH + 1), f"nested more than {MAX_JSON_DEPTH} levels"),
        (b'{"a": ' * 200 + b"1" + b"}" * 200, f"nested more than {MAX_JSON_DEPTH} levels"),
        (nested(100_000), f"nested more than {MAX_JSON_DEPTH} levels"),
        (b"[" + b"0," * MAX_JSON_VALUES + b"0]", f"over the limit of {MAX_JSON_VALUES}"),
        (LIST_BOMB, f"over the limit of {MAX_JSON_VALUES}"),
        (b"[" + b"{}," * MAX_JSON_VALUES + b"{}]", f"over the limit of {MAX_JSON_VALUES}"),
    ],
)
def test_texts_over_a_bound_or_not_finite_are_refused(text: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        loads_bounded(text)
    with pytest.raises(ValueError, match=message):
        loads_bounded(text.decode())


def test_a_bomb_is_refused_before_anything_is_built() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(JsonBoundsError):
            check_bounds(LIST_BOMB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The five million lists would take hundreds of MiB; the check holds none of them
    # (cutting strings out would copy the text: this one has none).
    assert peak < 1 << 20, peak


def test_unbalanced_brackets_are_the_decoders_to_refuse() -> None:
    text = b"]" * 300 + b"[" * 300
    check_bounds(text)  # no pair nested too deep: it is simply not JSON
    with pytest.raises(json.JSONDecodeError):
        loads_bounded(text)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=40,
    )
)
def test_check_bounds_agrees_with_the_decoded_value(value: Any) -> None:
    text = json.dumps(value).encode()

    def depth(v: Any) -> int:
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        own = 1 if isinstance(v, dict | list) else 0
        return own + max(map(depth, children), default=0)

    for limit in (1, 2, 3, 5):
        try:
            check_bounds(text, max_depth=limit, max_values=10**9)
        except JsonBoundsError:
            assert depth(value) > limit
        else:
            assert depth(value) <= limit
    assert loads_bounded(text) == value


# -- every reader ----------------------------------------------------------------------


def _ipc_call(args: bytes) -> bytes:
    return b'{"op": "tool_call", "tool_call_id": "a", "tool": "echo", "args": {"x": ' + args + b"}}"


def _ipc_answer(result: bytes) -> bytes:
    return b'{"op": "tool_response", "tool_call_id": "a", "ok": true, "result": ' + result + b"}"


def _remote_line(value: bytes) -> bytes:
    return b'{"type": "heartbeat", "x": ' + value + b"}"


def _remote_request(value: bytes) -> bytes:
    return b'{"id": "r", "call_id": "c", "tool": "t", "arguments": {"x": ' + value + b"}}"


def _decode_message(line: bytes) -> object:
    return decode_message(line)


def _parse_error(body: bytes) -> object:
    return parse_error((b'{"error": "busy", "x": ' + body + b"}").decode())


READERS: dict[str, tuple[Callable[[bytes], object], Callable[[bytes], bytes], type[Exception]]] = {
    "ipc supervisor": (_decode_message, _ipc_call, ProtocolError),
    "ipc client": (parse_answer, _ipc_answer, ProtocolError),
    "remote host line": (parse_line, _remote_line, WireError),
    "remote worker request": (parse_request, _remote_request, WireError),
    "remote host refusal": (_parse_error, lambda v: v, ValueError),
}

HOSTILE = {
    "1e999": b"1e999",
    "-1e999": b"-1e999",
    "Infinity": b"Infinity",
    "NaN": b"NaN",
    "deep": nested(MAX_JSON_DEPTH + 1),
    "very deep": nested(50_000),
    "many values": b"[" + b"[]," * MAX_JSON_VALUES + b"[]]",
}


@pytest.mark.parametrize("hostile", list(HOSTILE))
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_what_is_over_a_bound_or_not_finite(reader: str, hostile: str) -> None:
    read, wrap, error = READERS[reader]
    read(wrap(b"[1.5, 2]"))  # the same frame with a fine value is taken
    with pytest.raises(error):
        read(wrap(HOSTILE[hostile]))


def test_the_worker_sends_numbers_json_has_no_words_for_as_text() -> None:
    line = encode_line("result", result={"details": {"ratio": float("nan"), "big": float("inf")}})
    assert parse_line(line.rstrip(b"\n")) == {
        "type": "result",
        "result": {"details": {"ratio": "NaN", "big": "Infinity"}},
    }


def test_the_worker_escapes_a_lone_surrogate() -> None:
    line = encode_line("progress", message="name-\udcff")
    assert line.isascii()
    assert parse_line(line)["message"] == "name-\udcff"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


@settings(max_examples=300, deadline=None)
@given(
    value=_JSON,
    before=st.sampled_from(["", " ", "\n\t", "\ufeff"]),
    after=st.sampled_from(["", " ", " \n", "x", "}", " {}"]),
    indent=st.sampled_from([None, 1]),
)
def test_arguments_text_is_read_exactly_as_json_loads_reads_it(
    value: Any, before: str, after: str, indent: int | None
) -> None:
    """The planner's fast read of a call's JSON text takes exactly the texts
    ``json.loads`` reads as an object, with the same value, and leaves every other
    text to ``json.loads`` (which words its error)."""
    from toolexec._core._routing import _object_of

    for text in (before + json.dumps(value, indent=indent) + after, json.dumps(value)[:-1]):
        fast = _object_of(text)
        assert fast is None or fast == _loads_object(text)
        if before == "" and _loads_object(text) is not None:
            assert fast == _loads_object(text)
