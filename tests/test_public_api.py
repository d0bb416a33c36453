"""The public surface is a promise: tiers, exported names, docstrings, the API page."""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import inspect
import pickle
import re
import sys
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import toolexec

if TYPE_CHECKING:
    from types import ModuleType

# Slow (tests/README.md): every public module imported, the SDK integrations with theirs.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).parent.parent
SRC = Path(toolexec.__file__).parent

# Modules that only re-export (their own names are checked exhaustively).
TIERS = [
    "toolexec",
    "toolexec.events",
    "toolexec.policy",
    "toolexec.approval",
    "toolexec.backends",
    "toolexec.tools",
    "toolexec.models",
]
PUBLIC = [
    *TIERS,
    "toolexec.aio",
    "toolexec.formats",
    "toolexec.mcp",
    "toolexec.openapi",
    "toolexec.otel",
    "toolexec.testing",
    "toolexec.langgraph",
    "toolexec.openai_agents",
    "toolexec.pydantic_ai",
    "toolexec.ipc",
    "toolexec.streams",
    "toolexec.durable",
]
# toolexec.policy lists the root's policy basics too, as the same objects.
REEXPORTED = {"toolexec.policy": {"Allow", "AllowAll", "Ask", "Deny", "ToolPolicy"}}


def _load_gen_api() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_api = _load_gen_api()


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def _homes() -> dict[str, str]:
    """Each public name, mapped to the one module it lives in."""
    homes: dict[str, str] = {}
    for module_name in PUBLIC:
        for name in _module(module_name).__all__:
            if name in REEXPORTED.get(module_name, ()):
                continue
            assert name not in homes, f"{name} is exported by {homes[name]} and {module_name}"
            homes[name] = module_name
    return homes


def _public_objects() -> list[tuple[str, str, Any]]:
    """(home module, name, object) for every public name, once."""
    return [(home, name, getattr(_module(home), name)) for name, home in _homes().items()]


@pytest.mark.parametrize("module_name", PUBLIC)
def test_every_public_module_has_a_sorted_all(module_name: str) -> None:
    module = _module(module_name)
    assert list(module.__all__) == sorted(module.__all__)
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module_name", TIERS)
def test_a_tier_module_exports_everything_public_it_holds(module_name: str) -> None:
    module = _module(module_name)
    public = {n for n in vars(module) if not n.startswith("_") and n != "annotations"}
    modules = {n for n in public if inspect.ismodule(getattr(module, n))}
    assert public - modules - set(module.__all__) == set()


def test_the_root_stays_small() -> None:
    assert len(toolexec.__all__) <= 50


def test_no_name_is_exported_twice() -> None:
    homes = _homes()  # asserts while building
    assert len(homes) == sum(len(_module(m).__all__) for m in PUBLIC) - sum(
        len(names) for names in REEXPORTED.values()
    )
    objects: dict[int, str] = {}
    for home, name, obj in _public_objects():
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert id(obj) not in objects, f"{home}.{name} is also {objects[id(obj)]}"
            objects[id(obj)] = f"{home}.{name}"


def test_policy_lists_the_root_basics_as_the_same_objects() -> None:
    policy = _module("toolexec.policy")
    for name in REEXPORTED["toolexec.policy"]:
        assert name in policy.__all__
        assert name in toolexec.__all__
        assert getattr(policy, name) is getattr(toolexec, name)


def test_public_objects_name_their_public_module() -> None:
    for home, name, obj in _public_objects():
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases and constants have no module of their own
        assert obj.__module__ == home, f"{home}.{name} says {obj.__module__}"
        assert getattr(_module(obj.__module__), obj.__qualname__) is obj
        if inspect.isclass(obj):
            for member_name, member in gen_api.public_members(obj).items():
                owner = next(k for k in obj.__mro__ if member_name in vars(k))
                if owner.__name__.startswith("_"):
                    continue  # a private base's methods keep its module
                module = _function_of(member).__module__
                assert module == owner.__module__, f"{home}.{name}.{member_name} says {module}"


def test_enum_members_and_values_pickle_by_their_public_path() -> None:
    for _home, _name, obj in _public_objects():
        if inspect.isclass(obj) and issubclass(obj, enum.Enum):
            for member in obj:
                assert pickle.loads(pickle.dumps(member)) is member
    values = [
        toolexec.ToolCall("c1", "echo", {"text": "hi"}),
        toolexec.TextContent("hi"),
        toolexec.ToolResult("c1", "echo", (toolexec.TextContent("hi"),)),
        toolexec.TreeLimits(max_depth=2),
    ]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value


def test_reprs_show_public_paths() -> None:
    assert repr(toolexec.ToolCall) == "<class 'toolexec.ToolCall'>"
    assert "toolexec._" not in repr(toolexec.ContentBlock)
    assert repr(_module("toolexec.policy").Decision) == (
        "toolexec.Allow | toolexec.Deny | toolexec.Ask"
    )


def _defining_module(obj: Any) -> ModuleType:
    if obj.__module__ not in TIERS:
        return sys.modules[obj.__module__]
    for name, module in sys.modules.items():
        if name.startswith("toolexec._") and vars(module).get(obj.__name__) is obj:
            return module
    raise AssertionError(f"no private module defines {obj!r}")


def test_type_hints_resolve_as_they_did_before_the_move() -> None:
    usage = _module("toolexec.models").Usage
    assert typing.get_type_hints(toolexec.AgentResult)["usage"] is usage
    for _home, name, obj in _public_objects():
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        namespace = vars(_defining_module(obj))
        try:
            expected = typing.get_type_hints(obj, globalns=dict(namespace))
        except NameError:
            continue  # names imported only for type checkers, before and after
        assert typing.get_type_hints(obj) == expected, name


def test_every_public_name_and_method_has_a_docstring() -> None:
    missing = []
    for home, name, obj in _public_objects():
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(f"{home}.{name}")
        if inspect.isclass(obj):
            for member_name, member in gen_api.public_members(obj).items():
                if not gen_api.first_paragraph(_function_of(member)):
                    missing.append(f"{home}.{name}.{member_name}")
    assert missing == []


def _function_of(member: Any) -> Any:
    if isinstance(member, property):
        return member.fget
    return getattr(member, "__func__", getattr(member, "func", member))


def _page_sections() -> dict[str, str]:
    page = (ROOT / "docs" / "api.md").read_text()
    parts = re.split(r"^## `(toolexec[\w.]*)`.*$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_public_name_is_on_the_api_page_under_its_module() -> None:
    sections = _page_sections()
    assert list(sections) == PUBLIC
    missing = [
        f"{module_name}.{name}"
        for module_name in PUBLIC
        for name in _module(module_name).__all__
        if not re.search(rf"^#+ `{re.escape(module_name)}\.{name}`$", sections[module_name], re.M)
    ]
    assert missing == []


def test_api_page_is_generated_from_the_current_docstrings() -> None:
    page = (ROOT / "docs" / "api.md").read_text()
    assert page == gen_api.render(), "docs/api.md is stale: run `python docs/gen_api.py`"


def _imported_modules(path: Path) -> set[str]:
    """Absolute names of the toolexec modules a module imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(f"toolexec.{node.module}")
        elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import x
            found |= {f"toolexec.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("toolexec"):
            found.add(str(node.module))
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("toolexec")}
    return found


def test_private_modules_do_not_import_the_tiers() -> None:
    for path in sorted(SRC.glob("_*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        assert _imported_modules(path) & set(TIERS) == set(), path.name


def test_formats_does_not_import_the_model_adapters() -> None:
    imported = _imported_modules(SRC / "formats.py")
    assert imported & {"toolexec._adapters._models", "toolexec.models"} == set()


def test_package_is_typed() -> None:
    assert (SRC / "py.typed").exists()
