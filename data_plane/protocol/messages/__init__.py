"""The APIs Millrace speaks: one module per API, each defining ``REQUEST`` and ``RESPONSE``.

:data:`APIS` maps an API key to its :class:`Api`; ``docs/compatibility.md`` is generated from
it (``python -m data_plane.protocol.compat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from data_plane.protocol.messages import api_versions, metadata
from data_plane.protocol.schema import Message


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    request: Message
    response: Message

    @property
    def min_version(self) -> int:
        return self.request.valid[0]

    @property
    def max_version(self) -> int:
        hi = self.request.valid[1]
        assert hi is not None, f"{self.name} needs a bounded version range"
        return hi


def _api(module: ModuleType) -> Api:
    request: Message = module.REQUEST
    response: Message = module.RESPONSE
    assert request.api_key == response.api_key and request.valid == response.valid
    return Api(request.api_key, request.name, request, response)


APIS: dict[int, Api] = {api.key: api for api in (_api(m) for m in (api_versions, metadata))}
