"""Converters against the bytes Kafka Connect's own converters write and read.

The expected JSON below is written out by hand in the exact form Kafka's JsonConverter
(Jackson, compact) produces: key order ``type``, ``items``/``keys``/``values``/``fields``,
``optional``, ``name``, ``version``, ``doc``, ``parameters``, ``default``; struct fields
carry their name last in ``field``.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import struct
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_plane.connect.config import ConfigException
from data_plane.connect.converters import (
    ByteArrayConverter,
    JsonConverter,
    StringConverter,
    converter_class,
    make_converter,
)
from data_plane.connect.data import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    DATE_SCHEMA,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_BYTES_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    TIME_SCHEMA,
    TIMESTAMP_SCHEMA,
    DataException,
    Schema,
    Struct,
    Type,
    decimal_schema,
    struct_schema,
)

D = decimal.Decimal
UTC = datetime.UTC
PERSON = struct_schema([("id", INT32_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA)])


def json_converter(**config: Any) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({k.replace("_", "."): v for k, v in config.items()}, is_key=False)
    return converter


def round_trip(converter: JsonConverter, schema: Schema | None, value: Any) -> Any:
    read_schema, read = converter.to_connect("t", converter.from_connect("t", schema, value))
    assert read_schema == schema
    return read


def envelope(schema: str, payload: str) -> bytes:
    return f'{{"schema":{schema},"payload":{payload}}}'.encode()


# --- exact bytes ----------------------------------------------------------------------------


def test_struct_envelope_is_kafkas_exact_text() -> None:
    written = JsonConverter().from_connect("t", PERSON, Struct(PERSON, {"id": 42, "name": "Ann"}))
    assert written == (
        b'{"schema":{"type":"struct","fields":['
        b'{"type":"int32","optional":false,"field":"id"},'
        b'{"type":"string","optional":true,"field":"name"}],"optional":false},'
        b'"payload":{"id":42,"name":"Ann"}}'
    )
    unset = JsonConverter().from_connect("t", PERSON, Struct(PERSON, {"id": 1}))
    assert unset is not None and unset.endswith(b'"payload":{"id":1,"name":null}}')


def test_primitive_envelope_as_in_kafkas_docs() -> None:
    assert (
        JsonConverter().from_connect("t", STRING_SCHEMA, "foo")
        == b'{"schema":{"type":"string","optional":false},"payload":"foo"}'
    )


@pytest.mark.parametrize(
    ("value", "base64_text", "numeric_text"),
    [
        (D("12.34"), '"BNI="', "12.34"),  # unscaled 1234 = 0x04D2
        (D("-1.28"), '"gA=="', "-1.28"),  # -128 = 0x80, one byte
        (D("1.28"), '"AIA="', "1.28"),  # 128 needs a sign byte: 0x0080
        (D("0.00"), '"AA=="', "0.00"),  # zero is one 0x00 byte, as BigInteger.toByteArray
        (D("-0.01"), '"/w=="', "-0.01"),
        (D("12.3"), '"BM4="', "12.30"),  # another exponent: rescaled to the schema's scale
    ],
)
def test_decimal_wire_formats(value: D, base64_text: str, numeric_text: str) -> None:
    schema = decimal_schema(2)
    schema_json = (
        '{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal",'
        '"version":1,"parameters":{"scale":"2"}}'
    )
    for fmt, payload in (("BASE64", base64_text), ("NUMERIC", numeric_text)):
        converter = json_converter(decimal_format=fmt)
        written = converter.from_connect("t", schema, value)
        assert written == f'{{"schema":{schema_json},"payload":{payload}}}'.encode()
        read = round_trip(converter, schema, value)
        assert read == value and read.as_tuple().exponent == -2


def test_numeric_decimal_reads_numbers_and_base64_alike() -> None:
    schema_json = (
        '{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal",'
        '"version":1,"parameters":{"scale":"3"}}'
    )
    for payload in ("1.5", "1.500", '"Bdw="', "1.5E0"):
        text = f'{{"schema":{schema_json},"payload":{payload}}}'.encode()
        assert JsonConverter().to_connect("t", text)[1] == D("1.500")


def test_reads_and_rewrites_a_kafka_record_byte_for_byte() -> None:
    kafka = (
        b'{"schema":{"type":"struct","fields":['
        b'{"type":"int64","optional":false,"field":"id"},'
        b'{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal",'
        b'"version":1,"parameters":{"scale":"2"},"field":"price"},'
        b'{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date",'
        b'"version":1,"field":"day"},'
        b'{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Time",'
        b'"version":1,"field":"at"},'
        b'{"type":"int64","optional":false,"name":"org.apache.kafka.connect.data.Timestamp",'
        b'"version":1,"field":"ts"},'
        b'{"type":"array","items":{"type":"double","optional":false},"optional":false,'
        b'"field":"scores"},'
        b'{"type":"map","keys":{"type":"string","optional":false},'
        b'"values":{"type":"float","optional":true},"optional":true,"field":"tags"},'
        b'{"type":"boolean","optional":false,"default":true,"field":"live"}],'
        b'"optional":false,"name":"shop.Order","version":3,"doc":"an order"},'
        b'"payload":{"id":7,"price":"BNI=","day":19723,"at":3723004,"ts":1704164645678,'
        b'"scores":[1.5,1.0E10,1.0E-5,-0.0],"tags":{"a":0.1,"b":null},"live":false}}'
    )
    converter = JsonConverter()
    schema, order = converter.to_connect("t", kafka)
    assert schema is not None and schema.name == "shop.Order" and schema.version == 3
    assert schema.doc == "an order" and schema.field("live") is not None
    assert order.get("id") == 7 and order.get("price") == D("12.34")
    assert order.get("day") == datetime.date(2024, 1, 1)
    assert order.get("at") == datetime.time(1, 2, 3, 4000)
    assert order.get("ts") == datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert order.get("scores") == [1.5, 1e10, 1e-5, 0.0]
    assert order.get("tags") == {"a": 0.1, "b": None} and order.get("live") is False
    assert converter.from_connect("t", schema, order) == kafka


@pytest.mark.parametrize(
    ("schema", "value", "text"),
    [
        (FLOAT64_SCHEMA, 1e10, "1.0E10"),  # Java's Double.toString
        (FLOAT64_SCHEMA, 1234567.0, "1234567.0"),
        (FLOAT64_SCHEMA, 12345678.9, "1.23456789E7"),
        (FLOAT64_SCHEMA, 0.001, "0.001"),
        (FLOAT64_SCHEMA, 0.0001, "1.0E-4"),
        (FLOAT64_SCHEMA, -2.5e-300, "-2.5E-300"),
        (FLOAT64_SCHEMA, 3, "3.0"),
        (FLOAT64_SCHEMA, math.inf, '"Infinity"'),  # Jackson quotes non-numbers
        (FLOAT32_SCHEMA, 0.1, "0.1"),  # Float.toString: float precision
        (FLOAT32_SCHEMA, 16777217.0, "1.6777216E7"),
        (FLOAT32_SCHEMA, -0.0, "-0.0"),
        (FLOAT64_SCHEMA, 5e-324, "4.9E-324"),  # Double.MIN_VALUE: two digits, the closest
        (FLOAT32_SCHEMA, 1e-45, "1.4E-45"),  # Float.MIN_VALUE
        (FLOAT32_SCHEMA, 3.4028235e38, "3.4028235E38"),  # Float.MAX_VALUE
    ],
)
def test_floats_are_spelled_as_java_does(schema: Schema, value: float, text: str) -> None:
    converter = json_converter(schemas_enable=False)
    assert converter.from_connect("t", schema, value) == text.encode()


def test_special_floats_read_back() -> None:
    converter = JsonConverter()
    assert round_trip(converter, FLOAT64_SCHEMA, -math.inf) == -math.inf
    assert math.isnan(round_trip(converter, FLOAT64_SCHEMA, math.nan))


def test_strings_are_escaped_as_jackson_does() -> None:
    written = json_converter(schemas_enable=False).from_connect("t", None, 'a"\\\n\x1f\té€')
    assert written == '"a\\"\\\\\\n\\u001F\\té€"'.encode()  # Jackson's hex is upper case


def test_schema_attributes_in_kafkas_order() -> None:
    schema = Schema(
        Type.INT16, optional=True, default=5, name="n", version=2, doc="d",
        parameters=(("p", "v"),),
    )  # fmt: skip
    nested = Schema(Type.ARRAY, value_schema=schema)
    assert JsonConverter().schema_to_json(nested) == {
        "type": "array",
        "items": {
            "type": "int16", "optional": True, "name": "n", "version": 2, "doc": "d",
            "parameters": {"p": "v"}, "default": 5,
        },
        "optional": False,
    }  # fmt: skip
    written = JsonConverter().from_connect("t", nested, [1, None])
    assert written is not None and written.index(b'"doc"') < written.index(b'"parameters"')
    assert written.endswith(b'"default":5},"optional":false},"payload":[1,5]}')
    assert round_trip(JsonConverter(), nested, [1, None]) == [1, 5]


@pytest.mark.parametrize(
    ("key_schema", "value", "payload"),
    [
        (STRING_SCHEMA, {"a": 1, "b": 2}, '{"a":1,"b":2}'),
        (INT32_SCHEMA, {1: 1, -2: 2}, "[[1,1],[-2,2]]"),
        (PERSON, {Struct(PERSON, {"id": 3}): 4}, '[[{"id":3,"name":null},4]]'),
    ],
)
def test_maps_with_string_keys_are_objects_others_pairs(
    key_schema: Schema, value: dict[Any, int], payload: str
) -> None:
    schema = Schema(Type.MAP, key_schema=key_schema, value_schema=INT64_SCHEMA)
    converter = json_converter(schemas_enable=False)
    assert converter.from_connect("t", schema, value) == payload.encode()
    assert round_trip(JsonConverter(), schema, value) == value


# --- round trips ----------------------------------------------------------------------------

INNER = struct_schema(
    [("x", FLOAT32_SCHEMA), ("tags", Schema(Type.ARRAY, value_schema=STRING_SCHEMA))]
)
OUTER = struct_schema(
    [
        ("inner", INNER),
        ("maybe", INNER.as_optional()),
        ("by_id", Schema(Type.MAP, key_schema=INT64_SCHEMA, value_schema=INNER)),
        ("amounts", Schema(Type.ARRAY, value_schema=decimal_schema(4, optional=True))),
        ("when", Schema(Type.MAP, key_schema=STRING_SCHEMA, value_schema=TIMESTAMP_SCHEMA)),
    ],
    name="Outer",
)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        (BOOLEAN_SCHEMA, True),
        (INT8_SCHEMA, -128),
        (INT16_SCHEMA, 32767),
        (INT32_SCHEMA, -(2**31)),
        (INT64_SCHEMA, 2**63 - 1),
        (FLOAT32_SCHEMA, 1.5),
        (FLOAT64_SCHEMA, 0.1),
        (STRING_SCHEMA, "snow ☃ and \x00 nul"),
        (BYTES_SCHEMA, b"\x00\xff\x10"),
        (OPTIONAL_INT64_SCHEMA, None),
        (decimal_schema(0), D("-123456789012345678901234567890123456789")),
        (decimal_schema(-2), D("1.2E+5")),
        (DATE_SCHEMA, datetime.date(1, 1, 1)),
        (DATE_SCHEMA, datetime.date(9999, 12, 31)),
        (TIME_SCHEMA, datetime.time(0, 0)),
        (TIME_SCHEMA, datetime.time(23, 59, 59, 999000)),
        (TIMESTAMP_SCHEMA, datetime.datetime(1969, 7, 20, 20, 17, 40, 1000, tzinfo=UTC)),
        (Schema(Type.ARRAY, value_schema=OPTIONAL_STRING_SCHEMA), ["a", None, ""]),
        (
            OUTER,
            Struct(OUTER, {
                "inner": Struct(INNER, {"x": 0.5, "tags": ["t"]}),
                "by_id": {7: Struct(INNER, {"x": -1.0, "tags": []})},
                "amounts": [D("1.0000"), None],
                "when": {"now": datetime.datetime(2024, 2, 29, tzinfo=UTC)},
            }),
        ),
    ],
)  # fmt: skip
def test_round_trip(schema: Schema, value: Any) -> None:
    for fmt in ("BASE64", "NUMERIC"):
        assert round_trip(json_converter(decimal_format=fmt), schema, value) == value


def test_sub_millisecond_and_zone_are_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    converter = JsonConverter()
    monkeypatch.setenv("TZ", "America/New_York")  # naive means UTC, not the local zone
    time.tzset()
    try:
        naive_midnight = converter.from_connect(
            "t", TIMESTAMP_SCHEMA, datetime.datetime(1970, 1, 2)
        )
        assert naive_midnight is not None and naive_midnight.endswith(b'"payload":86400000}')
    finally:
        monkeypatch.undo()
        time.tzset()
    naive = datetime.datetime(2000, 1, 1, 12, 0, 0, 123456)
    assert round_trip(converter, TIMESTAMP_SCHEMA, naive) == naive.replace(
        microsecond=123000, tzinfo=UTC
    )
    paris = datetime.datetime(2000, 1, 1, 13, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert round_trip(converter, TIMESTAMP_SCHEMA, paris) == datetime.datetime(
        2000, 1, 1, 12, tzinfo=UTC
    )
    assert round_trip(converter, TIME_SCHEMA, datetime.time(1, 2, 3, 999)) == datetime.time(1, 2, 3)


# --- nulls and defaults ---------------------------------------------------------------------

WITH_DEFAULT = struct_schema(
    [("n", Schema(Type.INT32, optional=True, default=7)), ("s", OPTIONAL_STRING_SCHEMA)]
)


def test_null_without_schema_is_a_tombstone() -> None:
    assert JsonConverter().from_connect("t", None, None) is None
    assert json_converter(schemas_enable=False).from_connect("t", None, None) is None
    assert JsonConverter().to_connect("t", None) == (None, None)
    assert JsonConverter().to_connect("t", b"") == (None, None)


def test_null_with_a_schema_is_written_as_kafka_writes_it() -> None:
    assert (
        JsonConverter().from_connect("t", OPTIONAL_STRING_SCHEMA, None)
        == b'{"schema":{"type":"string","optional":true},"payload":null}'
    )
    assert (
        json_converter(schemas_enable=False).from_connect("t", OPTIONAL_STRING_SCHEMA, None)
        == b"null"
    )
    with pytest.raises(DataException, match="required"):
        JsonConverter().from_connect("t", STRING_SCHEMA, None)


def test_defaults_replace_nulls_unless_configured_not_to() -> None:
    value = Struct(WITH_DEFAULT, {"s": "x"})
    replace, keep_null = JsonConverter(), json_converter(replace_null_with_default="false")
    written = replace.from_connect("t", WITH_DEFAULT, value)
    assert written is not None and written.endswith(b'"payload":{"n":7,"s":"x"}}')
    kept = keep_null.from_connect("t", WITH_DEFAULT, value)
    assert kept is not None and kept.endswith(b'"payload":{"n":null,"s":"x"}}')
    missing = written.replace(b'"payload":{"n":7,', b'"payload":{')
    assert replace.to_connect("t", missing)[1]._values == {"n": 7, "s": "x"}
    top = envelope('{"type":"int32","optional":true,"default":7}', "null")
    assert replace.to_connect("t", top)[1] == 7
    assert keep_null.to_connect("t", top)[1] is None
    assert keep_null.to_connect("t", missing)[1]._values == {"n": None, "s": "x"}


def test_only_json_true_makes_a_schema_optional() -> None:
    converter = JsonConverter()
    for optional in (True, 1, "true", None):
        schema = converter.schema_from_json({"type": "string", "optional": optional})
        assert schema is not None and schema.optional is (optional is True)


def test_unknown_payload_fields_are_ignored() -> None:
    text = envelope(
        '{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],'
        '"optional":false}',
        '{"id":1,"extra":[1]}',
    )
    assert JsonConverter().to_connect("t", text)[1].as_dict() == {"id": 1}


# --- schemas disabled -----------------------------------------------------------------------


def test_schemas_disabled_writes_payload_and_reads_plain_values() -> None:
    converter = json_converter(schemas_enable="false")
    value = Struct(PERSON, {"id": 1, "name": "Ann"})
    assert converter.from_connect("t", PERSON, value) == b'{"id":1,"name":"Ann"}'
    assert converter.from_connect("t", None, {"b": b"\x01", 2: 3}) == b'[["b","AQ=="],[2,3]]'
    text = b'{"schema":1,"payload":2,"n":[1,2.5,true,null,"s",{"x":-1E2}]}'
    assert converter.to_connect("t", text) == (
        None,
        {"schema": 1, "payload": 2, "n": [1, 2.5, True, None, "s", {"x": -100.0}]},
    )
    number = converter.to_connect("t", b"2.0")[1]
    assert type(number) is float and number == 2.0
    assert type(converter.to_connect("t", b"2")[1]) is int


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


@given(json_values)
def test_schemaless_json_round_trips(value: Any) -> None:
    converter = json_converter(schemas_enable=False)
    written = converter.from_connect("t", None, value)
    if value is None:
        assert written is None
        return
    assert written is not None and json.loads(written) == value  # any JSON reader agrees
    assert converter.to_connect("t", written) == (None, value)
    enveloped = JsonConverter().from_connect("t", None, value)
    assert enveloped == b'{"schema":null,"payload":' + written + b"}"
    assert JsonConverter().to_connect("t", enveloped) == (None, value)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_text_reads_back_exactly(value: float) -> None:
    written = json_converter(schemas_enable=False).from_connect("t", FLOAT64_SCHEMA, value)
    assert written is not None and float(written) == value
    assert (b"E" in written) == (value != 0 and not 1e-3 <= abs(value) < 1e7)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float_text_is_the_same_float32(value: float) -> None:
    written = json_converter(schemas_enable=False).from_connect("t", FLOAT32_SCHEMA, value)
    assert written is not None
    assert struct.pack(">f", float(written)) == struct.pack(">f", value)
    assert len(written.lstrip(b"-").replace(b".", b"").split(b"E")[0].strip(b"0")) <= 9


@given(st.integers(min_value=-(2**200), max_value=2**200), st.integers(-30, 30))
def test_decimals_round_trip(unscaled: int, scale: int) -> None:
    value = D(f"{unscaled}E{-scale}")
    for fmt in ("BASE64", "NUMERIC"):
        assert round_trip(json_converter(decimal_format=fmt), decimal_schema(scale), value) == value


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        b'{"payload":1}',
        b'{"schema":null}',
        b'{"schema":null,"payload":1,"extra":2}',
        b"[1,2]",
        b"42",
        b'{"a":1,"b":2}',
    ],
)
def test_schemas_enabled_requires_the_envelope(text: bytes) -> None:
    with pytest.raises(DataException, match='requires "schema" and "payload" fields'):
        JsonConverter().to_connect("t", text)


@pytest.mark.parametrize(
    "text", [b"{", b"nul", b'{"a":NaN}', b"\xff\xfe\xfa", b"[1,]", b"Infinity"]
)
def test_invalid_json(text: bytes) -> None:
    for converter in (JsonConverter(), json_converter(schemas_enable=False)):
        with pytest.raises(DataException, match="serialization error"):
            converter.to_connect("t", text)


@pytest.mark.parametrize(
    ("schema", "payload", "error"),
    [
        ('{"type":"int8","optional":false}', "128", "out of range for int8"),
        ('{"type":"int32","optional":false}', "-2147483649", "out of range for int32"),
        ('{"type":"int64","optional":false}', "9223372036854775808", "out of range for int64"),
        ('{"type":"int32","optional":false}', "1.5", "Invalid JSON for a int32"),
        ('{"type":"int32","optional":false}', '"1"', "Invalid JSON for a int32"),
        ('{"type":"int32","optional":false}', "true", "Invalid JSON for a int32"),
        ('{"type":"boolean","optional":false}', "1", "Invalid JSON for a boolean"),
        ('{"type":"string","optional":false}', "null", "null value for required STRING"),
        ('{"type":"bytes","optional":false}', '"not base64!"', "Invalid bytes"),
        ('{"type":"struct","fields":[],"optional":false}', "[]", "Invalid JSON for a struct"),
        ('{"type":"map","keys":{"type":"int8","optional":false},"values":{"type":"int8",'
         '"optional":false},"optional":false}', '{"1":1}', "JSON arrays of \\[key, value\\]"),
        ('{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"int8",'
         '"optional":false},"optional":false}', "[]", "encoded as JSON objects"),
        ('{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Time"}',
         "86400000", "Time values must be"),
        ('{"type":"int32","optional":false,"name":"org.apache.kafka.connect.data.Date"}',
         "3000000", "out of range"),
        ('{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal",'
         '"parameters":{"scale":"1"}}', "1.25", "more digits than scale 1"),
        ('{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal"}',
         '"AQ=="', "scale parameter not found"),
        ('{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal",'
         '"parameters":{"scale":"1"}}', '""', "Invalid bytes for Decimal"),
        ('{"type":"uuid","optional":false}', "1", "known 'type'"),
        ('{"optional":false}', "1", "known 'type'"),
        ('{"type":"array","optional":false}', "[]", "did not specify its 'items'"),
        ('{"type":"struct","optional":false}', "{}", '"fields" argument is not an array'),
        ('{"type":"struct","fields":[{"type":"int8"}]}', "{}", "field name not specified"),
        ('{"type":"int8","parameters":{"a":1}}', "1", "must have string values"),
    ],
)  # fmt: skip
def test_payloads_that_do_not_fit_their_schema(schema: str, payload: str, error: str) -> None:
    with pytest.raises(DataException, match=error):
        JsonConverter().to_connect("t", envelope(schema, payload))


@pytest.mark.parametrize(
    ("schema", "value", "error"),
    [
        (INT8_SCHEMA, 200, "out of range for int8"),
        (INT32_SCHEMA, "7", "Invalid type for INT32"),
        (INT64_SCHEMA, True, "Invalid type for INT64"),
        (STRING_SCHEMA, b"x", "Invalid type for STRING"),
        (FLOAT32_SCHEMA, 1e39, "out of range for float32"),
        (FLOAT64_SCHEMA, "1.0", "Invalid type for FLOAT64"),
        (FLOAT64_SCHEMA, 10**400, "out of range for float64"),
        (BYTES_SCHEMA, "x", "Invalid type for BYTES"),
        (PERSON, {"id": 1}, "Invalid type for STRUCT"),
        (struct_schema([("id", INT32_SCHEMA)]), Struct(PERSON, {"id": 1}), "Mismatching schema"),
        (PERSON, Struct(PERSON, {"name": "no id"}), "required"),
        (decimal_schema(2), 1.5, "Invalid type for Decimal"),
        (decimal_schema(1), D("1.25"), "more digits than scale 1"),
        (decimal_schema(1), D("NaN"), "not a valid Decimal"),
        (DATE_SCHEMA, datetime.datetime(2024, 1, 1), "Invalid type for Date"),
        (
            TIME_SCHEMA,
            datetime.time(1, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
            "not in UTC",
        ),
        (TIMESTAMP_SCHEMA, 0, "Invalid type for Timestamp"),
        (None, D("1"), "does not have a corresponding schema type"),
        (None, Struct(PERSON, {"id": 1}), "Mismatching schema"),
        (STRING_SCHEMA, "\ud800", "failed"),
    ],
)
def test_values_that_do_not_fit_their_schema(schema: Schema | None, value: Any, error: str) -> None:
    for converter in (JsonConverter(), json_converter(schemas_enable=False)):
        with pytest.raises(DataException, match=error):
            converter.from_connect("t", schema, value)


# --- StringConverter and ByteArrayConverter -------------------------------------------------


def test_string_converter() -> None:
    converter = StringConverter()
    converter.configure({}, is_key=True)
    assert converter.from_connect("t", None, "héllo") == "héllo".encode()
    assert converter.from_connect("t", INT32_SCHEMA, 42) == b"42"
    assert converter.from_connect("t", STRING_SCHEMA, None) is None
    assert converter.to_connect("t", "héllo".encode()) == (OPTIONAL_STRING_SCHEMA, "héllo")
    assert converter.to_connect("t", None) == (OPTIONAL_STRING_SCHEMA, None)
    assert converter.to_connect("t", b"a\xffb") == (OPTIONAL_STRING_SCHEMA, "a\ufffdb")


@pytest.mark.parametrize(
    ("encoding", "codec"), [("UTF8", "utf-8"), ("UTF-16", "utf-16"), ("ISO-8859-1", "latin-1")]
)
def test_string_converter_encodings(encoding: str, codec: str) -> None:
    converter = make_converter(
        "key.converter", "StringConverter", {"converter.encoding": encoding}, True
    )
    assert converter.from_connect("t", None, "né") == "né".encode(codec)
    assert converter.to_connect("t", "né".encode(codec)) == (OPTIONAL_STRING_SCHEMA, "né")
    latin = make_converter("k", "StringConverter", {"converter.encoding": "latin-1"}, True)
    assert latin.from_connect("t", None, "€") == b"?"  # as Java: unmappable → '?'


def test_byte_array_converter() -> None:
    converter = ByteArrayConverter()
    converter.configure({}, is_key=False)
    assert converter.from_connect("t", BYTES_SCHEMA, b"\x00\x01") == b"\x00\x01"
    assert converter.from_connect("t", None, bytearray(b"ab")) == b"ab"
    assert converter.from_connect("t", OPTIONAL_BYTES_SCHEMA, None) is None
    assert converter.to_connect("t", b"\xff") == (OPTIONAL_BYTES_SCHEMA, b"\xff")
    assert converter.to_connect("t", None) == (OPTIONAL_BYTES_SCHEMA, None)
    with pytest.raises(DataException, match="not compatible"):
        converter.from_connect("t", None, "text")
    with pytest.raises(DataException, match="Invalid schema type"):
        converter.from_connect("t", STRING_SCHEMA, b"x")


# --- registry and configs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("org.apache.kafka.connect.json.JsonConverter", JsonConverter),
        ("org.apache.kafka.connect.storage.StringConverter", StringConverter),
        ("org.apache.kafka.connect.converters.ByteArrayConverter", ByteArrayConverter),
        (" JsonConverter ", JsonConverter),
        ("StringConverter", StringConverter),
        ("ByteArrayConverter", ByteArrayConverter),
    ],
)
def test_converter_names(name: str, cls: type) -> None:
    assert converter_class("value.converter", name) is cls
    assert isinstance(make_converter("value.converter", name, {}, False), cls)


def test_unknown_converter_names_the_key() -> None:
    for name in ("io.confluent.connect.avro.AvroConverter", "jsonconverter", ""):
        with pytest.raises(ConfigException) as raised:
            make_converter("value.converter", name, {}, False)
        assert raised.value.name == "value.converter"


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"schemas.enable": "maybe"}, "value.converter.schemas.enable"),
        ({"decimal.format": "HEX"}, "value.converter.decimal.format"),
        ({"schemas.cache.size": "lots"}, "value.converter.schemas.cache.size"),
        ({"replace.null.with.default": "1"}, "value.converter.replace.null.with.default"),
    ],
)
def test_bad_json_configs_name_the_prefixed_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigException) as raised:
        make_converter("value.converter", "JsonConverter", config, False)
    assert raised.value.name == key


def test_bad_encoding_names_the_prefixed_key() -> None:
    with pytest.raises(ConfigException) as raised:
        make_converter("key.converter", "StringConverter", {"converter.encoding": "EBCDIC-9"}, True)
    assert raised.value.name == "key.converter.converter.encoding"


def test_configs_as_strings_or_typed_and_described() -> None:
    converter = make_converter(
        "value.converter", "JsonConverter",
        {"schemas.enable": False, "decimal.format": "numeric", "schemas.cache.size": "0"}, False,
    )  # fmt: skip
    assert isinstance(converter, JsonConverter)
    assert not converter.schemas_enable and converter.numeric_decimals
    assert converter.replace_null_with_default
    defaults = {
        entry["definition"]["name"]: entry["definition"]["default_value"]
        for entry in JsonConverter.config_def.validate({"converter.type": "value"})
    }
    assert defaults == {
        "converter.type": None, "schemas.enable": "true", "schemas.cache.size": "1000",
        "decimal.format": "BASE64", "replace.null.with.default": "true",
    }  # fmt: skip
    assert StringConverter.config_def.keys["converter.encoding"].default == "UTF8"
    assert list(ByteArrayConverter.config_def.keys) == ["converter.type"]


# --- the fast writer (compiled per schema, orjson) against the exact one ----------------------

_FAST_SCHEMA = struct_schema(
    [
        ("s", Schema(Type.STRING, optional=True)),
        ("i", Schema(Type.INT32)),
        ("l", Schema(Type.INT64, optional=True, default=7)),
        ("f", Schema(Type.FLOAT64, optional=True)),
        ("g", Schema(Type.FLOAT32, optional=True)),
        ("b", Schema(Type.BOOLEAN, optional=True)),
        ("raw", Schema(Type.BYTES, optional=True)),
        ("inner", struct_schema([("t", Schema(Type.STRING))], name="inner", optional=True)),
    ],
    name="outer",
)


@given(
    s=st.none() | st.text(),
    i=st.integers(-(2**31), 2**31 - 1),
    lng=st.none() | st.integers(-(2**63), 2**63 - 1),
    f=st.none() | st.floats(allow_nan=True, allow_infinity=True),
    g=st.none() | st.floats(width=32, allow_nan=False),
    b=st.none() | st.booleans(),
    raw=st.none() | st.binary(max_size=8),
    inner=st.none() | st.text(max_size=5),
    schemas=st.booleans(),
)
def test_the_fast_writer_writes_what_the_exact_one_does(
    s: Any, i: int, lng: Any, f: Any, g: Any, b: Any, raw: Any, inner: Any, schemas: bool
) -> None:
    from data_plane.connect.converters import JsonConverter, _dumps

    converter = JsonConverter()
    converter.configure({"schemas.enable": schemas}, is_key=False)
    nested = None if inner is None else Struct(_FAST_SCHEMA.fields[7].schema, {"t": inner})
    value = Struct(_FAST_SCHEMA, {"s": s, "i": i, "l": lng, "f": f, "g": g, "b": b,
                                  "raw": raw, "inner": nested})  # fmt: skip
    payload = converter._to_json(_FAST_SCHEMA, value)
    exact = _dumps(
        {"schema": converter.schema_to_json(_FAST_SCHEMA), "payload": payload}
        if schemas else payload
    )  # fmt: skip
    try:
        fast = converter.from_connect("t", _FAST_SCHEMA, value)
    except DataException:
        with pytest.raises(DataException):
            _dumps(payload)  # both refuse (a lone surrogate)
        return
    assert fast == exact
    # Read back: orjson's reading equals the exact reader's.
    from data_plane.connect.converters import _loads

    read_schema, read = converter.to_connect("t", fast)
    doc = _loads(fast)
    exact_read = converter._from_json(read_schema, doc["payload"] if schemas else doc)
    if schemas:
        assert converter.from_connect("t", read_schema, read) == converter.from_connect(
            "t", read_schema, exact_read
        )


# --- reading a topic's repeated schema once -------------------------------------------------


def _outcome(converter: JsonConverter, data: bytes) -> Any:
    try:
        return converter.to_connect("t", data)
    except DataException as exc:
        return DataException, str(exc)


PRICED = struct_schema(
    [("id", INT64_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA), ("price", decimal_schema(2)),
     ("at", TIMESTAMP_SCHEMA), ("ok", Schema(Type.BOOLEAN, optional=True)),
     ("x", Schema(Type.FLOAT64, optional=True))],
    name="priced",
)  # fmt: skip


def test_records_after_the_first_of_a_schema_read_the_same_as_alone() -> None:
    writer, warm = JsonConverter(), JsonConverter()
    at = datetime.datetime(2026, 1, 1, tzinfo=UTC)

    def priced(i: int) -> Struct:
        return Struct(PRICED, {"id": i, "name": None if i % 3 == 0 else f"n{i}",
                               "price": D(i) / 4, "at": at, "ok": i % 2 == 0,
                               "x": None if i % 5 == 0 else i / 7})  # fmt: skip

    records = [writer.from_connect("t", PRICED, priced(i)) for i in range(50)]
    for data in records:
        assert warm.to_connect("t", data) == JsonConverter().to_connect("t", data)
    assert warm._prefixes["t"][1] is warm.to_connect("t", records[0])[0]
    # Exact reading still applies: a decimal beyond a double's digits, an int beyond 64 bits.
    wide = Struct(PRICED, {"id": 1, "price": D("12345678901234567890.25"), "at": at})
    big = writer.from_connect("t", PRICED, wide)
    assert warm.to_connect("t", big)[1].get("price") == D("12345678901234567890.25")
    huge = big.replace(b'"id":1,', b'"id":' + str(2**70).encode() + b",")
    assert _outcome(warm, huge) == _outcome(JsonConverter(), huge)
    assert _outcome(warm, huge)[0] is DataException


@pytest.mark.parametrize(
    "payload",
    [
        b'{"id":1},"schema":null',  # a second "schema" key after the payload
        b'{"id":1},"payload":{"id":2}',  # a second payload
        b'{"id":1}} ',  # whitespace after the document
        b'{"id":1',  # cut short
        b"",  # no payload at all
        b'{"id":"one"}',  # a payload that does not fit
        b"null",
    ],
)
def test_a_known_schema_does_not_hide_the_rest_of_the_document(payload: bytes) -> None:
    warm = JsonConverter()
    first = envelope(PERSON_JSON, '{"id":1,"name":"a"}')
    warm.to_connect("t", first)
    assert "t" in warm._prefixes
    data = first[: first.index(b'"payload":') + len(b'"payload":')] + payload + b"}"
    assert _outcome(warm, data) == _outcome(JsonConverter(), data)


PERSON_JSON = (
    '{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},'
    '{"type":"string","optional":true,"field":"name"}],"optional":false}'
)


def test_a_schema_that_spells_the_payload_marker_is_read_whole() -> None:
    # The schema's parameters have a key "payload": the marker appears inside the schema.
    tricky = PERSON_JSON[:-1] + ',"parameters":{"a":"1","payload":"2"}}'
    converter = JsonConverter()
    for i in range(3):
        schema, value = converter.to_connect("t", envelope(tricky, f'{{"id":{i}}}'))
        assert schema is not None and schema.params == {"a": "1", "payload": "2"}
        assert value.get("id") == i
    assert "t" not in converter._prefixes
