"""How keys and values read back as JSON (``control_plane.streams.codec``), without a broker."""

from __future__ import annotations

import base64

import pytest

from control_plane.streams import codec


def render(key, value, **formats):
    defaults = {"key_format": "auto", "value_format": "auto", "header_format": "string"}
    return codec.render_record(
        topic="t",
        partition=0,
        offset=7,
        timestamp=1,
        timestamp_type="create_time",
        key=key,
        value=value,
        headers=[("h", b"x")],
        **{**defaults, **formats},
    )


@pytest.mark.parametrize(
    ("raw", "shown", "fmt"),
    [
        (b'{"total": 12.5}', {"total": 12.5}, "json"),
        (b'"o-17"', "o-17", "json"),
        (b"42", 42, "json"),
        (b"o-17", "o-17", "string"),
        ("déjà vu".encode(), "déjà vu", "string"),
        (b"NaN", "NaN", "string"),  # not JSON: it could not be sent on as JSON
        (b"\x00\xff\xfe", base64.b64encode(b"\x00\xff\xfe").decode(), "binary"),
    ],
)
def test_auto_reads_json_then_text_then_base64_and_names_the_format(raw, shown, fmt):
    record = render(raw, raw)
    assert (record["key"], record["key_format"]) == (shown, fmt)
    assert (record["value"], record["value_format"]) == (shown, fmt)


def test_auto_names_no_format_for_null():
    record = render(None, b"v")
    assert record["key"] is None and "key_format" not in record
    assert record["value_format"] == "string"


def test_reading_defaults_to_auto_and_producing_to_json():
    assert codec.formats({}, reading=True) == {
        "key_format": "auto",
        "value_format": "auto",
        "header_format": "string",
    }
    assert codec.formats({})["value_format"] == "json"
    with pytest.raises(codec.RecordError) as raised:
        codec.formats({"value_format": "auto"})
    assert raised.value.field == "value_format"


@pytest.mark.parametrize(
    ("fmt", "raw", "shown", "named"),
    [
        ("json", b'{"a": 1}', {"a": 1}, None),
        ("json", b"plain", base64.b64encode(b"plain").decode(), "binary"),
        ("json", b"NaN", base64.b64encode(b"NaN").decode(), "binary"),
        ("string", b'{"a": 1}', '{"a": 1}', None),
        ("string", b"\xff", base64.b64encode(b"\xff").decode(), "binary"),
        ("binary", b"plain", base64.b64encode(b"plain").decode(), None),
    ],
)
def test_explicit_formats_name_only_a_fallback(fmt, raw, shown, named):
    record = render(raw, raw, key_format=fmt, value_format=fmt)
    assert record["key"] == record["value"] == shown
    assert record.get("key_format") == record.get("value_format") == named
