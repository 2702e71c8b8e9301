"""OpenAPI descriptions of our authentication schemes (loaded by ApiConfig.ready)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object


class ApiKeyBasicScheme(OpenApiAuthenticationExtension):
    target_class = "control_plane.api.authentication.ApiKeyAuthentication"
    name = ["apiKeyBasic", "apiKeyBearer"]

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [
            {
                "type": "http",
                "scheme": "basic",
                "description": "API key id as the username, its secret as the password.",
            },
            build_bearer_security_scheme_object(
                header_name="Authorization", token_prefix="Bearer", bearer_format="key_id.secret"
            ),
        ]


class PersonalTokenScheme(OpenApiAuthenticationExtension):
    target_class = "control_plane.api.authentication.PersonalTokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(  # type: ignore[no-any-return]
            header_name="Authorization", token_prefix="Bearer", bearer_format="mrpat_…"
        )


class ConsoleSessionScheme(OpenApiAuthenticationExtension):
    target_class = "control_plane.api.authentication.CsrfSessionAuthentication"
    name = "consoleSession"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}
