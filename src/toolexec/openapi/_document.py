"""Reading an OpenAPI document: from a mapping, a file or a URL; JSON or YAML.

YAML is imported only when a document is YAML (by its file suffix or
content type, or because it is not JSON), so a JSON-only host never needs
PyYAML.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import trio

from .._core._errors import ToolexecError

if TYPE_CHECKING:
    import os

__all__ = ["OpenAPIError", "load_document", "openapi_version", "server_url"]

_VERSION = re.compile(r"3\.[01](\.\d+)?(-\S+)?")
_VARIABLE = re.compile(r"\{([^{}]+)\}")


class OpenAPIError(ToolexecError, ValueError):
    """An OpenAPI document cannot be used as a tool source; the message says why.

    Raised when the source is opened (never per call): the document cannot be
    read or parsed, is not OpenAPI 3.0 or 3.1, has no usable server URL, marks
    an operation with a bad ``x-toolexec-side-effects``, or the host gave
    secrets for security schemes the document does not define (or an HTTP
    basic secret that is not ``"user:password"``).
    """


async def load_document(
    document: Mapping[str, Any] | str | os.PathLike[str], client: httpx2.AsyncClient | None
) -> tuple[dict[str, Any], str | None]:
    """The parsed document, and the URL it came from (``None`` if not fetched).

    ``client`` fetches a URL; it is not needed for a mapping or a file.
    """
    if isinstance(document, Mapping):
        return dict(document), None
    if isinstance(document, str) and document.startswith(("http://", "https://")):
        assert client is not None
        text, kind = await _fetch(document, client)
        return parse_document(text, name=document, kind=kind), document
    path = trio.Path(document)
    try:
        text = await path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OpenAPIError(f"cannot read the OpenAPI document {str(path)!r}: {exc}") from None
    suffix = Path(str(path)).suffix.lower()
    kind = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(suffix)
    return parse_document(text, name=str(path), kind=kind), None


async def _fetch(url: str, client: httpx2.AsyncClient) -> tuple[str, str | None]:
    try:
        response = await client.get(url)
    except httpx2.HTTPError as exc:
        raise OpenAPIError(
            f"cannot fetch the OpenAPI document {url}: {type(exc).__name__}: {exc}"
        ) from None
    if response.status_code != 200:
        raise OpenAPIError(f"cannot fetch the OpenAPI document {url}: HTTP {response.status_code}")
    media = response.headers.get("content-type", "").lower()
    yaml = "yaml" in media or url.split("?")[0].lower().endswith((".yaml", ".yml"))
    kind = "yaml" if yaml else ("json" if "json" in media else None)
    return response.text, kind


def parse_document(text: str, *, name: str, kind: str | None) -> dict[str, Any]:
    """Parse JSON or YAML text (``kind`` ``None``: JSON, else YAML)."""
    if kind == "yaml":
        data = _yaml(text, name)
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            if kind == "json":
                raise OpenAPIError(
                    f"the OpenAPI document {name} is not valid JSON: {exc}"
                ) from None
            data = _yaml(text, name)
    if not isinstance(data, Mapping):
        raise OpenAPIError(
            f"the OpenAPI document {name} must be a mapping, got {type(data).__name__}"
        )
    return dict(data)


def _yaml(text: str, name: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise OpenAPIError(
            f"the OpenAPI document {name} is YAML, which needs PyYAML: "
            "pip install 'toolexec[openapi]'"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise OpenAPIError(f"the OpenAPI document {name} is neither JSON nor YAML: {exc}") from None


def openapi_version(document: Mapping[str, Any]) -> str:
    """``"3.0"`` or ``"3.1"``; raise ``OpenAPIError`` for anything else."""
    version = document.get("openapi")
    if isinstance(version, str) and _VERSION.fullmatch(version):
        return version[:3]
    if "swagger" in document:
        raise OpenAPIError(
            f"Swagger {document['swagger']} documents are not supported; "
            "convert the document to OpenAPI 3"
        )
    raise OpenAPIError(f"not an OpenAPI 3.0 or 3.1 document: its 'openapi' field is {version!r}")


def server_url(document: Mapping[str, Any], origin: str | None, override: str | None) -> str:
    """The base URL calls go to: ``override``, else the first server (variables at defaults)."""
    if override:
        return _http_url(override)
    servers = document.get("servers") or [{"url": "/"}]
    first = servers[0] if isinstance(servers, list) else None
    if not isinstance(first, Mapping) or not isinstance(first.get("url"), str):
        raise OpenAPIError("the document's first server has no 'url'; pass base_url=")
    variables = first.get("variables") or {}

    def default(match: re.Match[str]) -> str:
        value = variables.get(match[1], {}).get("default")
        if not isinstance(value, str):
            raise OpenAPIError(f"server variable {match[1]!r} has no default; pass base_url=")
        return value

    url = _VARIABLE.sub(default, first["url"])
    if "://" not in url:
        if origin is None:
            raise OpenAPIError(
                f"the document's server URL {url!r} is relative and the document was not "
                "fetched from a URL; pass base_url="
            )
        url = str(httpx2.URL(origin).join(url))
    return _http_url(url)


def _http_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise OpenAPIError(f"calls can only go to http:// or https:// URLs, not {url!r}")
    return url
