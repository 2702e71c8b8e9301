"""The URL pattern a request matched, as a readable path template: the ``route`` label of
the web tier's metrics (``control_plane.metrics``) and of its access log lines
(``control_plane.core.request_context``)."""

from __future__ import annotations

import functools
import re

from django.http import HttpRequest

UNMATCHED = "<unmatched>"

_NAMED_GROUP = re.compile(r"\(\?P<(\w+)>")


@functools.lru_cache(maxsize=512)
def readable_route(route: str) -> str:
    """A resolver route as a path template: regex groups become ``<name>``, anchors go.

    ``api/v1/^tenants/(?P<tenant_slug>[a-z0-9-]+)/topics/$`` ->
    ``/api/v1/tenants/<tenant_slug>/topics/``. Routes come from the URLconf, so the
    cache holds all of them.
    """
    out: list[str] = []
    i = 0
    while i < len(route):
        named = _NAMED_GROUP.match(route, i)
        if named:
            out.append(f"<{named.group(1)}>")
            i = _group_end(route, named.end())
            continue
        char = route[i]
        if char == "\\" and i + 1 < len(route):
            out.append(route[i + 1])
            i += 2
            continue
        if char not in "^$":
            out.append(char)
        i += 1
    return "/" + "".join(out).lstrip("/")


def _group_end(pattern: str, i: int) -> int:
    """The index after the ``)`` closing the group whose body starts at ``i``."""
    depth = 1
    in_class = False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def route_label(request: HttpRequest) -> str:
    """The URL pattern that handled ``request`` (see :func:`readable_route`)."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return UNMATCHED
    return readable_route(match.route or "")
