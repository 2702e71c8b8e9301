"""Who performs a change: a console/API user, an API key, or the system itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from control_plane.access.models import ApiKey


@dataclass(frozen=True)
class Actor:
    user: AbstractBaseUser | None = None
    api_key: ApiKey | None = None
    source_ip: str | None = None

    @classmethod
    def system(cls) -> Actor:
        return cls()

    @property
    def label(self) -> str:
        if self.api_key is not None:
            return self.api_key.key_id
        if self.user is not None:
            return self.user.get_username()
        return "system"

    @property
    def is_staff(self) -> bool:
        return bool(self.user is not None and getattr(self.user, "is_staff", False))
