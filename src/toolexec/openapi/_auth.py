"""Credentials from the document's security schemes and the host's secrets.

The host gives a mapping of scheme name -> secret; the model never sees or
sends one. An operation's ``security`` (or the document's) lists
alternatives; the first whose schemes are all supported and all have a
secret is used. Supported:

* HTTP bearer (``type: http, scheme: bearer``), OAuth 2 (``type: oauth2``)
  and OpenID Connect (``type: openIdConnect``): the secret is the access
  token, sent as ``Authorization: Bearer <token>``; toolexec runs no OAuth
  flow (the host obtains and refreshes the token; scopes are not checked);
* HTTP basic (``type: http, scheme: basic``): the secret is
  ``"user:password"``, sent as ``Authorization: Basic <base64>``;
* API keys (``type: apiKey``), in a header, the query or a cookie.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import attrs

from ._schemas import Unsupported

__all__ = [
    "Credentials",
    "check_secret",
    "credentials_for",
    "is_basic",
    "secret_forms",
    "secret_locations",
]

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
        secret = secrets[name]
        if prefix == "Basic ":
            secret = _basic(secret)
        places[where].append((key, prefix + secret))
    return Credentials(tuple(places["header"]), tuple(places["query"]), tuple(places["cookie"]))


def _place(name: str, scheme: Mapping[str, Any]) -> tuple[str, str, str]:
    """Where a scheme's secret goes: (header|query|cookie, name, value prefix)."""
    kind = scheme.get("type")
    http = str(scheme.get("scheme", "")).lower() if kind == "http" else None
    if http == "bearer" or kind in ("oauth2", "openIdConnect"):
        return "header", "Authorization", "Bearer "
    if http == "basic":
        return "header", "Authorization", "Basic "
    where, key = scheme.get("in"), scheme.get("name")
    if kind == "apiKey" and where in ("header", "query", "cookie") and isinstance(key, str) and key:
        return where, key, ""
    detail = f"type {kind!r}" + (f", scheme {scheme['scheme']!r}" if "scheme" in scheme else "")
    raise Unsupported(
        f"security scheme {name!r} ({detail}) is not supported (HTTP bearer and basic, "
        "OAuth 2, OpenID Connect and API keys are)"
    )


def _basic(secret: str) -> str:
    return base64.b64encode(secret.encode()).decode("ascii")


def is_basic(scheme: Any) -> bool:
    """Whether ``scheme`` is HTTP basic (its secret is ``"user:password"``)."""
    return (
        isinstance(scheme, Mapping)
        and scheme.get("type") == "http"
        and str(scheme.get("scheme", "")).lower() == "basic"
    )


def check_secret(name: str, secret: str, scheme: Any) -> str | None:
    """Why ``secret`` cannot be the secret of ``scheme`` (``None`` if it can)."""
    if is_basic(scheme) and ":" not in secret:
        return f"the secret for HTTP basic security scheme {name!r} must be 'user:password'"
    return None


def secret_forms(secret: str, basic: bool) -> set[str]:
    """Every text a secret may be seen as: itself, and for HTTP basic its parts as sent."""
    forms = {secret} if secret else set()
    if basic and secret:
        forms.add(_basic(secret))
        password = secret.partition(":")[2]
        if password:
            forms.add(password)
    return forms


def secret_locations(schemes: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """Every (location, lower-case name) an API key travels in; never a model argument."""
    found = {("header", "authorization")}
    for scheme in schemes.values():
        if isinstance(scheme, Mapping) and scheme.get("type") == "apiKey":
            found.add((str(scheme.get("in")), str(scheme.get("name", "")).lower()))
    return frozenset(found)
