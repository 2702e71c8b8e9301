"""A real OpenID Connect provider process on loopback for the tests: oidc-provider-mock
(Authlib's server, with a form where the person picks who they are), and walking a
browserless sign-in through it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.broker.conftest import free_port


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class OidcProvider:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.log = directory / "oidc.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OidcProvider:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "oidc_provider_mock",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--require-nonce",
                    "true",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(
                    self.issuer + "/.well-known/openid-configuration", timeout=2
                ) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"the OIDC provider did not start: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def set_user(self, sub: str, **claims: object) -> None:
        request = urllib.request.Request(
            f"{self.issuer}/users/{urllib.parse.quote(sub)}",
            data=json.dumps(claims).encode(),
            headers={"Content-Type": "application/json"},
            method="PUT",
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 204

    def authorize(self, url: str, sub: str) -> str:
        """Submit the provider's form at ``url`` as ``sub``; the redirect it answers."""
        assert url.startswith(self.issuer), url
        opener = urllib.request.build_opener(_NoRedirect)
        form = urllib.parse.urlencode({"sub": sub}).encode()
        try:
            opener.open(urllib.request.Request(url, data=form), timeout=10)
        except urllib.error.HTTPError as exc:
            if exc.code in (302, 303):
                return exc.headers["Location"]
            raise AssertionError(f"{exc.code}: {exc.read()[:500]!r}") from None
        raise AssertionError("the provider did not redirect back")
