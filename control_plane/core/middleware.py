"""The base of our middleware: each runs both ways, async under daphne (the ASGI chain,
with no thread hop per middleware) and sync under WSGI and the test client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse


class HybridMiddleware:
    """Subclasses define ``__call__`` (which hands off to ``__acall__`` when
    ``self.is_async``) and ``__acall__``."""

    sync_capable = True
    async_capable = True

    def __init__(
        self, get_response: Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]
    ) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)
