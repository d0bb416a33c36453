"""Every ```python block in these pages runs, in order, as one program per page.

A ```python block followed by an ```output block must print exactly that
text, so an output shown in the docs is what the code prints.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

# Slow (tests/README.md): the docs' examples, run whole.
pytestmark = pytest.mark.slow

DOCS = Path(__file__).parent.parent / "docs"
PAGES = [
    "asyncio.md",
    "concepts.md",
    "frameworks.md",
    "function-tools.md",
    "ipc.md",
    "observability.md",
    "scale-out.md",
    "security.md",
    "testing.md",
    "resources.md",
    "sandbox.md",
]

FENCE = re.compile(r"^```(python|output)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)


def run_page(text: str, filename: str) -> None:
    """Run the page's python blocks in one namespace; check each output block."""
    # A real module, so that classes defined on the page (dataclasses, models)
    # can have their annotations resolved through sys.modules.
    module = types.ModuleType(f"docs_{Path(filename).stem.replace('-', '_')}")
    namespace: dict[str, Any] = module.__dict__
    sys.modules[module.__name__] = module
    try:
        _run_blocks(text, filename, namespace)
    finally:
        del sys.modules[module.__name__]


def _run_blocks(text: str, filename: str, namespace: dict[str, Any]) -> None:
    printed = None
    ran = False
    for match in FENCE.finditer(text):
        kind, block = match[1], match[2]
        line = text.count("\n", 0, match.start()) + 2
        if kind == "output":
            assert printed == block, f"{filename}:{line}: the code above prints {printed!r}"
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile("\n" * (line - 1) + block, filename, "exec"), namespace)
        printed, ran = out.getvalue(), True
    assert ran, f"{filename} has no examples"


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files
    run_page((DOCS / page).read_text(), str(DOCS / page))
    assert os.getcwd() == str(tmp_path)


def test_an_output_block_is_compared_with_what_its_code_prints() -> None:
    page = "```python\nprint('yes')\n```\n\nprints:\n\n```output\n{}\n```\n"
    run_page(page.format("yes"), "ok.md")
    with pytest.raises(AssertionError, match=r"bad.md:8: the code above prints 'yes\\n'"):
        run_page(page.format("no"), "bad.md")
    with pytest.raises(AssertionError, match="has no examples"):
        run_page("no code here", "empty.md")
