"""Every ```python block in these pages runs, in order, as one program per page."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).parent.parent / "docs"
PAGES = ["concepts.md", "security.md"]


def blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = blocks(page)
    assert code, f"{page} has no examples"
    monkeypatch.chdir(tmp_path)  # examples may write files
    namespace: dict[str, Any] = {"__name__": f"docs_{page}"}
    exec(compile("\n".join(code), str(DOCS / page), "exec"), namespace)
    assert os.getcwd() == str(tmp_path)
