"""The public surface is a promise: exported names, docstrings, typing marker."""

from __future__ import annotations

import inspect
from pathlib import Path

import toolexec


def test_all_is_sorted_and_complete():
    assert list(toolexec.__all__) == sorted(toolexec.__all__)
    for name in toolexec.__all__:
        assert hasattr(toolexec, name), name
    public = {n for n in vars(toolexec) if not n.startswith("_") and n not in ("annotations",)}
    modules = {n for n in public if inspect.ismodule(getattr(toolexec, n))}
    assert public - modules - set(toolexec.__all__) == set()


def test_every_public_name_has_a_docstring():
    for name in toolexec.__all__:
        obj = getattr(toolexec, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def test_package_is_typed():
    assert (Path(toolexec.__file__).parent / "py.typed").exists()


def test_every_public_name_is_documented_in_the_api_page():
    api = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    missing = [n for n in toolexec.__all__ if f"`{n}`" not in api]
    assert missing == []


def test_api_page_is_generated_from_the_current_docstrings():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_api", Path(__file__).parent.parent / "docs" / "gen_api.py"
    )
    assert spec is not None
    assert spec.loader is not None
    gen_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_api)
    page = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    assert page == gen_api.render(), "docs/api.md is stale: run `python docs/gen_api.py`"
