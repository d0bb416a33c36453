"""OpenAPI documents as a tool source: one tool per operation, called over HTTP.

Install the extra (``pip install toolexec[openapi]``: ``httpx2``, and
``pyyaml`` for YAML documents). Its modules, by concept: ``_document``
(reading and checking a document), ``_schemas`` (``$ref`` and OpenAPI
schemas made portable), ``_auth`` (security schemes and the host's
secrets), ``_operations`` (an operation's name, arguments and plan),
``_http`` (one call and its failures), ``_source`` (the opened source and
its tools).

Example::

    registry = ToolRegistry()
    async with open_openapi_source(registry, "petstore.yaml", secrets={"apiKey": key}) as source:
        executor = ToolExecutor(registry)
        outcome = await executor.execute_batch([ToolCall("c1", "getPet", {"petId": 7})])

Theory of operation.

* *Load*: the document (a mapping, a file, or a URL fetched with the
  source's client) must be OpenAPI 3.0 or 3.1. Calls go to ``base_url`` or
  the first server.
* *Register*: each operation becomes a tool named by its ``operationId``
  (or method and path) in the registry's charset, cut to 64 characters.
  Its arguments are its parameters and ``body`` (the rule is in
  ``_operations``); the schemas it shares with other operations stay
  shared, in its schema's ``$defs`` (``_schemas``). An operation that
  cannot be expressed (a ``$ref`` to nothing, a schema outside the
  portable subset, a schema over ``max_schema_bytes``, a non-JSON body, a
  parameter style, a security requirement without a secret) is skipped,
  logged and listed in ``OpenAPISource.skipped`` with a one-line reason.
  GET, HEAD and OPTIONS are ``READ``; other methods ``WRITE``;
  ``x-toolexec-side-effects`` on an operation overrides.
* *Call*: see ``_http``: every failure is an error result naming the
  operation and the server; secrets never appear in what is shown.
* *Close*: the tools are unregistered and the HTTP client closed.

Errors::

    ToolexecError
    +-- OpenAPIError (ValueError)   the document cannot be used; raised on open
"""

from __future__ import annotations

from .._core._public import fixup_module_metadata as _fixup_module_metadata
from ._document import OpenAPIError
from ._source import OpenAPISource, OpenAPITool, open_openapi_source

__all__ = ["OpenAPIError", "OpenAPISource", "OpenAPITool", "open_openapi_source"]

_fixup_module_metadata(__name__, __all__)
