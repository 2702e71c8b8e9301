"""The generated body types: in sync with the schemas, and true to what the decoder yields."""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest

from data_plane.protocol import bodies
from data_plane.protocol.messages import APIS
from data_plane.protocol.requests import parse_request
from data_plane.protocol.schema import Array, Field, Message, Struct, in_range
from data_plane.protocol.typegen import main as typegen_main


def test_bodies_module_is_generated_from_the_schemas():
    assert typegen_main(["--check"]) == 0, "run: python -m data_plane.protocol.typegen"


def _sample(fields: tuple[Field, ...], version: int) -> dict[str, Any]:
    """Every array holds one element, so every nested struct is encoded; scalars are left
    to the encoder's defaults (None where nullable)."""
    out: dict[str, Any] = {}
    for f in fields:
        if not in_range(version, f.versions):
            continue
        if isinstance(f.type, Array):
            element = f.type.element
            if isinstance(element, Struct):
                out[f.name] = [_sample(element.fields, version)]
            else:
                out[f.name] = [Field("element", element).default_value(version)]
        elif isinstance(f.type, Struct):
            out[f.name] = _sample(f.type.fields, version)
    return out


def _conforms(value: Any, hint: Any, where: str) -> None:
    if typing.is_typeddict(hint):
        assert isinstance(value, dict), where
        keys = set(value)
        missing = hint.__required_keys__ - keys
        unknown = keys - hint.__required_keys__ - hint.__optional_keys__
        assert not missing, f"{where}: {hint.__name__} requires {sorted(missing)}"
        assert not unknown, f"{where}: {hint.__name__} lacks {sorted(unknown)}"
        hints = typing.get_type_hints(hint)
        for key, item in value.items():
            _conforms(item, hints[key], f"{where}.{key}")
        return
    origin = typing.get_origin(hint)
    if origin is list:
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _conforms(item, typing.get_args(hint)[0], f"{where}[{i}]")
        return
    if origin in (types.UnionType, typing.Union):
        for arg in typing.get_args(hint):
            try:
                _conforms(value, arg, where)
                return
            except AssertionError:
                continue
        raise AssertionError(f"{where}: {value!r} is not {hint}")
    if hint is type(None):
        assert value is None, f"{where}: {value!r} is not None"
        return
    assert isinstance(value, hint), f"{where}: {value!r} is not {hint}"


MESSAGES = [
    (message, version)
    for api in sorted(APIS.values(), key=lambda a: a.key)
    for message in (api.request, api.response)
    for version in range(api.min_version, api.max_version + 1)
]


@pytest.mark.parametrize(
    ("message", "version"), MESSAGES, ids=[f"{m.name}-{m.kind}-v{v}" for m, v in MESSAGES]
)
def test_decoded_bodies_have_the_generated_types(message: Message, version: int):
    """Whatever the decoder yields (the broker's requests, the client's responses) fits
    the type: required keys are always there, no key is unknown, values have their types."""
    kind = getattr(bodies, f"{message.name}{message.kind.capitalize()}")
    sample = _sample(message.fields, version)
    decoded = message.decode(message.encode(sample, version), version)
    _conforms(decoded, kind, f"{message.name} {message.kind} v{version}")


def test_a_request_body_is_the_parsed_dict_under_its_type():
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(version=4, topics=[], allow_auto_topic_creation=False)
    request.with_header(correlation_id=1, client_id="t")
    parsed = parse_request(request.encode(version=4, header=True))
    body = parsed.body_as(bodies.MetadataRequest)
    assert body is parsed.body
    assert body["allow_auto_topic_creation"] is False
    assert "include_topic_authorized_operations" not in body  # v8+: absent, not defaulted
    with pytest.raises(AssertionError):
        parsed.body_as(bodies.ProduceRequest)
