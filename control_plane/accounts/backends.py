"""Sign-in by username or by e-mail address."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


class UsernameOrEmailBackend(ModelBackend):
    """Django's model backend; a name with an ``@`` that is no username is looked up as
    the proven address of exactly one account."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None or not username or "@" not in username or password is None:
            return user
        from control_plane.accounts.services import users_with_email

        user_model = get_user_model()
        if user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).exists():
            return None
        matches = users_with_email(username)
        if len(matches) != 1:
            user_model().set_password(password)  # the same work as a real check
            return None
        found = matches[0]
        if found.check_password(password) and self.user_can_authenticate(found):
            return found
        return None
