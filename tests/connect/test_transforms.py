"""Single message transforms and predicates as Kafka Connect defines them: each transform's
key and value variants with and without schemas, tombstones, the predicate/negate wiring
and config errors naming the full key."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest

from data_plane.connect.config import ConfigException
from data_plane.connect.data import (
    BOOLEAN_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    TIMESTAMP_SCHEMA,
    ConnectRecord,
    DataException,
    Schema,
    Struct,
    Type,
    decimal_schema,
    struct_schema,
)
from data_plane.connect.predicates import PREDICATES, java_regex
from data_plane.connect.transforms import (
    TRANSFORMS,
    Transformation,
    build_chain,
    chain_errors,
    compile_date_format,
)

UTC = datetime.UTC
TS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z

PERSON = struct_schema(
    [("id", INT64_SCHEMA), ("name", STRING_SCHEMA), ("email", OPTIONAL_STRING_SCHEMA)],
    name="com.example.Person",
)


def person(id_: int = 7, name: str = "Ada", email: str | None = "ada@example.com") -> Struct:
    return Struct(PERSON, {"id": id_, "name": name, "email": email})


def record(
    value: Any = None,
    value_schema: Schema | None = None,
    key: Any = None,
    key_schema: Schema | None = None,
    **changes: Any,
) -> ConnectRecord:
    base = ConnectRecord("orders", 3, key_schema, key, value_schema, value, timestamp=TS)
    return base.new_record(**changes)


def make(type_name: str, **config: str) -> Transformation:
    """A configured transform; config keys are given with ``_`` for ``.``."""
    transform = TRANSFORMS[type_name]()
    transform.configure({k.replace("_", "."): v for k, v in config.items()})
    return transform


def applied(transform: Transformation, rec: ConnectRecord) -> ConnectRecord:
    out = transform.apply(rec)
    assert out is not None
    return out


# --- InsertField ------------------------------------------------------------------------


INSERT_ALL = {
    "topic.field": "topic",
    "partition.field": "partition",
    "offset.field": "offset",
    "timestamp.field": "ts",
    "static.field": "source",
    "static.value": "millrace",
}


def test_insert_field_schemaless_value() -> None:
    t = TRANSFORMS["InsertField$Value"]()
    t.configure(INSERT_ALL)
    out = applied(t, record({"id": 1}, kafka_offset=42))
    assert out.value == {
        "id": 1, "topic": "orders", "partition": 3, "offset": 42, "ts": TS, "source": "millrace",
    }  # fmt: skip
    assert out.value_schema is None and out.key is None


def test_insert_field_with_schema_builds_new_schema_and_struct() -> None:
    t = TRANSFORMS["org.apache.kafka.connect.transforms.InsertField$Value"]()
    t.configure({**INSERT_ALL, "topic.field": "topic!", "partition.field": "partition?"})
    out = applied(t, record(person(), PERSON, kafka_offset=42))
    schema = out.value_schema
    assert schema is not None and schema.name == "com.example.Person"
    assert [f.name for f in schema.fields] == [
        "id", "name", "email", "topic", "partition", "offset", "ts", "source",
    ]  # fmt: skip
    assert schema.field("topic").schema == STRING_SCHEMA  # type: ignore[union-attr]
    assert schema.field("partition").schema == INT32_SCHEMA.as_optional()  # type: ignore[union-attr]
    assert schema.field("ts").schema == TIMESTAMP_SCHEMA.as_optional()  # type: ignore[union-attr]
    assert out.value.as_dict() == {
        "id": 7, "name": "Ada", "email": "ada@example.com", "topic": "orders",
        "partition": 3, "offset": 42, "source": "millrace",
        "ts": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
    }  # fmt: skip
    # The derived schema is cached per input schema.
    again = applied(t, record(person(8), PERSON, kafka_offset=43))
    assert again.value_schema is schema


def test_insert_field_key_variant() -> None:
    t = make("InsertField$Key", topic_field="topic")
    out = applied(t, record("v", STRING_SCHEMA, key=person(), key_schema=PERSON))
    assert out.key.get("topic") == "orders" and out.key.get("id") == 7
    assert out.key_schema is not None and out.key_schema.field("topic") is not None
    assert out.value == "v" and out.value_schema == STRING_SCHEMA
    assert applied(t, record(key={"k": 1})).key == {"k": 1, "topic": "orders"}


def test_insert_field_offset_is_for_sink_records() -> None:
    # A source record has no Kafka offset: an optional field is left out (null with a
    # schema), a required one is an error.
    optional = make("InsertField$Value", offset_field="offset")
    assert applied(optional, record({"a": 1})).value == {"a": 1}
    out = applied(optional, record(person(), PERSON))
    assert out.value.get("offset") is None
    required = make("InsertField$Value", offset_field="offset!")
    with pytest.raises(DataException, match="offset"):
        required.apply(record({"a": 1}))
    with pytest.raises(DataException, match="offset"):
        required.apply(record(person(), PERSON))
    assert applied(required, record({"a": 1}, kafka_offset=9)).value == {"a": 1, "offset": 9}


def test_insert_field_required_timestamp_missing() -> None:
    t = make("InsertField$Value", timestamp_field="ts!")
    with pytest.raises(DataException, match="timestamp"):
        t.apply(record({"a": 1}, timestamp=None))
    assert applied(
        make("InsertField$Value", timestamp_field="ts"), record({"a": 1}, timestamp=None)
    ).value == {"a": 1}


def test_insert_field_tombstone_and_wrong_type() -> None:
    t = make("InsertField$Value", topic_field="topic")
    tombstone = record(None, PERSON)
    assert t.apply(tombstone) is tombstone
    with pytest.raises(DataException, match="Only Map objects supported"):
        t.apply(record("a string"))
    with pytest.raises(DataException, match="Only Struct objects supported"):
        t.apply(record("a string", STRING_SCHEMA))
    with pytest.raises(DataException, match="duplicate field"):
        make("InsertField$Value", topic_field="name").apply(record(person(), PERSON))


# --- ReplaceField -----------------------------------------------------------------------


def test_replace_field_schemaless() -> None:
    value = {"id": 1, "name": "Ada", "email": "a@x", "ssn": "123"}
    t = make("ReplaceField$Value", exclude="ssn", renames="name:full_name,id:person_id")
    assert applied(t, record(value)).value == {"person_id": 1, "full_name": "Ada", "email": "a@x"}
    include = make("ReplaceField$Value", include="id,name,ssn", exclude="ssn")
    assert applied(include, record(value)).value == {"id": 1, "name": "Ada"}


def test_replace_field_with_schema() -> None:
    t = make("ReplaceField$Value", include="id,name", renames="name:full_name")
    out = applied(t, record(person(), PERSON))
    assert out.value_schema is not None and out.value_schema.name == "com.example.Person"
    assert [(f.name, f.schema) for f in out.value_schema.fields] == [
        ("id", INT64_SCHEMA), ("full_name", STRING_SCHEMA),
    ]  # fmt: skip
    assert out.value.as_dict() == {"id": 7, "full_name": "Ada"}
    assert applied(t, record(person(8), PERSON)).value_schema is out.value_schema


def test_replace_field_key_and_deprecated_aliases() -> None:
    t = make("ReplaceField$Key", blacklist="email")
    out = applied(t, record("v", key=person(), key_schema=PERSON))
    assert out.key.as_dict() == {"id": 7, "name": "Ada"} and out.value == "v"
    whitelist = make("ReplaceField$Key", whitelist="id")
    assert applied(whitelist, record(key={"id": 1, "x": 2})).key == {"id": 1}
    # The current key wins over its deprecated alias.
    both = make("ReplaceField$Value", exclude="a", blacklist="b")
    assert applied(both, record({"a": 1, "b": 2})).value == {"b": 2}


def test_replace_field_bad_renames() -> None:
    with pytest.raises(ConfigException) as err:
        make("ReplaceField$Value", renames="a:b,nocolon")
    assert err.value.name == "renames"
    assert record(None) == applied(make("ReplaceField$Value", exclude="a"), record(None))


# --- MaskField --------------------------------------------------------------------------


def test_mask_field_schemaless_empty_values() -> None:
    value = {
        "i": 5, "f": 2.5, "b": True, "s": "secret", "l": [1, 2], "m": {"a": 1},
        "d": decimal.Decimal("9.99"), "t": datetime.datetime(2024, 1, 1, tzinfo=UTC),
        "n": None, "keep": "me",
    }  # fmt: skip
    t = make("MaskField$Value", fields="i,f,b,s,l,m,d,t,n,absent")
    assert applied(t, record(value)).value == {
        "i": 0, "f": 0.0, "b": False, "s": "", "l": [], "m": {},
        "d": decimal.Decimal(0), "t": datetime.datetime(1970, 1, 1, tzinfo=UTC),
        "n": None, "keep": "me",
    }  # fmt: skip
    with pytest.raises(DataException, match="Cannot mask"):
        t.apply(record({"i": person()}))


def test_mask_field_with_schema_and_replacement() -> None:
    schema = struct_schema(
        [("small", INT8_SCHEMA), ("id", INT64_SCHEMA), ("name", STRING_SCHEMA),
         ("price", decimal_schema(2)), ("ok", BOOLEAN_SCHEMA), ("x", FLOAT64_SCHEMA)]
    )  # fmt: skip
    value = Struct(schema, {"small": 1, "id": 7, "name": "Ada",
                            "price": decimal.Decimal("1.50"), "ok": True, "x": 1.5})  # fmt: skip
    out = applied(
        make("MaskField$Value", fields="id,name,price,x", replacement="42"), record(value, schema)
    )
    assert out.value_schema is schema
    assert out.value.as_dict() == {
        "small": 1, "id": 42, "name": "42", "price": decimal.Decimal(42), "ok": True, "x": 42.0,
    }  # fmt: skip
    empty = applied(make("MaskField$Value", fields="small,ok"), record(value, schema))
    assert empty.value.get("small") == 0 and empty.value.get("ok") is False
    with pytest.raises(DataException, match="custom replacement"):
        make("MaskField$Value", fields="ok", replacement="true").apply(record(value, schema))
    with pytest.raises(DataException, match="Unable to convert"):
        make("MaskField$Value", fields="id", replacement="abc").apply(record(value, schema))
    with pytest.raises(DataException, match="out of range"):
        make("MaskField$Value", fields="small", replacement="1000").apply(record(value, schema))


def test_mask_field_key_and_config() -> None:
    out = applied(make("MaskField$Key", fields="name"), record(key=person(), key_schema=PERSON))
    assert out.key.get("name") == "" and out.key.get("id") == 7
    with pytest.raises(ConfigException) as err:
        make("MaskField$Value")
    assert err.value.name == "fields"
    with pytest.raises(ConfigException) as err:
        make("MaskField$Value", fields="a", replacement="")
    assert err.value.name == "replacement"


# --- ValueToKey -------------------------------------------------------------------------


def test_value_to_key() -> None:
    t = make("ValueToKey", fields="id,name")
    out = applied(t, record(person(), PERSON, key="old", key_schema=STRING_SCHEMA))
    assert out.key_schema == struct_schema([("id", INT64_SCHEMA), ("name", STRING_SCHEMA)])
    assert out.key.as_dict() == {"id": 7, "name": "Ada"} and out.value == person()
    assert applied(t, record({"id": 1, "name": "x", "z": 0}, key="old")).key == {
        "id": 1,
        "name": "x",
    }
    tombstone = record(None, PERSON, key="old")
    assert t.apply(tombstone) is tombstone
    with pytest.raises(DataException, match="Field does not exist: nope"):
        make("ValueToKey", fields="nope").apply(record(person(), PERSON))
    with pytest.raises(DataException, match="Only Map objects"):
        t.apply(record([1, 2]))


# --- ExtractField -----------------------------------------------------------------------


def test_extract_field_value_and_key() -> None:
    value_t = make("ExtractField$Value", field="name")
    out = applied(value_t, record(person(), PERSON))
    assert out.value == "Ada" and out.value_schema == STRING_SCHEMA
    assert applied(value_t, record({"name": "Bo"})).value == "Bo"
    assert applied(value_t, record({"other": 1})).value is None
    key_t = make("ExtractField$Key", field="id")
    out = applied(key_t, record("v", key=person(), key_schema=PERSON))
    assert out.key == 7 and out.key_schema == INT64_SCHEMA and out.value == "v"


def test_extract_field_errors_and_nulls() -> None:
    t = make("ExtractField$Value", field="nope")
    with pytest.raises(DataException, match="Unknown field: nope"):
        t.apply(record(person(), PERSON))
    with pytest.raises(DataException, match=r"Only Map objects supported .*found: int"):
        t.apply(record(5))
    with pytest.raises(DataException, match=r"Only Struct objects supported .*found: str"):
        t.apply(record("x", STRING_SCHEMA))
    tombstone = record(None, PERSON)
    assert t.apply(tombstone) is tombstone


def test_extract_field_v2_paths_and_null_defaults() -> None:
    inner = struct_schema([("city", STRING_SCHEMA)], optional=True)
    outer = struct_schema([("address", inner), ("a.b", INT32_SCHEMA)])
    value = Struct(outer, {"address": Struct(inner, {"city": "Oslo"}), "a.b": 5})
    nested = make("ExtractField$Value", field="address.city", field_syntax_version="V2")
    assert applied(nested, record(value, outer)).value == "Oslo"
    assert applied(nested, record({"address": {"city": "Rome"}})).value == "Rome"
    assert applied(nested, record({"address": "flat"})).value is None
    dotted = make("ExtractField$Value", field="`a.b`", field_syntax_version="V2")
    assert applied(dotted, record(value, outer)).value == 5
    # V1 takes the whole name, dots included.
    v1 = make("ExtractField$Value", field="a.b")
    assert applied(v1, record(value, outer)).value == 5
    with pytest.raises(DataException, match=r"Unknown field: address\.zip"):
        make("ExtractField$Value", field="address.zip", field_syntax_version="V2").apply(
            record(value, outer)
        )
    with pytest.raises(ConfigException) as err:
        make("ExtractField$Value", field="a", field_syntax_version="V3")
    assert err.value.name == "field.syntax.version"
    defaulted = struct_schema([("n", Schema(Type.INT64, optional=True, default=9))])
    rec = record(Struct(defaulted, {"n": None}), defaulted)
    assert applied(make("ExtractField$Value", field="n"), rec).value == 9
    keep_null = make("ExtractField$Value", field="n", replace_null_with_default="false")
    assert applied(keep_null, rec).value is None


# --- HoistField -------------------------------------------------------------------------


def test_hoist_field() -> None:
    t = make("HoistField$Value", field="line")
    assert applied(t, record("hello")).value == {"line": "hello"}
    out = applied(t, record("hello", STRING_SCHEMA))
    assert out.value_schema == struct_schema([("line", STRING_SCHEMA)])
    assert out.value == Struct(out.value_schema, {"line": "hello"})
    key = applied(make("HoistField$Key", field="k"), record("v", key=7, key_schema=INT64_SCHEMA))
    assert key.key.get("k") == 7 and key.value == "v"
    # As in Kafka, a null is wrapped too; with a schema it needs to be optional.
    assert applied(t, record(None)).value == {"line": None}
    assert applied(t, record(None, OPTIONAL_INT64_SCHEMA)).value.get("line") is None
    with pytest.raises(DataException):
        t.apply(record(None, INT64_SCHEMA))


# --- Flatten ----------------------------------------------------------------------------


def test_flatten_schemaless() -> None:
    value = {"a": {"b": {"c": 1}, "d": [1, 2]}, "e": None, "f": "x"}
    assert applied(make("Flatten$Value"), record(value)).value == {
        "a.b.c": 1, "a.d": [1, 2], "e": None, "f": "x",
    }  # fmt: skip
    out = applied(make("Flatten$Key", delimiter="_"), record(key={"a": {"b": 1}}))
    assert out.key == {"a_b": 1}
    with pytest.raises(DataException, match="Struct"):
        make("Flatten$Value").apply(record({"p": person()}))
    assert applied(make("Flatten$Value"), record(None)).value is None


def test_flatten_with_schema() -> None:
    address = struct_schema([("city", STRING_SCHEMA), ("zip", INT32_SCHEMA)], optional=True)
    schema = struct_schema(
        [
            ("id", INT64_SCHEMA),
            ("home", address),
            ("tags", Schema(Type.ARRAY, value_schema=STRING_SCHEMA)),
        ],
        name="Outer",
    )
    value = Struct(
        schema, {"id": 1, "home": Struct(address, {"city": "Oslo", "zip": 150}), "tags": ["a"]}
    )
    t = make("Flatten$Value")
    out = applied(t, record(value, schema))
    assert out.value_schema is not None and out.value_schema.name == "Outer"
    assert [(f.name, f.schema.type, f.schema.optional) for f in out.value_schema.fields] == [
        ("id", Type.INT64, False), ("home.city", Type.STRING, True),
        ("home.zip", Type.INT32, True), ("tags", Type.ARRAY, False),
    ]  # fmt: skip
    assert out.value.as_dict() == {"id": 1, "home.city": "Oslo", "home.zip": 150, "tags": ["a"]}
    empty = applied(t, record(Struct(schema, {"id": 2, "tags": []}), schema))
    assert empty.value.as_dict() == {"id": 2, "home.city": None, "home.zip": None, "tags": []}
    assert empty.value_schema is out.value_schema


# --- SetSchemaMetadata ------------------------------------------------------------------


def test_set_schema_metadata() -> None:
    t = make("SetSchemaMetadata$Value", schema_name="com.example.V2", schema_version="2")
    out = applied(t, record(person(), PERSON))
    assert out.value_schema is not None
    assert (out.value_schema.name, out.value_schema.version) == ("com.example.V2", 2)
    assert out.value.schema is out.value_schema and out.value.as_dict() == person().as_dict()
    key = applied(
        make("SetSchemaMetadata$Key", schema_version="3"),
        record("v", key="k", key_schema=STRING_SCHEMA),
    )
    assert key.key_schema == Schema(Type.STRING, version=3) and key.key == "k"
    with pytest.raises(DataException, match="schema"):
        t.apply(record({"schemaless": True}))
    with pytest.raises(ConfigException) as err:
        make("SetSchemaMetadata$Value")
    assert err.value.name == "schema.name"
    with pytest.raises(ConfigException) as err:
        make("SetSchemaMetadata$Value", schema_version="two")
    assert err.value.name == "schema.version"


# --- routers ----------------------------------------------------------------------------


def test_timestamp_router() -> None:
    assert applied(make("TimestampRouter"), record("v")).topic == "orders-20231114"
    t = make(
        "TimestampRouter",
        topic_format="${timestamp}/${topic}",
        timestamp_format="yy-MM-dd'T'HH:mm:ss.SSS''",
    )
    assert applied(t, record("v")).topic == "23-11-14T22:13:20.123'/orders"
    with pytest.raises(DataException, match="Timestamp missing"):
        t.apply(record("v", timestamp=None))
    for pattern in ("yyyyww", "G", "'open"):
        with pytest.raises(ConfigException) as err:
            make("TimestampRouter", timestamp_format=pattern)
        assert err.value.name == "timestamp.format"


def test_date_format_letters() -> None:
    fmt = compile_date_format("f", "EEE EEEE MMM MMMM d D u a h k K H")
    moment = datetime.datetime(2024, 2, 5, 0, 7, 9, tzinfo=UTC)  # a Monday
    assert fmt(moment) == "Mon Monday Feb February 5 36 1 AM 12 24 0 0"
    assert compile_date_format("f", "y yyy Z")(moment) == "2024 2024 +0000"


def test_regex_router() -> None:
    t = make("RegexRouter", regex="(.*)-raw", replacement="$1")
    assert applied(t, record("v", topic="clicks-raw")).topic == "clicks"
    # Full-match semantics: a partial match leaves the topic alone.
    partial = make("RegexRouter", regex="raw", replacement="x")
    assert applied(partial, record("v", topic="clicks-raw")).topic == "clicks-raw"
    named = make("RegexRouter", regex=r"(?<env>\w+)\.(.*)", replacement=r"${env}-$2-\$")
    assert applied(named, record("v", topic="prod.orders")).topic == "prod-orders-$"
    # "$10" with one group is group 1 followed by "0", as in Java.
    ten = make("RegexRouter", regex="(a)", replacement="$10")
    assert applied(ten, record("v", topic="a")).topic == "a0"
    optional_group = make("RegexRouter", regex="(x)?(.*)", replacement="[$1]$2")
    assert applied(optional_group, record("v", topic="abc")).topic == "[]abc"


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"regex": "(", "replacement": "x"}, "regex"),
        ({"regex": "(a)", "replacement": "$2"}, "replacement"),
        ({"regex": "(a)", "replacement": "${nope}"}, "replacement"),
        ({"regex": "(a)", "replacement": "$x"}, "replacement"),
        ({"regex": "(a)", "replacement": "trailing\\"}, "replacement"),
        ({"replacement": "x"}, "regex"),
    ],
)
def test_regex_router_config_errors(config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigException) as err:
        TRANSFORMS["RegexRouter"]().configure(config)
    assert err.value.name == key


def test_java_regex_translation() -> None:
    assert java_regex("p", r"\Qa.b\E(?<x>c)\k<x>").fullmatch("a.bcc")
    assert not java_regex("p", r"\Qa.b\E").fullmatch("axb")
    assert java_regex("p", r"(?<!a)b").fullmatch("b")


# --- Filter and headers -----------------------------------------------------------------


def test_filter_drops_everything() -> None:
    assert make("Filter").apply(record("v")) is None


def test_drop_and_insert_headers() -> None:
    rec = record("v", headers=(("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", None)))
    dropped = applied(make("DropHeaders", headers="a,c"), rec)
    assert dropped.headers == (("b", b"2"),) and dropped.value == "v"
    with pytest.raises(ConfigException) as err:
        make("DropHeaders")
    assert err.value.name == "headers"
    inserted = applied(make("InsertHeader", header="env", value_literal="prod"), rec)
    assert inserted.headers[-1] == ("env", b"prod") and inserted.header("env") == b"prod"
    assert len(inserted.headers) == 5
    with pytest.raises(ConfigException) as err:
        make("InsertHeader", header="env")
    assert err.value.name == "value.literal"


# --- predicates -------------------------------------------------------------------------


def test_predicates() -> None:
    topic = PREDICATES["TopicNameMatches"]()
    topic.configure({"pattern": "orders|clicks-.*"})
    assert topic.test(record("v")) and topic.test(record("v", topic="clicks-x"))
    assert not topic.test(record("v", topic="orders-eu"))  # full match only
    header = PREDICATES["org.apache.kafka.connect.transforms.predicates.HasHeaderKey"]()
    header.configure({"name": "trace"})
    assert header.test(record("v", headers=(("trace", None),)))
    assert not header.test(record("v", headers=(("other", b"x"),)))
    tombstone = PREDICATES["RecordIsTombstone"]()
    tombstone.configure({})
    assert tombstone.test(record(None)) and not tombstone.test(record("v"))
    with pytest.raises(ConfigException) as err:
        PREDICATES["TopicNameMatches"]().configure({"pattern": "(unclosed"})
    assert err.value.name == "pattern"


def test_registry_names() -> None:
    for name in ("InsertField", "ReplaceField", "MaskField", "ExtractField", "HoistField",
                 "Flatten", "SetSchemaMetadata"):  # fmt: skip
        for side in ("$Key", "$Value"):
            short = TRANSFORMS[name + side]
            assert TRANSFORMS["org.apache.kafka.connect.transforms." + name + side] is short
            assert short.side == side[1:].lower()  # type: ignore[attr-defined]
    assert "InsertField" not in TRANSFORMS  # only the concrete variants


# --- the chain --------------------------------------------------------------------------


def test_chain_value_to_key_then_extract_field() -> None:
    # Kafka's documented example: copy a value field to the key, then unwrap it.
    chain = build_chain(
        {
            "transforms": "createKey,extractInt",
            "transforms.createKey.type": "org.apache.kafka.connect.transforms.ValueToKey",
            "transforms.createKey.fields": "id",
            "transforms.extractInt.type": "org.apache.kafka.connect.transforms.ExtractField$Key",
            "transforms.extractInt.field": "id",
        }
    )
    out = chain.apply(record(person(), PERSON))
    assert out is not None and out.key == 7 and out.key_schema == INT64_SCHEMA
    out = chain.apply(record({"id": "x-1", "v": 0}))
    assert out is not None and out.key == "x-1" and out.key_schema is None
    assert len(chain) == 2
    chain.close()


def test_chain_without_transforms_passes_records() -> None:
    chain = build_chain({"name": "c"})
    rec = record("v")
    assert chain.apply(rec) is rec and len(chain) == 0
    assert chain_errors({"name": "c"}) == {}


def test_filter_with_predicate_and_negate() -> None:
    base = {
        "transforms": "dropTombstones",
        "transforms.dropTombstones.type": "Filter",
        "transforms.dropTombstones.predicate": "isTombstone",
        "predicates": "isTombstone",
        "predicates.isTombstone.type": "RecordIsTombstone",
    }
    chain = build_chain(base)
    assert chain.apply(record(None)) is None
    live = record("v")
    assert chain.apply(live) is live
    negated = build_chain({**base, "transforms.dropTombstones.negate": "true"})
    assert negated.apply(live) is None
    assert negated.apply(record(None)) is not None
    explicit_false = build_chain({**base, "transforms.dropTombstones.negate": "false"})
    assert explicit_false.apply(record(None)) is None


def test_predicate_limits_a_transform() -> None:
    chain = build_chain(
        {
            "transforms": "route,mask",
            "transforms.route.type": "RegexRouter",
            "transforms.route.regex": "(.*)-raw",
            "transforms.route.replacement": "$1",
            "transforms.route.predicate": "notAudit",
            "transforms.mask.type": "MaskField$Value",
            "transforms.mask.fields": "email",
            "transforms.mask.predicate": "traced",
            "transforms.mask.negate": "true",
            "predicates": "notAudit,traced",
            "predicates.notAudit.type": "TopicNameMatches",
            "predicates.notAudit.pattern": "(?!audit).*",
            "predicates.traced.type": "HasHeaderKey",
            "predicates.traced.name": "trace",
        }
    )
    out = chain.apply(record({"email": "a@x"}, topic="orders-raw"))
    assert out is not None and out.topic == "orders" and out.value == {"email": ""}
    out = chain.apply(record({"email": "a@x"}, topic="audit-raw", headers=(("trace", b"1"),)))
    assert out is not None and out.topic == "audit-raw" and out.value == {"email": "a@x"}


CONFIG_ERRORS = [
    ({"transforms": "x"}, "transforms.x.type"),
    ({"transforms": "x", "transforms.x.type": "NoSuchTransform"}, "transforms.x.type"),
    ({"transforms": "mask", "transforms.mask.type": "MaskField$Value"}, "transforms.mask.fields"),
    (
        {"transforms": "r", "transforms.r.type": "RegexRouter", "transforms.r.regex": "(a)",
         "transforms.r.replacement": "$3"},
        "transforms.r.replacement",
    ),
    (
        {"transforms": "f", "transforms.f.type": "Filter", "transforms.f.predicate": "p"},
        "transforms.f.predicate",
    ),
    (
        {"transforms": "f", "transforms.f.type": "Filter", "transforms.f.negate": "true"},
        "transforms.f.negate",
    ),
    (
        {"transforms": "f", "transforms.f.type": "Filter", "transforms.f.predicate": "p",
         "transforms.f.negate": "maybe", "predicates": "p",
         "predicates.p.type": "RecordIsTombstone"},
        "transforms.f.negate",
    ),
    ({"predicates": "p"}, "predicates.p.type"),
    ({"predicates": "p", "predicates.p.type": "IsFriday"}, "predicates.p.type"),
    ({"predicates": "p", "predicates.p.type": "TopicNameMatches"}, "predicates.p.pattern"),
    ({"transforms": "a,a", "transforms.a.type": "Filter"}, "transforms"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "key"), CONFIG_ERRORS)
def test_chain_config_errors_name_the_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigException) as err:
        build_chain(config)
    assert err.value.name == key
    assert key in chain_errors(config)


def test_chain_errors_reports_every_key() -> None:
    errors = chain_errors(
        {
            "transforms": "mask,route,hoist,ok",
            "transforms.mask.type": "org.apache.kafka.connect.transforms.MaskField$Value",
            "transforms.route.type": "TimestampRouter",
            "transforms.route.timestamp.format": "yyyyQ",
            "transforms.route.predicate": "missing",
            "transforms.hoist.type": "HoistField$Value",
            "transforms.hoist.field": "f",
            "transforms.hoist.predicate": "bad",
            "transforms.ok.type": "Filter",
            "predicates": "bad",
            "predicates.bad.type": "TopicNameMatches",
            "predicates.bad.pattern": "[",
        }
    )
    assert set(errors) == {
        "transforms.mask.fields",
        "transforms.route.timestamp.format",
        "transforms.route.predicate",
        "predicates.bad.pattern",
    }
    assert all(errors.values())
    # A transform whose predicate is bad is not built (the error is on the predicate).
    with pytest.raises(ConfigException) as err:
        build_chain(
            {
                "transforms": "hoist",
                "transforms.hoist.type": "HoistField$Value",
                "transforms.hoist.field": "f",
                "transforms.hoist.predicate": "bad",
                "predicates": "bad",
                "predicates.bad.type": "TopicNameMatches",
            }
        )
    assert err.value.name == "predicates.bad.pattern"


def test_chain_close_closes_transforms_and_predicates() -> None:
    chain = build_chain(
        {
            "transforms": "f",
            "transforms.f.type": "Filter",
            "transforms.f.predicate": "p",
            "predicates": "p",
            "predicates.p.type": "RecordIsTombstone",
        }
    )
    closed: list[str] = []
    chain.stages[0].transform.close = lambda: closed.append("transform")  # type: ignore[method-assign]
    chain.predicates[0].close = lambda: closed.append("predicate")  # type: ignore[method-assign]
    chain.close()
    assert closed == ["transform", "predicate"]
