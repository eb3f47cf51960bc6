"""The schema registry's pure logic (version encoding, validation, identity, compatibility by strategy) and
the registry itself over the in-memory metadata store (numbering, deletes, races, limits, policies)."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from hypothesis import given, strategies as st

from broker.schema import (IncompatibleSchemaError, InvalidSchemaDataError, SchemaData, SchemaDefaults,
                           SchemaNotFoundError, SchemaPolicy, SchemaRegistry, SchemaTooLargeError, Strategy,
                           decode_version, effective_strategy, encode_version, live_versions)
from broker.schema.compatibility import check_consumer, check_producer, find_identical, same_schema, validate
from broker.schema.errors import SchemaHistoryFullError
from config_store import InvalidMetadataError, MemoryMetadataStore, Policies, SchemaStore, StoredSchema
from magnetar.topic_name import TopicName


def record(*fields: dict, name: str = "User", pretty: bool = False) -> bytes:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)}, indent=2 if pretty else None).encode()


def opt(name: str, kind: str = "string", **extra) -> dict:
    return {"name": name, "type": ["null", kind], **extra}


V1 = SchemaData("JSON", record(opt("name"), opt("age", "int")))
V2_OPTIONAL_DEFAULT = SchemaData("JSON", record(opt("name"), opt("age", "int"), opt("email", default=None)))
V2_NO_DEFAULT = SchemaData("JSON", record(opt("name"), opt("age", "int"), opt("email")))
V2_TYPE_CHANGE = SchemaData("JSON", record(opt("name"), opt("age", "string")))
V2_DROPPED = SchemaData("JSON", record(opt("name")))


def hist(*schemas: SchemaData) -> list[tuple[int, SchemaData]]:
    return list(enumerate(schemas))


# ---------------------------------------------------------------------------------------------- versions


@given(st.integers(min_value=0, max_value=(1 << 63) - 1))
def test_versions_are_8_bytes_big_endian(version: int) -> None:
    raw = encode_version(version)
    assert raw == struct.pack(">q", version) and len(raw) == 8
    assert decode_version(raw) == version
    assert decode_version(raw + bytes(56)) == version  # Pulsar < 2.4.0 wrote 64 bytes: the first 8 count


def test_version_bytes_examples_and_short_input() -> None:
    assert encode_version(0) == bytes(8)
    assert encode_version(1) == b"\x00" * 7 + b"\x01"
    assert encode_version(258) == b"\x00" * 6 + b"\x01\x02"
    with pytest.raises(ValueError, match="8 bytes"):
        decode_version(b"\x01")


def test_undefined_strategy_means_the_default_full() -> None:
    assert effective_strategy("UNDEFINED") is Strategy.FULL
    assert effective_strategy(None) is Strategy.FULL
    assert effective_strategy("BACKWARD") is Strategy.BACKWARD
    assert effective_strategy("UNDEFINED", Strategy.FORWARD) is Strategy.FORWARD


# ---------------------------------------------------------------------------------------------- validation, identity


@pytest.mark.parametrize("schema, complaint", [
    (SchemaData("AVRO", b"not json"), "not an Avro schema"),
    (SchemaData("AVRO", b'["null", "string"]'), "UNION"),
    (SchemaData("JSON", b"[1, 2]"), "not an Avro schema"),
    (SchemaData("INT32", b"x"), "should be zero"),
    (SchemaData("BYTES", b""), "cannot be stored"),
    (SchemaData("AUTO_CONSUME", b""), "cannot be stored"),
])
def test_invalid_definitions_are_refused(schema: SchemaData, complaint: str) -> None:
    with pytest.raises(InvalidSchemaDataError, match=complaint):
        validate(schema)


@pytest.mark.parametrize("schema", [
    V1, SchemaData("AVRO", V1.data), SchemaData("STRING", b"null"), SchemaData("STRING", b""),
    SchemaData("INT64", b""), SchemaData("JSON", b'{"type": "object", "id": "urn:x"}'),  # a pre-Avro JSON schema
])
def test_valid_definitions_pass(schema: SchemaData) -> None:
    validate(schema)


def test_identity_ignores_formatting_and_properties_but_not_type() -> None:
    pretty = SchemaData("JSON", record(opt("name"), opt("age", "int"), pretty=True), {"k": "v"})
    assert same_schema(V1, pretty)
    assert not same_schema(V1, SchemaData("AVRO", V1.data))
    assert not same_schema(V1, V2_OPTIONAL_DEFAULT)
    assert find_identical(hist(V1, V2_OPTIONAL_DEFAULT), pretty) == 0
    assert find_identical(hist(V1), V2_NO_DEFAULT) is None


# ---------------------------------------------------------------------------------------------- producers


@pytest.mark.parametrize("strategy, new, ok", [
    (Strategy.BACKWARD, V2_OPTIONAL_DEFAULT, True),
    (Strategy.FORWARD, V2_OPTIONAL_DEFAULT, True),
    (Strategy.FULL, V2_OPTIONAL_DEFAULT, True),
    (Strategy.BACKWARD, V2_NO_DEFAULT, False),  # the new reader has no default for what old data lacks
    (Strategy.FORWARD, V2_NO_DEFAULT, True),  # old readers ignore the added field
    (Strategy.FULL, V2_NO_DEFAULT, False),
    (Strategy.BACKWARD, V2_DROPPED, True),
    (Strategy.FORWARD, V2_DROPPED, False),  # old readers need "age", which has no default
    (Strategy.FULL, V2_TYPE_CHANGE, False),
    (Strategy.BACKWARD, V2_TYPE_CHANGE, False),
    (Strategy.ALWAYS_COMPATIBLE, V2_TYPE_CHANGE, True),
    (Strategy.ALWAYS_INCOMPATIBLE, V2_OPTIONAL_DEFAULT, False),
])
def test_record_evolution_by_strategy(strategy: Strategy, new: SchemaData, ok: bool) -> None:
    if ok:
        check_producer(hist(V1), new, strategy)
    else:
        with pytest.raises(IncompatibleSchemaError, match="Incompatible schema|ALWAYS_INCOMPATIBLE"):
            check_producer(hist(V1), new, strategy)


def test_an_empty_history_accepts_anything() -> None:
    check_producer([], V2_TYPE_CHANGE, Strategy.ALWAYS_INCOMPATIBLE)


def test_transitive_strategies_check_every_live_version() -> None:
    v0 = SchemaData("AVRO", record({"name": "f", "type": "int"}))
    v1 = SchemaData("AVRO", record())
    v2 = SchemaData("AVRO", record({"name": "f", "type": "string", "default": ""}))
    check_producer(hist(v0, v1), v2, Strategy.BACKWARD)  # v2 reads v1's data (f from its default)
    with pytest.raises(IncompatibleSchemaError, match="version 0"):  # but not v0's (int f)
        check_producer(hist(v0, v1), v2, Strategy.BACKWARD_TRANSITIVE)


ALL_CHECKED = [Strategy.BACKWARD, Strategy.FORWARD, Strategy.FULL, Strategy.BACKWARD_TRANSITIVE,
               Strategy.FORWARD_TRANSITIVE, Strategy.FULL_TRANSITIVE]


@pytest.mark.parametrize("kind", ["AVRO", "JSON"])
@pytest.mark.parametrize("strategy", ALL_CHECKED)
def test_record_names_take_no_part_in_resolution(kind: str, strategy: Strategy) -> None:
    """As Pulsar (Java Avro's Resolver): a record is matched by its fields, not its name or namespace."""
    fields = (opt("name"), opt("age", "int"))
    old = SchemaData(kind, record(*fields, name="User"))
    renamed = SchemaData(kind, json.dumps({"type": "record", "name": "User2", "namespace": "other",
                                           "fields": list(fields)}).encode())
    check_producer(hist(old), renamed, strategy)
    check_producer(hist(old, renamed), old, strategy)
    check_consumer(hist(old), renamed, strategy)


def nested(outer: str, inner: str, *extra: dict) -> SchemaData:
    """A record ``outer`` whose field "home" is a record ``inner`` with "city" and ``extra`` fields."""
    return SchemaData("AVRO", record(
        {"name": "home", "type": {"type": "record", "name": inner, "fields": [opt("city"), *extra]}}, name=outer))


def test_a_renamed_record_is_still_checked_field_by_field() -> None:
    old = SchemaData("AVRO", record(opt("name"), name="User"))
    check_producer(hist(nested("User", "Address")), nested("Person", "Place"), Strategy.FULL)
    with pytest.raises(IncompatibleSchemaError, match="reader_field_missing_default_value"):
        check_producer(hist(nested("User", "Address")), nested("Person", "Place", opt("zip")), Strategy.BACKWARD)
    with pytest.raises(IncompatibleSchemaError, match="reader_field_missing_default_value"):
        check_producer(hist(old), SchemaData("AVRO", record(opt("name"), opt("age"), name="User2")),
                       Strategy.BACKWARD)


def named(kind: str, name: str, namespace: str = "", **extra) -> SchemaData:
    definition = {"type": kind, "name": name, **({"namespace": namespace} if namespace else {}), **extra}
    return SchemaData("AVRO", record({"name": "f", "type": definition}))


@pytest.mark.parametrize("strategy", [Strategy.BACKWARD, Strategy.FORWARD, Strategy.FULL])
@pytest.mark.parametrize("kind, extra", [("enum", {"symbols": ["A", "B"]}), ("fixed", {"size": 4})])
def test_enum_and_fixed_names_are_still_compared(strategy: Strategy, kind: str, extra: dict) -> None:
    with pytest.raises(IncompatibleSchemaError, match="name_mismatch"):
        check_producer(hist(named(kind, "Colour", **extra)), named(kind, "Color", **extra), strategy)
    # Unqualified names are compared (the specification's and Java Avro's rule): a namespace alone may change.
    check_producer(hist(named(kind, "Colour", "a", **extra)), named(kind, "Colour", "b", **extra), strategy)


def test_fixed_sizes_are_still_compared() -> None:
    with pytest.raises(IncompatibleSchemaError, match="fixed_size_mismatch"):
        check_producer(hist(named("fixed", "Id", size=4)), named("fixed", "Id", size=8), Strategy.FULL)


def test_a_type_change_is_refused_naming_both_types() -> None:
    with pytest.raises(IncompatibleSchemaError, match="exists schema type JSON .*new schema type STRING"):
        check_producer(hist(V1), SchemaData("STRING", b"null"), Strategy.FULL)
    check_producer(hist(V1), SchemaData("STRING", b"null"), Strategy.ALWAYS_COMPATIBLE)


@pytest.mark.parametrize("strategy", [Strategy.FULL, Strategy.BACKWARD, Strategy.FULL_TRANSITIVE])
def test_primitive_types_are_compatible_only_with_themselves(strategy: Strategy) -> None:
    check_producer(hist(SchemaData("STRING", b"")), SchemaData("STRING", b"null"), strategy)
    with pytest.raises(IncompatibleSchemaError):
        check_producer(hist(SchemaData("STRING", b"")), SchemaData("INT32", b""), strategy)
    with pytest.raises(IncompatibleSchemaError):
        check_producer(hist(SchemaData("INT64", b"")), SchemaData("INT32", b""), strategy)


def test_legacy_json_schemas_are_checked_by_id() -> None:
    old = SchemaData("JSON", b'{"type": "object", "id": "urn:a"}')
    check_producer(hist(old), SchemaData("JSON", b'{"type": "object", "id": "urn:a", "x": 1}'), Strategy.FULL)
    check_producer(hist(old), V1, Strategy.FULL)  # legacy -> Avro is accepted, as Pulsar does
    with pytest.raises(IncompatibleSchemaError, match="id"):
        check_producer(hist(old), SchemaData("JSON", b'{"type": "object", "id": "urn:b"}'), Strategy.FULL)


# ---------------------------------------------------------------------------------------------- consumers


def test_consumers_are_checked_backward_against_the_latest() -> None:
    check_consumer(hist(V1), V2_OPTIONAL_DEFAULT, Strategy.FULL)  # can read v1's data
    with pytest.raises(IncompatibleSchemaError):
        check_consumer(hist(V1), V2_NO_DEFAULT, Strategy.FORWARD)  # FORWARD: consumers still check BACKWARD
    check_consumer(hist(V1), V1, Strategy.ALWAYS_INCOMPATIBLE)  # identical: always accepted
    check_consumer(hist(V1), V2_TYPE_CHANGE, Strategy.ALWAYS_COMPATIBLE)
    with pytest.raises(IncompatibleSchemaError):
        check_consumer(hist(V1), V2_OPTIONAL_DEFAULT, Strategy.ALWAYS_INCOMPATIBLE)


# ---------------------------------------------------------------------------------------------- storage model


def test_stored_schema_round_trip_and_strict_decoding() -> None:
    stored = StoredSchema("JSON", b"\x00\xffbinary", {"k": "v"}, 123, False)
    assert StoredSchema.from_json(stored.to_json()) == stored
    with pytest.raises(InvalidMetadataError, match="base64"):
        StoredSchema.from_json(b'{"version": 1, "type": "JSON", "data": "!!"}')
    with pytest.raises(InvalidMetadataError, match="'type'"):
        StoredSchema.from_json(b'{"version": 1, "data": ""}')


def test_namespace_schema_policies_round_trip() -> None:
    p = Policies(schema_compatibility_strategy="BACKWARD", is_allow_auto_update_schema=False,
                 schema_validation_enforced=True)
    obj = json.loads(p.to_json())
    assert obj["schema_compatibility_strategy"] == "BACKWARD"
    assert obj["is_allow_auto_update_schema"] is False and obj["schema_validation_enforced"] is True
    assert Policies.from_json(p.to_json()) == p
    assert Policies.from_json(b'{"version": 1}').schema_compatibility_strategy == "UNDEFINED"
    with pytest.raises(InvalidMetadataError, match="schema_compatibility_strategy"):
        Policies.from_json(b'{"version": 1, "schema_compatibility_strategy": "SOMETIMES"}')
    assert SchemaDefaults().policy(None) == SchemaPolicy(Strategy.FULL, True, False)
    assert SchemaDefaults().policy(p) == SchemaPolicy(Strategy.BACKWARD, False, True)


# ---------------------------------------------------------------------------------------------- the registry


TOPIC = TopicName.parse("persistent://public/default/orders")


@pytest.fixture
async def registry():
    async with MemoryMetadataStore() as store:
        now = iter(range(1000, 10_000))
        yield SchemaRegistry(SchemaStore(store), clock_ms=lambda: next(now), versions_max=6)


async def test_versions_are_numbered_and_identical_schemas_reuse_theirs(registry: SchemaRegistry) -> None:
    assert await registry.put_if_absent(TOPIC, V1, Strategy.FULL) == 0
    assert await registry.put_if_absent(TOPIC, V2_OPTIONAL_DEFAULT, Strategy.FULL) == 1
    assert await registry.put_if_absent(TOPIC, V1, Strategy.FULL) == 0  # identical to version 0
    number, latest = await registry.get(TOPIC)
    assert number == 1 and latest.data == V2_OPTIONAL_DEFAULT.data and latest.timestamp_ms > 0
    partition = TopicName.parse("non-persistent://public/default/orders-partition-3")
    assert (await registry.get(partition, 0))[1].data == V1.data  # partitions and domains share the schema


async def test_an_incompatible_schema_stores_nothing(registry: SchemaRegistry) -> None:
    await registry.put_if_absent(TOPIC, V1, Strategy.FULL)
    with pytest.raises(IncompatibleSchemaError):
        await registry.put_if_absent(TOPIC, V2_TYPE_CHANGE, Strategy.FULL)
    with pytest.raises(InvalidSchemaDataError):
        await registry.put_if_absent(TOPIC, SchemaData("AVRO", b"{"), Strategy.ALWAYS_COMPATIBLE)
    assert [v for v, _ in await registry.history(TOPIC)] == [0]


async def test_soft_and_forced_deletes(registry: SchemaRegistry) -> None:
    await registry.put_if_absent(TOPIC, V1, Strategy.FULL)
    assert await registry.delete(TOPIC) == 1  # a deletion marker takes version 1
    assert not await registry.has_schema(TOPIC)
    with pytest.raises(SchemaNotFoundError):
        await registry.get(TOPIC)
    with pytest.raises(SchemaNotFoundError):
        await registry.get(TOPIC, 0)  # versions before a delete are not served
    with pytest.raises(SchemaNotFoundError):
        await registry.delete(TOPIC)
    # After a delete nothing is checked against the old versions: any schema starts a new history.
    assert await registry.put_if_absent(TOPIC, SchemaData("STRING", b""), Strategy.FULL) == 2
    assert live_versions(await registry.history(TOPIC))[0][0] == 2
    assert await registry.delete(TOPIC, force=True) == 2
    assert await registry.history(TOPIC) == []
    assert await registry.put_if_absent(TOPIC, V1, Strategy.FULL) == 0  # numbering starts again
    with pytest.raises(SchemaNotFoundError):
        await registry.delete(TopicName.parse("persistent://public/default/none"), force=True)


async def test_racing_writers_get_distinct_versions(registry: SchemaRegistry) -> None:
    schemas = [SchemaData("JSON", record(opt("name"), *[opt(f"f{i}", default=None) for i in range(n)]))
               for n in range(4)]
    versions = await asyncio.gather(*(registry.put_if_absent(TOPIC, s, Strategy.ALWAYS_COMPATIBLE) for s in schemas))
    assert sorted(versions) == [0, 1, 2, 3]
    assert len(await registry.history(TOPIC)) == 4


async def test_limits(registry: SchemaRegistry) -> None:
    with pytest.raises(SchemaTooLargeError, match="maximum"):
        await registry.put_if_absent(TOPIC, SchemaData("STRING", b"x" * (256 * 1024 + 1)), Strategy.FULL)
    for i in range(6):
        await registry.put_if_absent(TOPIC, SchemaData("STRING", f"{i}".encode()), Strategy.FULL)
    with pytest.raises(SchemaHistoryFullError, match="force=true"):
        await registry.put_if_absent(TOPIC, SchemaData("STRING", b"more"), Strategy.FULL)


async def test_producer_and_consumer_policies(registry: SchemaRegistry) -> None:
    enforced = SchemaPolicy(validation_enforced=True)
    assert await registry.version_for_producer(TOPIC, None, enforced) is None  # no schema yet: fine
    frozen = SchemaPolicy(allow_auto_update=False)
    with pytest.raises(IncompatibleSchemaError, match="auto updating is disabled"):
        await registry.version_for_producer(TOPIC, V1, frozen)
    with pytest.raises(IncompatibleSchemaError, match="empty\\(BYTES\\) schema"):
        await registry.check_for_consumer(TOPIC, V1, SchemaPolicy(), topic_idle=False)
    await registry.check_for_consumer(TOPIC, V1, SchemaPolicy(), topic_idle=True)  # stored as version 0
    assert await registry.version_for_producer(TOPIC, V1, frozen) == 0
    with pytest.raises(IncompatibleSchemaError, match="without a schema"):
        await registry.version_for_producer(TOPIC, None, enforced)
    assert await registry.version_for_producer(TOPIC, None, SchemaPolicy()) is None
    with pytest.raises(IncompatibleSchemaError):
        await registry.check_for_consumer(TOPIC, V2_TYPE_CHANGE, SchemaPolicy(), topic_idle=True)
    await registry.check_compatibility(TOPIC, V2_OPTIONAL_DEFAULT, Strategy.FULL)
    assert [v for v, _ in await registry.history(TOPIC)] == [0]  # checks store nothing
