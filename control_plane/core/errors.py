"""Errors raised by service functions; the API maps each to a status and error code.

Service functions validate everything before writing, so raising one of these inside
``transaction.atomic`` leaves no partial state.
"""

from __future__ import annotations

from typing import Any


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The API's error body: ``{"error": {"code", "message", "details"}}``."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


class ServiceError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    @property
    def details(self) -> dict[str, list[str]]:
        return {self.field: [self.message]} if self.field else {}


class InvalidInput(ServiceError):
    code = "invalid"


class AlreadyExists(ServiceError):
    code = "already_exists"


class LimitExceeded(ServiceError):
    code = "limit_exceeded"


class NotPermitted(ServiceError):
    status = 403
    code = "permission_denied"


class Conflict(ServiceError):
    """The request is valid but the resource's current state forbids it."""

    status = 409
    code = "conflict"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Unavailable(ServiceError):
    """A dependency the request needs (the brokers, the mail server) cannot answer right now."""

    status = 503
    code = "unavailable"
