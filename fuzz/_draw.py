"""Structured values drawn from fuzzer bytes, without atheris.

Harnesses use ``Draw`` rather than ``atheris.FuzzedDataProvider`` so that
they import and run anywhere: the test suite replays the seed corpus through
them in-process, and ``run.py`` drives them under libFuzzer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Sequence

T = TypeVar("T")


class Draw:
    """Consumes a byte string from the front; an exhausted draw yields zeros."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def below(self, n: int) -> int:
        """An integer in ``range(n)``."""
        return self.byte() % n if n > 1 else 0

    def pick(self, options: Sequence[T]) -> T:
        return options[self.below(len(options))]

    def chunk(self, max_len: int) -> bytes:
        """Up to ``max_len`` bytes, length first."""
        n = min(self.below(max_len + 1), len(self.data) - self.at)
        self.at += n
        return self.data[self.at - n : self.at]

    def text(self, vocabulary: Sequence[str], max_len: int = 12) -> str:
        """Either a word of ``vocabulary`` or arbitrary decoded bytes."""
        if self.below(4):
            return self.pick(vocabulary)
        errors = "surrogateescape" if self.below(2) else "replace"
        return self.chunk(max_len).decode("utf-8", errors)

    def rest(self) -> bytes:
        tail = self.data[self.at :]
        self.at = len(self.data)
        return tail

    def json(self, keys: Sequence[str], words: Sequence[str], depth: int = 4) -> Any:
        """A JSON-like value whose object keys and strings come mostly from the vocabularies."""
        kind = self.below(8 if depth > 0 else 5)
        if kind == 0:
            return None
        if kind == 1:
            return bool(self.below(2))
        if kind == 2:
            return self.pick([0, 1, -1, 2**63, 1.5, float("nan"), float("inf")])
        if kind in (3, 4):
            return self.text(words)
        if kind == 5:
            return [self.json(keys, words, depth - 1) for _ in range(self.below(4))]
        return {self.text(keys): self.json(keys, words, depth - 1) for _ in range(self.below(5))}
