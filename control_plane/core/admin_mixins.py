"""Django admin is a read-only window for operators: writes go through services
(validation, limits, audit events, broker notifications), i.e. the API and console."""

from __future__ import annotations

from typing import Any


class ReadOnlyAdmin:
    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
