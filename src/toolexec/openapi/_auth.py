"""Credentials from the document's security schemes and the host's secrets.

The host gives a mapping of scheme name -> secret; the model never sees or
sends one. An operation's ``security`` (or the document's) lists
alternatives; the first whose schemes are all supported and all have a
secret is used. Supported: HTTP bearer (``type: http, scheme: bearer``) and
API keys (``type: apiKey``, in a header, the query or a cookie).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._schemas import Unsupported

__all__ = ["Credentials", "credentials_for", "secret_locations"]

Pairs = tuple[tuple[str, str], ...]


@attrs.frozen(repr=False)
class Credentials:
    """What one operation's requests carry to authenticate; never shown."""

    headers: Pairs = ()
    query: Pairs = ()
    cookies: Pairs = ()

    def __repr__(self) -> str:
        return "Credentials(<redacted>)"


_NONE = Credentials()


def credentials_for(
    requirements: Any, schemes: Mapping[str, Any], secrets: Mapping[str, str]
) -> Credentials:
    """The credentials meeting one of ``requirements``, or ``Unsupported`` saying why none does."""
    if not requirements:
        return _NONE
    problems: list[str] = []
    for alternative in requirements:
        try:
            return _satisfy(alternative, schemes, secrets)
        except Unsupported as exc:
            problems.append(str(exc))
    raise Unsupported("no security requirement can be met: " + "; ".join(problems))


def _satisfy(
    alternative: Mapping[str, Any], schemes: Mapping[str, Any], secrets: Mapping[str, str]
) -> Credentials:
    places: dict[str, list[tuple[str, str]]] = {"header": [], "query": [], "cookie": []}
    for name in alternative:
        scheme = schemes.get(name)
        if not isinstance(scheme, Mapping):
            raise Unsupported(f"security scheme {name!r} is not defined")
        where, key, prefix = _place(name, scheme)
        if name not in secrets:
            raise Unsupported(f"no secret was given for security scheme {name!r}")
        places[where].append((key, prefix + secrets[name]))
    return Credentials(tuple(places["header"]), tuple(places["query"]), tuple(places["cookie"]))


def _place(name: str, scheme: Mapping[str, Any]) -> tuple[str, str, str]:
    """Where a scheme's secret goes: (header|query|cookie, name, value prefix)."""
    kind = scheme.get("type")
    if kind == "http" and str(scheme.get("scheme", "")).lower() == "bearer":
        return "header", "Authorization", "Bearer "
    where, key = scheme.get("in"), scheme.get("name")
    if kind == "apiKey" and where in ("header", "query", "cookie") and isinstance(key, str) and key:
        return where, key, ""
    detail = f"type {kind!r}" + (f", scheme {scheme['scheme']!r}" if "scheme" in scheme else "")
    raise Unsupported(
        f"security scheme {name!r} ({detail}) is not supported (HTTP bearer and API keys are)"
    )


def secret_locations(schemes: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """Every (location, lower-case name) an API key travels in; never a model argument."""
    found = {("header", "authorization")}
    for scheme in schemes.values():
        if isinstance(scheme, Mapping) and scheme.get("type") == "apiKey":
            found.add((str(scheme.get("in")), str(scheme.get("name", "")).lower()))
    return frozenset(found)
