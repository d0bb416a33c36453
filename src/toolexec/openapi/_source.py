"""An OpenAPI document opened as a tool source: its client, tools and skipped operations."""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus

import attrs
import httpx2

from .._core._errors import RegistrationError, ToolError
from .._gate._schema import CompiledSchema, compile_schema, one_line
from ._auth import check_secret, is_basic, secret_forms, secret_locations
from ._document import OpenAPIError, load_document, openapi_version, server_url
from ._http import send
from ._operations import METHODS, Context, Operation, build_operation, tool_name
from ._schemas import Resolver, Unsupported

if TYPE_CHECKING:
    import os

    from .._core._registry import ToolRegistry
    from .._core._tool_protocol import ToolContext
    from .._core._types import ToolDefinition, ToolOutput

__all__ = ["OpenAPISource", "OpenAPITool", "open_openapi_source"]

_log = logging.getLogger("toolexec.openapi")

#: The default bound on one tool's schema, in bytes of compact JSON.
MAX_SCHEMA_BYTES = 200_000


@attrs.define(eq=False)
class OpenAPISource:
    """An OpenAPI document whose operations are registered as tools.

    Get one from ``open_openapi_source``.

    Attributes:
        title: the document's ``info.title``.
        openapi_version: ``"3.0"`` or ``"3.1"``.
        server: the base URL calls go to.
        tools: registered name -> the ``OpenAPITool`` behind it.
        skipped: (operation, reason) for every operation not registered; an
            operation is its ``operationId``, or method and path.
        timeout: seconds one call may take, connecting included.
        connect_timeout: seconds connecting may take.
        max_response_bytes: the largest response body a call returns.
    """

    title: str
    openapi_version: str
    server: str
    timeout: float
    connect_timeout: float
    max_response_bytes: int
    tools: dict[str, OpenAPITool] = attrs.field(factory=dict, init=False)
    skipped: list[tuple[str, str]] = attrs.field(factory=list, init=False)
    _client: httpx2.AsyncClient | None = attrs.field(default=None, alias="client", repr=False)
    _secrets: tuple[str, ...] = attrs.field(default=(), alias="secrets", repr=False)

    @property
    def client(self) -> httpx2.AsyncClient:
        """The source's HTTP client (``RuntimeError`` once the source is closed)."""
        if self._client is None:
            raise RuntimeError(f"the OpenAPI source {self.title!r} is closed")
        return self._client

    def redact(self, text: str) -> str:
        """``text`` with every secret (as sent, URL-encoded or JSON-escaped) replaced."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text

    async def _call(self, op: Operation, arguments: Mapping[str, Any]) -> ToolOutput:
        if self._client is None:
            raise ToolError(f"the OpenAPI source {self.title!r} is closed; the call was not sent")
        return await send(self, op, arguments)

    def _skip(self, operation: str, reason: str) -> None:
        reason = one_line(reason)
        self.skipped.append((operation, reason))
        _log.warning("OpenAPI %r: operation %r not registered: %s", self.title, operation, reason)


@attrs.define(eq=False)
class OpenAPITool:
    """One operation of an OpenAPI document, as a toolexec ``Tool``.

    Stateless: the registry's factory hands out this same instance for every
    call, and the source's HTTP client is shared.
    """

    operation: Operation
    source: OpenAPISource = attrs.field(repr=False)
    #: The input schema as checked and compiled when the document was
    #: loaded; the registry reuses it instead of compiling it again.
    compiled_schema: CompiledSchema | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def definition(self) -> ToolDefinition:
        """The tool's name, argument schema and side effects."""
        return self.operation.definition

    async def execute(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Call the operation; every failure raises ``ToolError`` naming it and the server."""
        return await self.source._call(self.operation, arguments)

    def __call__(self) -> OpenAPITool:
        """Be the registry's factory for this tool."""
        return self


def _secret_forms(secrets: Mapping[str, str], schemes: Mapping[str, Any]) -> tuple[str, ...]:
    """Every form a secret may be seen in: as sent, URL-encoded, JSON-escaped; longest first."""
    forms: set[str] = set()
    for name, secret in secrets.items():
        for form in secret_forms(secret, is_basic(schemes.get(name))):
            forms |= {form, quote(form, safe=""), quote_plus(form), json.dumps(form)[1:-1]}
    return tuple(sorted(forms, key=len, reverse=True))


def _check_secrets(secrets: Mapping[str, Any], schemes: Mapping[str, Any]) -> None:
    unknown = sorted(set(secrets) - set(schemes))
    if unknown:
        raise OpenAPIError(
            f"secrets were given for security schemes the document does not define: {unknown}"
        )
    for name, secret in secrets.items():
        problem = check_secret(name, secret, schemes[name])
        if problem is not None:
            raise OpenAPIError(problem)


def _schemes(document: Mapping[str, Any]) -> Mapping[str, Any]:
    components = document.get("components")
    schemes = components.get("securitySchemes") if isinstance(components, Mapping) else None
    return schemes if isinstance(schemes, Mapping) else {}


def _populate(
    source: OpenAPISource,
    document: Mapping[str, Any],
    prefix: str,
    secrets: Mapping[str, str],
    max_schema_bytes: int,
) -> None:
    """Build every operation's tool; the ones that cannot be tools go to ``skipped``."""
    schemes = _schemes(document)
    ctx = Context(
        Resolver(document, legacy=source.openapi_version == "3.0"),
        schemes,
        secret_locations(schemes),
        secrets,
        document.get("security"),
        source.timeout + 5.0,  # the executor's backstop; the call's own deadline comes first
        max_schema_bytes,
    )
    labels: dict[str, str] = {}
    for path, item in (document.get("paths") or {}).items():
        for method in METHODS:
            if isinstance(item, Mapping) and isinstance(item.get(method), Mapping):
                _add(source, ctx, labels, prefix, str(path), item, method)
    if not source.tools:
        _log.warning("OpenAPI %r: no operation could be registered", source.title)


def _add(
    source: OpenAPISource,
    ctx: Context,
    labels: dict[str, str],
    prefix: str,
    path: str,
    item: Mapping[str, Any],
    method: str,
) -> None:
    operation = item[method]
    label = operation.get("operationId") or f"{method.upper()} {path}"
    name = tool_name(prefix, operation, method, path)
    if name in labels:
        source._skip(label, f"its tool name {name!r} is already taken by {labels[name]!r}")
        return
    try:
        plan = build_operation(ctx, name, method, path, item, label)
        compiled = compile_schema(plan.definition.input_schema, tool=name)
    except (Unsupported, RegistrationError) as exc:
        source._skip(label, str(exc))
        return
    labels[name] = label
    source.tools[name] = OpenAPITool(plan, source, compiled)


def _register(source: OpenAPISource, registry: ToolRegistry) -> None:
    registered: list[str] = []
    try:
        for name, tool in source.tools.items():
            if name in registry:
                raise RegistrationError(
                    f"OpenAPI {source.title!r}: cannot register {name!r}: a tool with that "
                    "name is already registered; pass another prefix="
                )
            registry.register(tool)
            registered.append(name)
    except BaseException:
        for name in registered:
            registry.unregister(name)
        raise


@contextlib.asynccontextmanager
async def open_openapi_source(
    registry: ToolRegistry,
    document: Mapping[str, Any] | str | os.PathLike[str],
    *,
    secrets: Mapping[str, str] | None = None,
    base_url: str | None = None,
    prefix: str = "",
    timeout: float = 30.0,
    connect_timeout: float = 10.0,
    max_response_bytes: int = 1_000_000,
    max_schema_bytes: int = MAX_SCHEMA_BYTES,
) -> AsyncIterator[OpenAPISource]:
    """Load an OpenAPI 3.0/3.1 document and register one tool per operation while the block runs.

    Example::

        async with open_openapi_source(
            registry, "https://api.example.com/openapi.json", secrets={"bearerAuth": token}
        ) as source:
            print(sorted(source.tools), source.skipped)

    Args:
        registry: where the tools are registered (and unregistered on exit).
        document: a parsed document, a file path, or an ``http(s)://`` URL;
            JSON or YAML.
        secrets: security scheme name -> secret (a bearer, OAuth 2 or
            OpenID Connect token, an API key, or ``"user:password"`` for
            HTTP basic), sent with the operations that need it; never shown.
        base_url: where calls go, instead of the document's first server.
        prefix: put before every tool name (``"petstore__"``).
        timeout: seconds one call may take in all; past it the call is an
            error result (``timeout``) naming the operation and the server.
        connect_timeout: seconds to establish a connection.
        max_response_bytes: a larger response body is an error result.
        max_schema_bytes: the largest tool schema (its compact JSON, with the
            ``$defs`` it refers to); an operation over it is skipped.

    Raises:
        OpenAPIError: the document cannot be read or used (see its doc).
        RegistrationError: a tool name is already registered.
    """
    if not timeout > 0 or not connect_timeout > 0 or max_response_bytes < 1 or max_schema_bytes < 1:
        raise ValueError(
            "timeout, connect_timeout, max_response_bytes and max_schema_bytes must be positive"
        )
    secrets = dict(secrets or {})
    for scheme, secret in secrets.items():
        if not isinstance(secret, str):
            raise OpenAPIError(f"the secret for security scheme {scheme!r} must be a str")
    limits = httpx2.Timeout(timeout, connect=min(connect_timeout, timeout))
    async with contextlib.AsyncExitStack() as stack:
        client: httpx2.AsyncClient | None = None
        tls = isinstance(document, str) and document.startswith("https://")
        if isinstance(document, str) and document.startswith(("http://", "https://")):
            client = await stack.enter_async_context(_client(limits, tls=tls))
        parsed, origin = await load_document(document, client)
        version = openapi_version(parsed)
        server = server_url(parsed, origin, base_url)
        if client is None or (server.startswith("https://") and not tls):
            tls = server.startswith("https://")
            client = await stack.enter_async_context(_client(limits, tls=tls))
        schemes = _schemes(parsed)
        _check_secrets(secrets, schemes)
        info = parsed.get("info")
        info = info if isinstance(info, Mapping) else {}
        source = OpenAPISource(
            str(info.get("title", "")),
            version,
            server,
            timeout,
            min(connect_timeout, timeout),
            max_response_bytes,
            client=client,
            secrets=_secret_forms(secrets, schemes),
        )
        client.base_url = httpx2.URL(source.server)
        _populate(source, parsed, prefix, secrets, max_schema_bytes)
        _register(source, registry)
        try:
            yield source
        finally:
            for name in source.tools:
                registry.unregister(name)
            source._client = None


def _client(limits: httpx2.Timeout, *, tls: bool) -> httpx2.AsyncClient:
    """A client that loads the system's certificates only when it needs TLS.

    Loading them costs tens of milliseconds of CPU, for nothing when every
    request goes to an ``http://`` URL. A client built without them has a
    TLS context that trusts no certificate, so a request that did reach an
    ``https://`` URL would fail its handshake: it is never unverified.
    """
    if tls:
        return httpx2.AsyncClient(timeout=limits)
    return httpx2.AsyncClient(timeout=limits, verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
