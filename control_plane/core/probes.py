"""Answer ``/healthz``, ``/readyz`` and ``/metrics`` whatever the Host header says.

Kubelet probes and Prometheus scrapes reach a pod by its IP and send that as the Host;
no ``ALLOWED_HOSTS`` list can name every pod IP, and Django's host check (in
``CommonMiddleware`` and ``SecurityMiddleware``) would answer them 400. These three
answers are the same for every host, build no URLs and set no cookies, so this
middleware serves them before that check: after the request-context and metrics
middleware (they get a request id and are counted), before everything else. The views
keep their own rules (GET only; ``/metrics`` asks for the token).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.urls import ResolverMatch, resolve

from control_plane.core.middleware import HybridMiddleware

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class ProbeMiddleware(HybridMiddleware):
    @staticmethod
    def _match(request: HttpRequest) -> ResolverMatch | None:
        if request.path_info not in PROBE_PATHS:
            return None
        match = resolve(request.path_info)
        request.resolver_match = match  # the metrics middleware labels by route
        return match

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        match = self._match(request)
        if match is None:
            return self.get_response(request)
        return match.func(request, *match.args, **match.kwargs)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        match = self._match(request)
        if match is None:
            return await self.get_response(request)  # type: ignore[misc,no-any-return]
        view = sync_to_async(match.func, thread_sensitive=True)
        return await view(request, *match.args, **match.kwargs)  # type: ignore[no-any-return]
